package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/testutil/everything"
	"github.com/pml-sandbox/pml/internal/testutil/mcptest"
	"github.com/pml-sandbox/pml/internal/testutil/xraylisten"
	mcpkind "github.com/pml-sandbox/pml/internal/toolsource/mcp"
)

const traceRoot = "1-6740a1b2-3c4d5e6f7a8b9c0d1e2f3a4b"

func decodeHTTP(t *testing.T, raw json.RawMessage) (events.APIGatewayV2HTTPResponse, execution.Response) {
	t.Helper()
	var resp events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(raw, &resp); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	var r execution.Response
	_ = json.Unmarshal([]byte(resp.Body), &r)
	return resp, r
}

// TestHTTPEventThroughBothFunctions follows one request through the whole
// deployed shape: an HTTP API event → the execute binary → MCP calls to two
// servers → a capability through the Lambda Invoke API → the capability
// binary (which calls an MCP tool itself) → back; then reads the traces
// from DynamoDB Local and the segments the X-Ray daemon received, and has
// the aggregate binary count co-occurrence from the table's stream.
func TestHTTPEventThroughBothFunctions(t *testing.T) {
	s := newStack(t)
	save := approverEvent("POST", "/capabilities", `{"name": "loud:shout", "code": "return await mcp.text.transform_text({text: args.text, op: 'upper'})", "description": "Upper-case a text"}`)
	if resp, _ := decodeHTTP(t, s.invoke(t, "execute", save, "")); resp.StatusCode != 201 {
		t.Fatalf("saving the capability: %+v", resp)
	}
	code := `const [w, s] = await Promise.all([
  mcp.text.word_count({text: "one two three"}),
  mcp.loud.shout({text: "hi"}),
]);
await mcp.kv.kv_set({key: "k", value: w.words});
return {words: (await mcp.kv.kv_get({key: "k"})).value, shout: s}`
	body, _ := json.Marshal(map[string]any{"code": code})
	header := "Root=" + traceRoot + ";Parent=53995c3f42cd8ad8;Sampled=1"
	resp, r := decodeHTTP(t, s.invoke(t, "execute", httpEvent("POST", "/execute", string(body)), header))
	if resp.StatusCode != 200 || !r.OK {
		t.Fatalf("execute: %d %s", resp.StatusCode, resp.Body)
	}
	var result struct {
		Words int
		Shout string
	}
	_ = json.Unmarshal(r.Result, &result)
	if result.Words != 3 || result.Shout != "HI" {
		t.Fatalf("result %s", r.Result)
	}

	// The response shows the tree: four calls of the execution, and the
	// capability's own call in its child execution.
	var capCall, childCall bool
	var childID string
	for _, c := range r.Calls {
		if c.ExecutionID == r.ExecutionID && c.Kind == "capability" && c.ChildExecutionID != "" {
			capCall, childID = true, c.ChildExecutionID
		}
	}
	for _, c := range r.Calls {
		if c.ExecutionID == childID && c.Tool == "transform_text" && c.OK {
			childCall = true
		}
	}
	if !capCall || !childCall {
		t.Fatalf("calls %+v", r.Calls)
	}

	// Traces were flushed to DynamoDB before the function answered.
	ctx := context.Background()
	ex, calls, err := s.traces.GetExecution(ctx, r.ExecutionID)
	if err != nil || ex.Status != "ok" || ex.Source != "http" || ex.TraceID != traceRoot || len(calls) != 4 || ex.Calls != 4 {
		t.Fatalf("stored execution %+v with %d calls: %v", ex, len(calls), err)
	}
	child, childCalls, err := s.traces.GetExecution(ctx, childID)
	if err != nil || child.ParentExecutionID != r.ExecutionID || child.Capability != "loud:shout" || len(childCalls) != 1 {
		t.Fatalf("stored child %+v %+v: %v", child, childCalls, err)
	}
	// The HTTP route reads the same store.
	if resp, _ := decodeHTTP(t, s.invoke(t, "execute", httpEvent("GET", "/executions/"+r.ExecutionID, ""), "")); resp.StatusCode != 200 || !strings.Contains(resp.Body, `"word_count"`) {
		t.Fatalf("GET /executions: %+v", resp)
	}
	// Co-occurrence comes from the aggregate function, fed the traces
	// table's stream; delivered twice (a retried batch), it counts once.
	for _, batch := range s.aggregate(t) {
		s.deliver(t, batch)
	}
	rel, err := s.traces.RelatedTools(ctx, "kv:kv_set", 10)
	if err != nil || len(rel) != 3 || rel[0].Count != 1 || rel[2].Count != 1 {
		t.Fatalf("related tools %+v %v", rel, err)
	}

	// X-Ray: the execution is a subsegment of the invocation's segment,
	// with a subsegment per call, all in the caller's trace.
	segs, ok := s.xray.Wait(5*time.Second, func(ss []xraylisten.Segment) bool {
		n := 0
		for _, sg := range ss {
			if sg.TraceID == traceRoot && sg.Annotations["tool"] != nil {
				n++
			}
		}
		return n >= 4
	})
	if !ok {
		t.Fatalf("X-Ray received %d documents: %+v", len(segs), segs)
	}
	var execSeg bool
	for _, sg := range segs {
		if sg.TraceID == traceRoot && sg.Name == "execution" && sg.ParentID == "53995c3f42cd8ad8" && sg.Annotations["execution_id"] == r.ExecutionID {
			execSeg = true
		}
	}
	if !execSeg {
		t.Fatalf("no execution subsegment under the caller's segment: %+v", segs)
	}
}

