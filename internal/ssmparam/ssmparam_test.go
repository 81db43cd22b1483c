package ssmparam_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/pml-sandbox/pml/internal/ssmparam"
)

func TestGet(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		if r.Header.Get("X-Amz-Target") != "AmazonSSM.GetParameter" || r.Header.Get("Content-Type") != "application/x-amz-json-1.1" ||
			!strings.Contains(r.Header.Get("Authorization"), "Credential=AKID/") || !strings.Contains(r.Header.Get("Authorization"), "/eu-west-1/ssm/aws4_request") {
			t.Errorf("request headers %v", r.Header)
		}
		var in struct {
			Name           string
			WithDecryption bool
		}
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &in)
		switch {
		case !in.WithDecryption:
			t.Errorf("body %s", b)
		case in.Name == "/flaky" && n.Load() == 1:
			w.WriteHeader(500)
		case in.Name == "/pml/servers" || in.Name == "/flaky":
			_, _ = w.Write([]byte(`{"Parameter":{"Name":"/pml/servers","Value":"{\"demo\":{}}","Type":"SecureString"}}`))
		default:
			w.WriteHeader(400)
			_, _ = w.Write([]byte(`{"__type":"ParameterNotFound","message":"no such parameter"}`))
		}
	}))
	defer srv.Close()
	cfg := aws.Config{Region: "eu-west-1", Credentials: credentials.NewStaticCredentialsProvider("AKID", "secret", ""), BaseEndpoint: aws.String(srv.URL)}
	ctx := context.Background()
	if v, err := ssmparam.Get(ctx, cfg, "/pml/servers"); err != nil || v != `{"demo":{}}` {
		t.Fatalf("value %q, %v", v, err)
	}
	n.Store(0)
	if v, err := ssmparam.Get(ctx, cfg, "/flaky"); err != nil || v == "" || n.Load() != 2 {
		t.Fatalf("flaky: value %q, %v after %d requests", v, err, n.Load())
	}
	_, err := ssmparam.Get(ctx, cfg, "/missing")
	var se *ssmparam.Error
	if !errors.As(err, &se) || se.Type != "ParameterNotFound" || se.Status != 400 {
		t.Fatalf("missing: %v", err)
	}
}

func TestEndpoint(t *testing.T) {
	for region, want := range map[string]string{"eu-west-1": "https://ssm.eu-west-1.amazonaws.com", "cn-north-1": "https://ssm.cn-north-1.amazonaws.com.cn"} {
		if got, _ := ssmparam.Endpoint(aws.Config{Region: region}); got != want {
			t.Errorf("%s: %s; want %s", region, got, want)
		}
	}
	t.Setenv("AWS_ENDPOINT_URL_SSM", "http://127.0.0.1:9/")
	if got, _ := ssmparam.Endpoint(aws.Config{Region: "eu-west-1"}); got != "http://127.0.0.1:9" {
		t.Errorf("override: %s", got)
	}
}
