package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/bridge"
	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/httpapi"
	"github.com/pml-sandbox/pml/internal/runs"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/testutil/mcptest"
)

// testPrincipal carries, in tests, who API Gateway would have verified.
const testPrincipal = "X-Test-Principal"

// newAsyncServer serves the API over a runs service with file stores, as
// the Lambda does (no streaming unless stream), the caller's principal
// taken from testPrincipal.
func newAsyncServer(t *testing.T, stream bool) string {
	t.Helper()
	url, _ := newAsyncServerKV(t, stream)
	return url
}

// newAsyncServerKV is newAsyncServer, and the demo tools' store its
// scripts write to.
func newAsyncServerKV(t *testing.T, stream bool) (string, *demoserver.Tools) {
	t.Helper()
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	policy := approval.Policy{Approvers: []string{"arn:approver"}}
	kv := demoserver.New()
	if _, err := kv.Call(context.Background(), "kv_set", json.RawMessage(`{"key": "k", "value": 1}`)); err != nil {
		t.Fatal(err)
	}
	svc := bridge.New(engine, bridge.Options{Sources: []execution.ToolSource{demoserver.Source{Set: kv}}, Logger: log, Policy: policy,
		Suspensions: suspend.NewFile(filepath.Join(dir, "susp"), suspend.Options{})})
	rs := runs.New(svc, runs.Options{Store: suspend.NewFileRuns(filepath.Join(dir, "runs"), suspend.Options{}), Policy: policy, Logger: log,
		PollEvery: 20 * time.Millisecond})
	t.Cleanup(func() { _ = rs.Close(context.Background()) })
	h := httpapi.New(httpapi.Options{Service: rs, Traces: traces{id: "ex_known"}, Logger: log, Policy: policy, Suspends: true, Streaming: stream})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := execution.WithPrincipal(r.Context(), r.Header.Get(testPrincipal))
		h.ServeHTTP(w, r.WithContext(ctx))
	}))
	t.Cleanup(srv.Close)
	return srv.URL, kv
}

// call sends a request as principal and decodes the JSON answer.
func call(t *testing.T, method, url, principal, body string, hdr ...string) (int, http.Header, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(testPrincipal, principal)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s %s: %d %s", method, url, resp.StatusCode, raw)
	}
	return resp.StatusCode, resp.Header, doc
}

// pollDoc GETs the execution until its status is not running.
func pollDoc(t *testing.T, base, id, principal string) map[string]any {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		status, hdr, doc := call(t, "GET", base+"/executions/"+id, principal, "")
		if status != 200 {
			t.Fatalf("GET: %d %v", status, doc)
		}
		if doc["status"] != "running" {
			return doc
		}
		if hdr.Get("Retry-After") != "1" {
			t.Errorf("a running document without Retry-After")
		}
	}
	t.Fatalf("%s still running", id)
	return nil
}

// TestAsyncOverHTTP: fire, poll, cancel — and the refusals.
func TestAsyncOverHTTP(t *testing.T) {
	base := newAsyncServer(t, false)
	const agent = "jwt:https://idp#agent"

	status, hdr, doc := call(t, "POST", base+"/execute", agent, `{"code": "await mcp.demo.sleep({ms: 100}); return 41 + 1", "async": true}`,
		"Accept", "text/event-stream")
	id, _ := doc["execution_id"].(string)
	if status != 202 || doc["status"] != "running" || id == "" || hdr.Get("X-Execution-Id") != id || hdr.Get("Location") != "executions/"+id ||
		hdr.Get("Content-Type") != "application/json" {
		t.Fatalf("POST async: %d %v %v", status, hdr, doc)
	}
	if status, _, doc := call(t, "GET", base+"/executions/"+id, "jwt:https://idp#other", ""); status != 404 {
		t.Fatalf("another principal's GET: %d %v", status, doc)
	}
	doc = pollDoc(t, base, id, agent)
	if doc["status"] != "completed" || doc["ok"] != true || doc["result"] != 42.0 {
		t.Fatalf("final document %v", doc)
	}
	if status, _, doc := call(t, "DELETE", base+"/executions/"+id, agent, ""); status != 409 {
		t.Fatalf("DELETE after the end: %d %v", status, doc)
	}

	// A long one, cancelled; the approver may too.
	_, _, doc = call(t, "POST", base+"/execute", agent, `{"code": "for (let i = 0; i < 50; i++) await mcp.demo.sleep({ms: 50}); return 1", "async": true}`)
	id, _ = doc["execution_id"].(string)
	time.Sleep(120 * time.Millisecond)
	if status, _, doc := call(t, "DELETE", base+"/executions/"+id, "jwt:https://idp#other", ""); status != 404 {
		t.Fatalf("another principal's DELETE: %d %v", status, doc)
	}
	status, hdr, doc = call(t, "DELETE", base+"/executions/"+id, "arn:approver", "")
	if status != 202 || doc["status"] != "running" || doc["cancel_requested"] != true || hdr.Get("Retry-After") != "1" {
		t.Fatalf("DELETE running: %d %v", status, doc)
	}
	doc = pollDoc(t, base, id, agent)
	if e, _ := doc["error"].(map[string]any); doc["status"] != "cancelled" || e["code"] != "CANCELLED" {
		t.Fatalf("cancelled document %v", doc)
	}

	// Synchronous executions still read from their trace.
	if status, _, doc := call(t, "GET", base+"/executions/ex_known", "", ""); status != 200 || doc["execution"] == nil {
		t.Fatalf("a trace: %d %v", status, doc)
	}
	if status, _, doc := call(t, "DELETE", base+"/executions/ex_nope", agent, ""); status != 404 {
		t.Fatalf("DELETE unknown: %d %v", status, doc)
	}
	if status, _, doc := call(t, "POST", base+"/execute", agent, `{"code": "return 1", "async": "yes"}`); status != 400 {
		t.Fatalf("async not a boolean: %d %v", status, doc)
	}
}