func TestSQSBatchWithOneBadMessage(t *testing.T) {
	s := newStack(t)
	ev := events.SQSEvent{Records: []events.SQSMessage{
		{MessageId: "ok-1", EventSource: "aws:sqs", Body: `{"code": "return (await mcp.text.word_count({text: 'a b'})).words"}`},
		{MessageId: "bad-2", EventSource: "aws:sqs", Body: `not json`},
		{MessageId: "ok-3", EventSource: "aws:sqs", Body: `{"code": "return 3"}`},
	}}
	var resp events.SQSEventResponse
	if err := json.Unmarshal(s.invoke(t, "execute", ev, ""), &resp); err != nil {
		t.Fatal(err)
	}
	if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != "bad-2" {
		t.Fatalf("batch item failures %+v", resp.BatchItemFailures)
	}
}

// TestMCPEndpointThroughAPIGateway drives the deployed function as an MCP
// server with mcp-go's own client.
func TestMCPEndpointThroughAPIGateway(t *testing.T) {
	s := newStack(t)
	base := s.apiGateway(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := mcptest.Streamable(t, base+"/mcp", mcpkind.ProtocolVersion)
	list, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil || len(list.Tools) != 8 { // execute_code, resume_execution, cancel_execution, rollback_execution, end_session, search_tools, list_capabilities, save_capability
		t.Fatalf("tools/list: %+v %v", list, err)
	}
	var req mcp.CallToolRequest
	req.Params.Name = "execute_code"
	req.Params.Arguments = map[string]any{"code": "return (await mcp.text.word_count({text: 'mcp over lambda'})).words"}
	res, err := c.CallTool(ctx, req)
	if err != nil || res.IsError {
		t.Fatalf("execute_code: %+v %v", res, err)
	}
	raw, _ := json.Marshal(res.StructuredContent)
	var r execution.Response
	if err := json.Unmarshal(raw, &r); err != nil || string(r.Result) != "3" {
		t.Fatalf("structured content %s", raw)
	}
}

// TestReferenceServerAndAServerKilledMidRun adds the npm reference MCP
// server, then kills an MCP server while a call to it is in flight: the
// call fails UNAVAILABLE (retryable) and the script goes on with the other
// server.
func TestReferenceServerAndAServerKilledMidRun(t *testing.T) {
	ev := everything.Start(t, everything.Streamable)
	slow := startWaitServer(t)
	s := newStack(t, fmt.Sprintf(`{"name": "ev", "url": %q}`, ev.URL), fmt.Sprintf(`{"name": "slow", "url": %q, "transport": "streamable"}`, slow.url))
	_, r := decodeHTTP(t, s.invoke(t, "execute", httpEvent("POST", "/execute", `{"code": "return await mcp.ev.echo({message: 'from lambda'})"}`), ""))
	if !r.OK || string(r.Result) != `"Echo: from lambda"` {
		t.Fatalf("reference server: %+v %s", r.Error, r.Result)
	}
	go func() {
		// Killed only once the call has certainly reached it: a kill
		// before would make the call fail differently.
		<-slow.started
		slow.kill()
	}()
	start := time.Now()
	resp, r := decodeHTTP(t, s.invoke(t, "execute", httpEvent("POST", "/execute",
		`{"code": "const slow = await mcp.slow.wait().catch(e => e.code); const ev = await mcp.ev.echo({message: 'still here'}); return {slow, ev}", "timeout_ms": 20000}`), ""))
	if !r.OK || time.Since(start) > 10*time.Second {
		t.Fatalf("after the kill: %d %s (%v)", resp.StatusCode, resp.Body, time.Since(start))
	}
	var out struct{ Slow, Ev string }
	_ = json.Unmarshal(r.Result, &out)
	if out.Slow != string(fault.Unavailable) || out.Ev != "Echo: still here" {
		t.Fatalf("result %s; want the killed call UNAVAILABLE and the other answered", r.Result)
	}
}

// waitServer is a real MCP server on loopback whose one tool, wait,
// announces on started that a call has begun and answers only when the
// server is killed.
type waitServer struct {
	url     string
	started chan struct{}
	hs      *http.Server
	quit    chan struct{}
	once    sync.Once
}

func startWaitServer(t *testing.T) *waitServer {
	t.Helper()
	s := &waitServer{started: make(chan struct{}, 16), quit: make(chan struct{})}
	m := server.NewMCPServer("wait", "1")
	m.AddTool(mcp.NewTool("wait", mcp.WithDescription("Answers when the server dies"), mcp.WithReadOnlyHintAnnotation(true)),
		func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			select {
			case s.started <- struct{}{}:
			default:
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-s.quit:
				return nil, errors.New("killed")
			}
		})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.url = "http://" + ln.Addr().String() + "/mcp"
	s.hs = &http.Server{Handler: server.NewStreamableHTTPServer(m), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.hs.Serve(ln) }()
	t.Cleanup(s.kill)
	return s
}

