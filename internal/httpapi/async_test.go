package httpapi_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/httpapi"
	"github.com/pml-sandbox/pml/internal/mcpserver"
	"github.com/pml-sandbox/pml/internal/testutil/fronttest"
)

// newAsyncServer serves the API over a runs service with file stores, as
// the Lambda does (no streaming unless stream), the caller's principal
// taken from fronttest.PrincipalHeader.
func newAsyncServer(t *testing.T, stream bool) string {
	t.Helper()
	url, _ := newAsyncServerKV(t, stream)
	return url
}

// newAsyncServerKV is newAsyncServer, and the demo tools' store its
// scripts write to.
func newAsyncServerKV(t *testing.T, stream bool) (string, *demoserver.Tools) {
	t.Helper()
	a := fronttest.NewAsync(t, engine)
	h := httpapi.New(httpapi.Options{Service: a.Exec, Traces: traces{id: "ex_known"}, Logger: a.Log, Policy: a.Policy, Streaming: stream,
		MCP: mcpserver.Settings{Suspends: true}})
	return fronttest.ServeAs(t, h, "").URL, a.KV
}

// pollDoc GETs the execution until its status is not running.
func pollDoc(t *testing.T, base, id, principal string) map[string]any {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		status, hdr, doc := fronttest.Call(t, "GET", base+"/executions/"+id, principal, "")
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

	status, hdr, doc := fronttest.Call(t, "POST", base+"/execute", agent, `{"code": "await mcp.demo.sleep({ms: 100}); return 41 + 1", "async": true}`,
		"Accept", "text/event-stream")
	id, _ := doc["execution_id"].(string)
	if status != 202 || doc["status"] != "running" || id == "" || hdr.Get("X-Execution-Id") != id || hdr.Get("Location") != "executions/"+id ||
		hdr.Get("Content-Type") != "application/json" {
		t.Fatalf("POST async: %d %v %v", status, hdr, doc)
	}
	if status, _, doc := fronttest.Call(t, "GET", base+"/executions/"+id, "jwt:https://idp#other", ""); status != 404 {
		t.Fatalf("another principal's GET: %d %v", status, doc)
	}
	doc = pollDoc(t, base, id, agent)
	if doc["status"] != "completed" || doc["ok"] != true || doc["result"] != 42.0 {
		t.Fatalf("final document %v", doc)
	}
	if status, _, doc := fronttest.Call(t, "DELETE", base+"/executions/"+id, agent, ""); status != 409 {
		t.Fatalf("DELETE after the end: %d %v", status, doc)
	}

	// A long one, cancelled; the approver may too.
	_, _, doc = fronttest.Call(t, "POST", base+"/execute", agent, `{"code": "for (let i = 0; i < 50; i++) await mcp.demo.sleep({ms: 50}); return 1", "async": true}`)
	id, _ = doc["execution_id"].(string)
	time.Sleep(120 * time.Millisecond)
	if status, _, doc := fronttest.Call(t, "DELETE", base+"/executions/"+id, "jwt:https://idp#other", ""); status != 404 {
		t.Fatalf("another principal's DELETE: %d %v", status, doc)
	}
	status, hdr, doc = fronttest.Call(t, "DELETE", base+"/executions/"+id, "arn:approver", "")
	if status != 202 || doc["status"] != "running" || doc["cancel_requested"] != true || hdr.Get("Retry-After") != "1" {
		t.Fatalf("DELETE running: %d %v", status, doc)
	}
	doc = pollDoc(t, base, id, agent)
	if e, _ := doc["error"].(map[string]any); doc["status"] != "cancelled" || e["code"] != "CANCELLED" {
		t.Fatalf("cancelled document %v", doc)
	}

	// Synchronous executions still read from their trace.
	if status, _, doc := fronttest.Call(t, "GET", base+"/executions/ex_known", "", ""); status != 200 || doc["execution"] == nil {
		t.Fatalf("a trace: %d %v", status, doc)
	}
	if status, _, doc := fronttest.Call(t, "DELETE", base+"/executions/ex_nope", agent, ""); status != 404 {
		t.Fatalf("DELETE unknown: %d %v", status, doc)
	}
	if status, _, doc := fronttest.Call(t, "POST", base+"/execute", agent, `{"code": "return 1", "async": "yes"}`); status != 400 {
		t.Fatalf("async not a boolean: %d %v", status, doc)
	}
}

// TestARefusedResumeLeavesCancelAlone: while an asynchronous execution
// runs, another principal's resume of it is refused (404, as for an
// unknown id) and changes nothing: the owner's cancel still stops the run
// within a step, and no cancel is recorded for a run that went on.
func TestARefusedResumeLeavesCancelAlone(t *testing.T) {
	base, kv := newAsyncServerKV(t, false)
	const agent = "jwt:https://idp#agent"
	const steps = 40
	_, _, doc := fronttest.Call(t, "POST", base+"/execute", agent, `{"async": true, "code":
		"for (let i = 0; i < `+strconv.Itoa(steps)+`; i++) { await mcp.demo.kv_set({key: 'step' + i, value: i}); await mcp.demo.sleep({ms: 50}) }"}`)
	id, _ := doc["execution_id"].(string)
	// Running here: its first call has run.
	for deadline := time.Now().Add(20 * time.Second); !kvHas(t, kv, "step0"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the run never started")
		}
	}
	status, _, refused := fronttest.Call(t, "POST", base+"/executions/"+id+"/resume", "jwt:https://idp#other", `{"decisions": {"1": "approve"}}`)
	if status != 404 {
		t.Fatalf("another principal's resume: %d %v", status, refused)
	}
	status, _, doc = fronttest.Call(t, "DELETE", base+"/executions/"+id, agent, "")
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