// rpc sends one JSON-RPC request to /mcp as principal.
func rpc(t *testing.T, base, principal, method string, params any) (result map[string]any, rpcErr map[string]any) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": method, "params": params})
	status, _, doc := call(t, "POST", base+"/mcp", principal, string(body), "Accept", "application/json, text/event-stream")
	if status != 200 || doc["id"] != 7.0 {
		t.Fatalf("%s: %d %v", method, status, doc)
	}
	result, _ = doc["result"].(map[string]any)
	rpcErr, _ = doc["error"].(map[string]any)
	return result, rpcErr
}

// TestMCPTasks: execute_code as a task, polled, waited on and cancelled
// over plain JSON-RPC; a suspended one waits for input.
func TestMCPTasks(t *testing.T) {
	base := newAsyncServer(t, false)
	const agent = "jwt:https://idp#agent"

	// Advertised: tasks for tool calls, cancel, no list; execute_code
	// may be a task.
	c := mcptest.Streamable(t, base+"/mcp", mcp.ProtocolVersion20251125)
	tools, err := c.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	caps := c.GetServerCapabilities()
	if caps.Tasks == nil || caps.Tasks.Cancel == nil || caps.Tasks.List != nil || caps.Tasks.Requests == nil || caps.Tasks.Requests.Tools == nil {
		t.Fatalf("tasks capability %+v", caps.Tasks)
	}
	for _, tool := range tools.Tools {
		if tool.Name == "execute_code" && (tool.Execution == nil || tool.Execution.TaskSupport != mcp.TaskSupportOptional) {
			t.Fatalf("execute_code's execution %+v", tool.Execution)
		}
	}

	res, e := rpc(t, base, agent, "tools/call", map[string]any{"name": "execute_code", "task": map[string]any{"ttl": 60000},
		"arguments": map[string]any{"code": "await mcp.demo.sleep({ms: 100}); return 'ok'"}})
	task, _ := res["task"].(map[string]any)
	id, _ := task["taskId"].(string)
	if e != nil || id == "" || task["status"] != "working" || task["pollInterval"] != 1000.0 || task["createdAt"] == "" {
		t.Fatalf("created: %v %v", res, e)
	}
	if res, _ := rpc(t, base, agent, "tasks/get", map[string]any{"taskId": id}); res["status"] != "working" && res["status"] != "completed" {
		t.Fatalf("tasks/get %v", res)
	}
	if _, e := rpc(t, base, "jwt:https://idp#other", "tasks/get", map[string]any{"taskId": id}); e == nil || e["code"] != -32602.0 {
		t.Fatalf("another principal's task: %v", e)
	}
	res, e = rpc(t, base, agent, "tasks/result", map[string]any{"taskId": id})
	sc, _ := res["structuredContent"].(map[string]any)
	if e != nil || res["isError"] == true || sc["result"] != "ok" || !strings.Contains(toJSON(res["_meta"]), id) {
		t.Fatalf("tasks/result %v %v", res, e)
	}
	if res, _ := rpc(t, base, agent, "tasks/get", map[string]any{"taskId": id}); res["status"] != "completed" {
		t.Fatalf("tasks/get after %v", res)
	}
	if _, e := rpc(t, base, agent, "tasks/cancel", map[string]any{"taskId": id}); e == nil || e["code"] != -32602.0 {
		t.Fatalf("cancelling a completed task: %v", e)
	}
	if _, e := rpc(t, base, agent, "tasks/list", map[string]any{}); e == nil || e["code"] != -32601.0 {
		t.Fatalf("tasks/list: %v", e)
	}
	if _, e := rpc(t, base, agent, "tasks/get", map[string]any{"taskId": "ex_nope"}); e == nil {
		t.Fatal("an unknown task")
	}
	if _, e := rpc(t, base, agent, "tools/call", map[string]any{"name": "execute_code", "task": map[string]any{}, "arguments": map[string]any{"lang": "js"}}); e == nil || e["code"] != -32602.0 {
		t.Fatalf("bad arguments: %v", e)
	}

	// Cancelled while it runs.
	res, _ = rpc(t, base, agent, "tools/call", map[string]any{"name": "execute_code", "task": map[string]any{},
		"arguments": map[string]any{"code": "for (let i = 0; i < 50; i++) await mcp.demo.sleep({ms: 50})"}})
	id = res["task"].(map[string]any)["taskId"].(string)
	if res, e := rpc(t, base, agent, "tasks/cancel", map[string]any{"taskId": id}); e != nil || res["status"] != "cancelled" {
		t.Fatalf("tasks/cancel %v %v", res, e)
	}
	res, _ = rpc(t, base, agent, "tasks/result", map[string]any{"taskId": id})
	if res["isError"] != true || !strings.Contains(toJSON(res["structuredContent"]), "CANCELLED") {
		t.Fatalf("a cancelled task's result %v", res)
	}

	// Waiting for input: the suspended document, then resume_execution.
	res, _ = rpc(t, base, agent, "tools/call", map[string]any{"name": "execute_code", "task": map[string]any{},
		"arguments": map[string]any{"code": "await mcp.demo.kv_delete({key: 'k'}); return 'deleted'", "approval": "suspend"}})
	id = res["task"].(map[string]any)["taskId"].(string)
	res, _ = rpc(t, base, agent, "tasks/result", map[string]any{"taskId": id})
	if res["isError"] == true || !strings.Contains(toJSON(res["structuredContent"]), `"status":"suspended"`) {
		t.Fatalf("a suspended task's result %v", res)
	}
	if res, _ := rpc(t, base, agent, "tasks/get", map[string]any{"taskId": id}); res["status"] != "input_required" {
		t.Fatalf("tasks/get of a suspended execution %v", res)
	}
	res, _ = rpc(t, base, "arn:approver", "tools/call", map[string]any{"name": "resume_execution",
		"arguments": map[string]any{"execution_id": id, "decisions": map[string]string{"1": "approve"}}})
	if res["isError"] == true {
		t.Fatalf("resume %v", res)
	}
	if res, _ := rpc(t, base, agent, "tasks/get", map[string]any{"taskId": id}); res["status"] != "completed" {
		t.Fatalf("tasks/get after the resume %v", res)
	}
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestARefusedResumeLeavesCancelAlone: while an asynchronous execution
// runs, another principal's resume of it is refused (404, as for an
// unknown id) and changes nothing: the owner's cancel still stops the run
// within a step, and no cancel is recorded for a run that went on.
func TestARefusedResumeLeavesCancelAlone(t *testing.T) {
	base, kv := newAsyncServerKV(t, false)
	const agent = "jwt:https://idp#agent"
	const steps = 40
	_, _, doc := call(t, "POST", base+"/execute", agent, `{"async": true, "code":
		"for (let i = 0; i < `+strconv.Itoa(steps)+`; i++) { await mcp.demo.kv_set({key: 'step' + i, value: i}); await mcp.demo.sleep({ms: 50}) }"}`)
	id, _ := doc["execution_id"].(string)
	// Running here: its first call has run.
	for deadline := time.Now().Add(20 * time.Second); !kvHas(t, kv, "step0"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the run never started")
		}
	}
	status, _, refused := call(t, "POST", base+"/executions/"+id+"/resume", "jwt:https://idp#other", `{"decisions": {"1": "approve"}}`)
	if status != 404 {
		t.Fatalf("another principal's resume: %d %v", status, refused)
	}
	status, _, doc = call(t, "DELETE", base+"/executions/"+id, agent, "")
	if status != 202 || doc["cancel_requested"] != true {
		t.Fatalf("the owner's DELETE: %d %v", status, doc)
	}
	doc = pollDoc(t, base, id, agent)
	if e, _ := doc["error"].(map[string]any); doc["status"] != "cancelled" || e["code"] != "CANCELLED" {
		t.Fatalf("final document %v", doc)
	}
	if kvHas(t, kv, "step"+strconv.Itoa(steps-1)) {
		t.Fatalf("recorded cancelled, but the run went on to its last call: %v", doc["calls"])
	}
}

// kvHas reports whether the demo store holds key.
func kvHas(t *testing.T, kv *demoserver.Tools, key string) bool {
	t.Helper()
	out, err := kv.Call(context.Background(), "kv_get", json.RawMessage(`{"key": "`+key+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(out), `"found":true`)
}
