package lambdaevents_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/httpapi"
	"github.com/pml-sandbox/pml/internal/lambdaevents"
	"github.com/pml-sandbox/pml/internal/testutil/fronttest"
)

// restEvent is a REST API event for POST path with body.
func restEvent(t *testing.T, path, body string, headers map[string]string) json.RawMessage {
	t.Helper()
	ev := events.APIGatewayProxyRequest{Resource: path, Path: path, HTTPMethod: "POST", Body: body,
		Headers: map[string]string{"Content-Type": "application/json"}}
	for k, v := range headers {
		ev.Headers[k] = v
	}
	ev.RequestContext.Stage = "prod"
	ev.RequestContext.Identity.UserArn = "arn:aws:iam::123456789012:user/dev"
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// prelude reads a streamed response's prelude (the JSON before eight NUL
// bytes).
func prelude(t *testing.T, r *bufio.Reader) map[string]any {
	t.Helper()
	var head bytes.Buffer
	for !bytes.HasSuffix(head.Bytes(), make([]byte, 8)) {
		b, err := r.ReadByte()
		if err != nil {
			t.Fatalf("no prelude: %q %v", head.String(), err)
		}
		head.WriteByte(b)
	}
	var p map[string]any
	if err := json.Unmarshal(bytes.TrimRight(head.Bytes(), "\x00"), &p); err != nil {
		t.Fatalf("prelude %q: %v", head.String(), err)
	}
	return p
}

// TestRESTStreamed: with StreamREST, a REST API event is answered as a
// streamed response — its prelude as API Gateway reads it, then the body
// as the handler writes it: an event stream's events arrive while the
// script still runs, and the plain JSON answers as before.
func TestRESTStreamed(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	g := fronttest.GateSource{Open: make(chan struct{})}
	svc := executor.New(engine, executor.Options{Sources: []execution.ToolSource{demoserver.Source{}, g}, Logger: log})
	h := lambdaevents.Handler(lambdaevents.Options{HTTP: httpapi.New(httpapi.Options{Service: svc, Logger: log}), Service: svc, Logger: log, StreamREST: true})

	out, err := h(lambdaCtx(t), fixture(t, "rest-v1-execute.json"))
	if err != nil {
		t.Fatal(err)
	}
	sr, ok := out.(*events.APIGatewayProxyStreamingResponse)
	if !ok {
		t.Fatalf("answer %T, want a streamed response", out)
	}
	if sr.StatusCode != 200 || sr.MultiValueHeaders["Content-Type"][0] != "application/json" || sr.MultiValueHeaders["Connection"] != nil {
		t.Fatalf("head %d %v", sr.StatusCode, sr.MultiValueHeaders)
	}
	r := bufio.NewReader(sr)
	if p := prelude(t, r); p["statusCode"] != 200.0 {
		t.Fatalf("prelude %v", p)
	}
	body, _ := io.ReadAll(r)
	if doc := decodeBody(t, string(body)); !doc.OK || string(doc.Result) != "[2,4,6]" {
		t.Fatalf("body %s", body)
	}

	// An event stream: the first call_end is read before the gate opens.
	code := `const a = await mcp.demo.echo({n: 1}); await mcp.gate.wait({}); return "done"`
	out, err = h(lambdaCtx(t), restEvent(t, "/execute", `{"code": `+strings.TrimSpace(toJSON(code))+`}`, map[string]string{"Accept": "text/event-stream"}))
	if err != nil {
		t.Fatal(err)
	}
	sr = out.(*events.APIGatewayProxyStreamingResponse)
	defer sr.Close()
	if sr.MultiValueHeaders["Content-Type"][0] != "text/event-stream" {
		t.Fatalf("head %v", sr.MultiValueHeaders)
	}
	r = bufio.NewReader(sr)
	prelude(t, r)
	var once sync.Once
	seen, last := "", ""
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			break
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			last = data
		}
		if name, ok := strings.CutPrefix(strings.TrimSpace(line), "event: "); ok {
			seen += name + " "
			if name == "call_start" && strings.Count(seen, "call_start") == 2 {
				once.Do(func() { close(g.Open) })
			}
		}
	}
	// Had the stream been held back, the gate would have stayed shut and
	// the script ended at its deadline.
	if seen != "call_start call_end call_start call_end result " || !strings.Contains(last, `"result":"done"`) {
		t.Fatalf("events %q, result %s", seen, last)
	}
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// runner records the runs it is asked for.
type runner struct {
	mu  sync.Mutex
	ids []string
	err error
}

