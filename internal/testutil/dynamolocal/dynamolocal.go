// Package dynamolocal runs AWS's DynamoDB Local (Java, in memory) for tests,
// on a free loopback port. One process is shared by a test binary (call
// StopAll from TestMain); Dedicated starts one a test may kill.
package dynamolocal

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// Instance is a running DynamoDB Local.
type Instance struct {
	Endpoint string
	cmd      *exec.Cmd
	done     chan struct{}
}

// Client returns an SDK client for the instance.
func (i *Instance) Client() *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(i.Endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("local", "local", ""),
		// DynamoDB Local's CRC32 headers do not always match; the checks
		// only produce warnings against it.
		DisableValidateResponseChecksum: true,
		RetryMaxAttempts:                2,
	})
}

// Stop kills the instance (tests use it to simulate an outage).
func (i *Instance) Stop() {
	select {
	case <-i.done:
		return
	default:
	}
	_ = i.cmd.Process.Kill()
	<-i.done
}

var (
	mu     sync.Mutex
	shared *Instance
)

// Start returns the test binary's shared instance, starting it on first
// use. Missing Java or npm fails the test: the suite never skips silently.
func Start(tb testing.TB) *Instance {
	tb.Helper()
	mu.Lock()
	defer mu.Unlock()
	if shared == nil {
		inst, err := start()
		if err != nil {
			tb.Fatalf("DynamoDB Local: %v", err)
		}
		shared = inst
	}
	return shared
}

// StopAll stops the shared instance; call it from TestMain.
func StopAll() {
	mu.Lock()
	defer mu.Unlock()
	if shared != nil {
		shared.Stop()
		shared = nil
	}
}

// Dedicated starts an instance of the test's own, stopped when it ends.
func Dedicated(tb testing.TB) *Instance {
	tb.Helper()
	inst, err := start()
	if err != nil {
		tb.Fatalf("DynamoDB Local: %v", err)
	}
	tb.Cleanup(inst.Stop)
	return inst
}

func start() (*Instance, error) {
	if _, err := exec.LookPath("java"); err != nil {
		return nil, fmt.Errorf("java is not installed (apt-get install openjdk-17-jre-headless)")
	}
	dir, err := jarDir()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	cmd := exec.Command("java", "-Djava.library.path=./DynamoDBLocal_lib", "-jar", "DynamoDBLocal.jar",
		"-inMemory", "-port", strconv.Itoa(port))
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	inst := &Instance{Endpoint: "http://127.0.0.1:" + strconv.Itoa(port), cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(inst.done) }()
	client := inst.Client()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := client.ListTables(ctx, &dynamodb.ListTablesInput{})
		cancel()
		if err == nil {
			return inst, nil
		}
		select {
		case <-inst.done:
			return nil, fmt.Errorf("exited: %s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			inst.Stop()
			return nil, fmt.Errorf("not ready after 30 s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// jarDir returns $PML_DYNAMODB_LOCAL_DIR or runs scripts/dynamodb-local.sh.
func jarDir() (string, error) {
	if d := os.Getenv("PML_DYNAMODB_LOCAL_DIR"); d != "" {
		return d, nil
	}
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "..", "scripts", "dynamodb-local.sh")
	var stderr bytes.Buffer
	cmd := exec.Command("bash", script)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s: %v: %s", script, err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// TableName returns a table name unique to the test.
func TableName(tb testing.TB) string {
	name := strings.NewReplacer("/", "_", " ", "_").Replace(tb.Name())
	if len(name) > 200 {
		name = name[:200]
	}
	return fmt.Sprintf("%s_%d", name, time.Now().UnixNano()%1e9)
}
