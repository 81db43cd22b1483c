package xraysink_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/pml-sandbox/pml/internal/testutil/xraylisten"
	"github.com/pml-sandbox/pml/internal/xraysink"
)

// TestInstrumentAWS: inside a traced Lambda invocation an AWS call is a
// subsegment of the invocation's segment, and the request carries the
// trace on; outside one nothing is sent.
func TestInstrumentAWS(t *testing.T) {
	l := xraylisten.Start(t)
	t.Setenv("AWS_XRAY_DAEMON_ADDRESS", l.Addr())
	got := make(chan string, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("X-Amzn-Trace-Id")
		w.Header().Set("x-amzn-RequestId", "req-1")
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		_, _ = w.Write([]byte(`{"TableNames":[]}`))
	}))
	defer srv.Close()
	cfg := aws.Config{Region: "eu-west-1", Credentials: credentials.NewStaticCredentialsProvider("a", "b", ""), BaseEndpoint: aws.String(srv.URL)}
	xraysink.InstrumentAWS(&cfg)
	db := dynamodb.NewFromConfig(cfg)

	if _, err := db.ListTables(context.Background(), &dynamodb.ListTablesInput{}); err != nil {
		t.Fatal(err)
	}
	if h := <-got; h != "" {
		t.Fatalf("untraced call sent trace header %q", h)
	}
	//lint:ignore SA1029 the key aws-lambda-go sets, as a Lambda invocation's context has it
	ctx := context.WithValue(context.Background(), "x-amzn-trace-id", "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1")
	if _, err := db.ListTables(ctx, &dynamodb.ListTablesInput{}); err != nil {
		t.Fatal(err)
	}
	sent := <-got
	segs, ok := l.Wait(3*time.Second, func(s []xraylisten.Segment) bool { return len(s) >= 1 })
	if !ok || len(segs) != 1 {
		t.Fatalf("documents %+v", segs)
	}
	s := segs[0]
	if s.Name != "DynamoDB" || s.Type != "subsegment" || s.ParentID != "53995c3f42cd8ad8" || s.TraceID != "1-5759e988-bd862e3fe1be46a994272793" || s.EndTime < s.StartTime || s.Error || s.Fault {
		t.Fatalf("subsegment %+v", s)
	}
	if !strings.Contains(string(s.Raw), `"operation":"ListTables"`) || !strings.Contains(string(s.Raw), `"request_id":"req-1"`) {
		t.Fatalf("aws fields missing: %s", s.Raw)
	}
	if want := "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=" + s.ID + ";Sampled=1"; sent != want {
		t.Fatalf("request trace header %q; want %q", sent, want)
	}
}
