// Package moto starts moto's server (moto_server, the Python AWS service
// emulator on the machine's image) for tests that need AWS Secrets
// Manager: a real HTTP service speaking the AWS protocol, including
// PutSecretValue's refusal of a reused ClientRequestToken with another
// value, on a free loopback port. A missing moto_server fails the test:
// the suite never skips it silently.
package moto

import (
	"context"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/pml-sandbox/pml/internal/testutil/syncbuf"
)

// Server is a running moto_server.
type Server struct {
	// Endpoint is its base URL, for AWS_ENDPOINT_URL_SECRETS_MANAGER.
	Endpoint string
}

// Env is the environment a process needs to use this server as Secrets
// Manager with dummy credentials.
func (s *Server) Env() []string {
	return []string{"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=testing", "AWS_SECRET_ACCESS_KEY=testing",
		"AWS_ENDPOINT_URL_SECRETS_MANAGER=" + s.Endpoint}
}

// Start starts moto_server; it is stopped when the test ends.
func Start(tb testing.TB) *Server {
	tb.Helper()
	bin, err := exec.LookPath("moto_server")
	if err != nil {
		tb.Fatalf("moto_server is not installed (pip install 'moto[server]'): %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	out := &syncbuf.Buffer{}
	cmd := exec.Command(bin, "-H", "127.0.0.1", "-p", strconv.Itoa(port))
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		tb.Fatalf("moto_server: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	s := &Server{Endpoint: "http://127.0.0.1:" + strconv.Itoa(port)}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(s.Endpoint + "/moto-api/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		select {
		case <-done:
			tb.Fatalf("moto_server exited: %s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("moto_server did not answer on %s: %s", s.Endpoint, out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Client is a Secrets Manager client of this server.
func (s *Server) Client() *secretsmanager.Client {
	return secretsmanager.New(secretsmanager.Options{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("testing", "testing", ""),
		BaseEndpoint: aws.String(s.Endpoint),
	})
}

// CreateSecret creates an empty secret (no value yet, as an operator
// creates one for pml mcp login --secret) and returns its ARN.
func (s *Server) CreateSecret(tb testing.TB, name string) string {
	tb.Helper()
	out, err := s.Client().CreateSecret(context.Background(), &secretsmanager.CreateSecretInput{Name: aws.String(name)})
	if err != nil {
		tb.Fatal(err)
	}
	return aws.ToString(out.ARN)
}

// PutSecret creates a secret holding value and returns its ARN.
func (s *Server) PutSecret(tb testing.TB, name, value string) string {
	tb.Helper()
	out, err := s.Client().CreateSecret(context.Background(), &secretsmanager.CreateSecretInput{Name: aws.String(name), SecretString: aws.String(value)})
	if err != nil {
		tb.Fatal(err)
	}
	return aws.ToString(out.ARN)
}

// Rotate gives the secret id (its ARN or name) a new current value, as a
// rotation does.
func (s *Server) Rotate(tb testing.TB, id, value string) {
	tb.Helper()
	if _, err := s.Client().PutSecretValue(context.Background(), &secretsmanager.PutSecretValueInput{SecretId: aws.String(id), SecretString: aws.String(value)}); err != nil {
		tb.Fatal(err)
	}
}