func (r *runner) Run(_ context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids = append(r.ids, id)
	return r.err
}

func (r *runner) Sweep(context.Context) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids = append(r.ids, "sweep")
	return 2, r.err
}

// TestSweepEvent: the schedule's {"sweep": {}} reaches the runner's
// sweep; anything more is answered INVALID_REQUEST, a store failure fails
// the invocation.
func TestSweepEvent(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	svc := executor.New(engine, executor.Options{Logger: log})
	run := &runner{}
	h := lambdaevents.Handler(lambdaevents.Options{HTTP: httpapi.New(httpapi.Options{Service: svc, Logger: log}), Service: svc, Logger: log, Runner: run})
	if out, err := h(lambdaCtx(t), json.RawMessage(`{"sweep": {}}`)); err != nil || toJSON(out) != `{"swept":2}` {
		t.Fatalf("%v %v", out, err)
	}
	if out, err := h(lambdaCtx(t), json.RawMessage(`{"sweep": {"all": true}}`)); err != nil || !strings.Contains(toJSON(out), "INVALID_REQUEST") {
		t.Fatalf("%v %v", out, err)
	}
	run.err = fault.New(fault.Unavailable, "the store is down")
	if _, err := h(lambdaCtx(t), json.RawMessage(`{"sweep": {}}`)); err == nil {
		t.Fatal("a sweep that failed must fail the invocation")
	}
	if strings.Join(run.ids, ",") != "sweep,sweep" {
		t.Fatalf("calls %v", run.ids)
	}
}

// TestRunEvent: the function's own asynchronous invocations reach the
// runner; a malformed one is answered (Lambda would retry a failure for
// nothing), a store failure is failed (and retried).
func TestRunEvent(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	svc := executor.New(engine, executor.Options{Logger: log})
	run := &runner{}
	h := lambdaevents.Handler(lambdaevents.Options{HTTP: httpapi.New(httpapi.Options{Service: svc, Logger: log}), Service: svc, Logger: log, Runner: run})
	if out, err := h(lambdaCtx(t), json.RawMessage(`{"run": {"execution_id": "ex_1"}}`)); err != nil || toJSON(out) != `{"execution_id":"ex_1"}` {
		t.Fatalf("%v %v", out, err)
	}
	for _, bad := range []string{`{"run": {}}`, `{"run": {"execution_id": "ex_2", "code": "x"}}`, `{"run": "ex_3"}`} {
		if out, err := h(lambdaCtx(t), json.RawMessage(bad)); err != nil || !strings.Contains(toJSON(out), "INVALID_REQUEST") {
			t.Errorf("%s: %v %v", bad, out, err)
		}
	}
	run.err = fault.New(fault.Unavailable, "the store is down")
	if _, err := h(lambdaCtx(t), json.RawMessage(`{"run": {"execution_id": "ex_4"}}`)); err == nil {
		t.Fatal("a run that could not start must fail the invocation")
	}
	if strings.Join(run.ids, ",") != "ex_1,ex_4" {
		t.Fatalf("runs %v", run.ids)
	}
}

// TestHTTPAPIDeadline: behind the HTTP API an execution ends when the API
// stops waiting, and answers its document with its id.
func TestHTTPAPIDeadline(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	svc := executor.New(engine, executor.Options{Sources: []execution.ToolSource{demoserver.Source{}}, Logger: log})
	h := lambdaevents.Handler(lambdaevents.Options{HTTP: httpapi.New(httpapi.Options{Service: svc, Logger: log}), Service: svc, Logger: log,
		HTTPAPITimeout: 1500 * time.Millisecond})
	ev := events.APIGatewayV2HTTPRequest{Version: "2.0", RouteKey: "POST /execute", RawPath: "/execute",
		Body: `{"code": "await mcp.demo.sleep({ms: 30000}); return 1"}`, Headers: map[string]string{"content-type": "application/json"}}
	ev.RequestContext.HTTP.Method = "POST"
	payload, _ := json.Marshal(ev)
	start := time.Now()
	out, err := h(lambdaCtx(t), payload)
	if err != nil {
		t.Fatal(err)
	}
	resp := out.(events.APIGatewayV2HTTPResponse)
	doc := decodeBody(t, resp.Body)
	if resp.StatusCode != 504 || doc.Error == nil || doc.Error.Code != fault.Timeout || doc.ExecutionID == "" || time.Since(start) > 10*time.Second {
		t.Fatalf("%d %+v after %v", resp.StatusCode, doc, time.Since(start))
	}
}