// kill closes the listener and every connection at once, as a crashed
// process leaves them, then lets the tool's handlers return.
func (s *waitServer) kill() {
	s.once.Do(func() {
		_ = s.hs.Close()
		close(s.quit)
	})
}

// TestPMLServeREADMEExample runs the README's local server and its curl
// example against it.
func TestPMLServeREADMEExample(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	cmd := exec.Command(bins.pml, "serve", "--addr", addr, "--cache-dir", dir)
	cmd.Env = append(cmd.Environ(), app.EnvTracesFile+"="+dir+"/traces.jsonl", app.EnvCapFile+"="+dir+"/caps.json")
	cmd.Stderr = &testLog{t: t}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	base := "http://" + addr
	deadline := time.Now().Add(20 * time.Second)
	for {
		if resp, err := http.Get(base + "/healthz"); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("pml serve did not come up")
		}
		time.Sleep(100 * time.Millisecond)
	}
	body := `{"code":"await mcp.demo.kv_set({key:\"n\", value: 41}); const v = await mcp.demo.kv_get({key:\"n\"}); return v.value + 1"}`
	resp, err := http.Post(base+"/execute", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var r execution.Response
	if err := json.Unmarshal(raw, &r); err != nil || !r.OK || string(r.Result) != "42" || len(r.Calls) != 2 {
		t.Fatalf("%d %s", resp.StatusCode, raw)
	}
	resp, err = http.Get(base + "/executions/" + r.ExecutionID)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /executions: %v %v", resp, err)
	}
	resp.Body.Close()
	// A capability saved over HTTP is callable at once.
	resp, err = http.Post(base+"/capabilities", "application/json", strings.NewReader(`{"name": "math:dbl", "code": "return args.x * 2"}`))
	if err != nil || resp.StatusCode != 201 {
		t.Fatalf("POST /capabilities: %v %v", resp, err)
	}
	resp.Body.Close()
	resp, err = http.Post(base+"/execute", "application/json", strings.NewReader(`{"code": "return await mcp.math.dbl({x: 21})"}`))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err := json.Unmarshal(raw, &r); err != nil || !r.OK || string(r.Result) != "42" {
		t.Fatalf("capability over HTTP: %s", raw)
	}
	// Graceful shutdown on SIGTERM.
	_ = cmd.Process.Signal(syscallTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("pml serve exited with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("pml serve did not stop on SIGTERM")
	}
}
