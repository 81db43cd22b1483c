package lambdaevents_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/httpapi"
	"github.com/pml-sandbox/pml/internal/lambdaevents"
	"github.com/pml-sandbox/pml/internal/testutil/enginetest"
)

var (
	handler func(context.Context, json.RawMessage) (any, error)
	engine  *guest.Engine
)

func TestMain(m *testing.M) {
	enginetest.Main(m, func(eng *guest.Engine) {
		engine = eng
		log := slog.New(slog.DiscardHandler)
		svc := executor.New(eng, executor.Options{Sources: []execution.ToolSource{demoserver.Source{}}, Logger: log})
		handler = lambdaevents.Handler(lambdaevents.Options{HTTP: httpapi.New(httpapi.Options{Service: svc, Logger: log}), Service: svc, Logger: log})
	})
}

func fixture(t *testing.T, name string) json.RawMessage {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// lambdaCtx carries a deadline, as the Lambda runtime's context does.
func lambdaCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func decodeBody(t *testing.T, body string) execution.Response {
	t.Helper()
	var r execution.Response
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	return r
}

func TestHTTPAPIv2(t *testing.T) {
	tests := []struct {
		fixture string
		status  int
		check   func(t *testing.T, resp events.APIGatewayV2HTTPResponse)
	}{
		{"http-v2-execute.json", 200, func(t *testing.T, resp events.APIGatewayV2HTTPResponse) {
			r := decodeBody(t, resp.Body)
			if !r.OK || string(r.Result) != "42" || len(r.Calls) != 1 || resp.Headers["X-Execution-Id"] != r.ExecutionID {
				t.Fatalf("%+v", resp)
			}
		}},
		{"http-v2-execute-base64.json", 200, func(t *testing.T, resp events.APIGatewayV2HTTPResponse) {
			if r := decodeBody(t, resp.Body); string(r.Result) != "42" {
				t.Fatalf("%+v", r)
			}
		}},
		{"http-v2-execute-stage.json", 200, func(t *testing.T, resp events.APIGatewayV2HTTPResponse) {
			if r := decodeBody(t, resp.Body); string(r.Result) != "42" {
				t.Fatalf("stage prefix not stripped: %+v", resp)
			}
		}},
		{"http-v2-tools-dts.json", 200, func(t *testing.T, resp events.APIGatewayV2HTTPResponse) {
			if !strings.Contains(resp.Body, "declare const mcp") || !strings.HasPrefix(resp.Headers["Content-Type"], "text/plain") || resp.IsBase64Encoded {
				t.Fatalf("%+v", resp)
			}
		}},
		{"http-v2-execution-get.json", 404, func(t *testing.T, resp events.APIGatewayV2HTTPResponse) {
			if !strings.Contains(resp.Body, "NOT_FOUND") {
				t.Fatalf("%+v", resp)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			out, err := handler(lambdaCtx(t), fixture(t, tt.fixture))
			if err != nil {
				t.Fatal(err)
			}
			resp, ok := out.(events.APIGatewayV2HTTPResponse)
			if !ok {
				t.Fatalf("answered %T, want an HTTP API response", out)
			}
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, resp.Body)
			}
			tt.check(t, resp)
		})
	}
}

func TestRESTAPIv1(t *testing.T) {
	out, err := handler(lambdaCtx(t), fixture(t, "rest-v1-execute.json"))
	if err != nil {
		t.Fatal(err)
	}
	resp, ok := out.(events.APIGatewayProxyResponse)
	if !ok || resp.StatusCode != 200 {
		t.Fatalf("%T %+v", out, out)
	}
	if r := decodeBody(t, resp.Body); string(r.Result) != "[2,4,6]" {
		t.Fatalf("%+v", r)
	}
}

func TestSQSPartialBatchFailure(t *testing.T) {
	out, err := handler(lambdaCtx(t), fixture(t, "sqs-batch.json"))
	if err != nil {
		t.Fatal(err)
	}
	resp, ok := out.(events.SQSEventResponse)
	if !ok {
		t.Fatalf("answered %T", out)
	}
	got := map[string]bool{}
	for _, f := range resp.BatchItemFailures {
		got[f.ItemIdentifier] = true
	}
	// The malformed message and the timed-out run are retried; the run that
	// succeeded and the script that threw (a final answer) are not.
	want := map[string]bool{"2e1424d4-f796-459a-8184-9c92662be6da": true, "5c3a8e7d-1f2b-4d6e-9a8c-7b6e5d4c3b2a": true}
	if len(got) != len(want) || !got["2e1424d4-f796-459a-8184-9c92662be6da"] || !got["5c3a8e7d-1f2b-4d6e-9a8c-7b6e5d4c3b2a"] {
		t.Fatalf("batch item failures %v, want %v", got, want)
	}
}

func TestEventBridgeAndDirectInvoke(t *testing.T) {
	for name, want := range map[string]string{"eventbridge.json": "3", "invoke.json": `{"sum":3}`} {
		t.Run(name, func(t *testing.T) {
			out, err := handler(lambdaCtx(t), fixture(t, name))
			if err != nil {
				t.Fatal(err)
			}
			r, ok := out.(*execution.Response)
			if !ok || !r.OK || string(r.Result) != want {
				t.Fatalf("%T %+v", out, out)
			}
		})
	}
}

func TestBadEvents(t *testing.T) {
	tests := []struct{ name, payload string }{
		{"not JSON", `{`},
		{"not an object", `[1,2]`},
		{"unknown shape", `{"hello":"world"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := handler(lambdaCtx(t), json.RawMessage(tt.payload)); err == nil {
				t.Fatal("accepted a bad event")
			}
		})
	}
	// A direct invocation with an empty code is answered with a structured
	// error, not a crash.
	out, err := handler(lambdaCtx(t), json.RawMessage(`{"code": ""}`))
	if err != nil {
		t.Fatal(err)
	}
	if r := out.(*execution.Response); r.OK || r.Error.Code != "INVALID_REQUEST" {
		t.Fatalf("%+v", r)
	}
}

func TestDeadlineComesFromTheLambdaContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 900*time.Millisecond)
	defer cancel()
	start := time.Now()
	out, err := handler(ctx, json.RawMessage(`{"code": "while (true) {}"}`))
	if err != nil {
		t.Fatal(err)
	}
	r := out.(*execution.Response)
	// 900 ms of Lambda time minus the 500 ms flush margin: the answer is
	// written before Lambda's own deadline (ctx's) would end the
	// invocation.
	if r.OK || r.Error.Code != "TIMEOUT" || ctx.Err() != nil {
		t.Fatalf("%+v after %v (Lambda's deadline: %v)", r.Error, time.Since(start), ctx.Err())
	}
}

// TestRequestFieldsReachEveryFrontEnd: the Lambda's events decode through
// the same request type as HTTP, so lang and call_detail work there too.
func TestRequestFieldsReachEveryFrontEnd(t *testing.T) {
	out, err := handler(lambdaCtx(t), json.RawMessage(`{"code": "const s: number = await mcp.demo.add({a: 1, b: 2}); return s", "lang": "ts", "call_detail": "summary"}`))
	if err != nil {
		t.Fatal(err)
	}
	r, ok := out.(*execution.Response)
	if !ok || !r.OK || string(r.Result) != "3" || r.Calls != nil || r.CallSummary == nil || r.CallSummary.Total != 1 {
		t.Fatalf("%T %+v", out, out)
	}
}
