package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/httpapi"
	"github.com/pml-sandbox/pml/internal/mcpserver"
	"github.com/pml-sandbox/pml/internal/testutil/fronttest"
	"github.com/pml-sandbox/pml/internal/trace"
)

// newGated is fronttest's gate with the API (and the approval page) in
// front of it, as pml serve deploys it without MCP sessions.
func newGated(t *testing.T) *fronttest.Gate {
	t.Helper()
	return fronttest.NewGate(t, engine, func(g *fronttest.Gate) http.Handler {
		h := httpapi.New(httpapi.Options{Service: g.Exec, Logger: g.Log, Policy: g.Policy, Approvals: g.Page,
			MCP: mcpserver.Settings{StateKey: g.Key, Suspends: true}})
		t.Cleanup(func() { _ = h.Close(context.Background()) })
		return h
	})
}

// TestTheCallerCannotAnswerForThePage: the agent holds the question's
// requestState and the caller's credentials, and tries every way to
// approve its own call: the form answer a client would send, "done" for
// the page, resume_execution, the REST resume; none runs it, and the
// person on the page still can.
func TestTheCallerCannotAnswerForThePage(t *testing.T) {
	g := newGated(t)
	first := fronttest.ToolsCall(t, g.URL, map[string]any{"name": "execute_code", "arguments": map[string]any{"code": fronttest.WriteThenDelete}})
	state, _ := first["requestState"].(string)
	inputs, _ := first["inputRequests"].(map[string]any)
	ask, _ := inputs["approval-page"].(map[string]any)
	params, _ := ask["params"].(map[string]any)
	if first["resultType"] != "input_required" || state == "" || params["mode"] != "url" {
		t.Fatalf("first answer %+v", first)
	}
	pageURL, _ := params["url"].(string)
	id := strings.TrimPrefix(pageURL, g.URL+"/approvals/")
	approve := map[string]any{"action": "accept", "content": map[string]any{"decision": "approve"}}
	for name, answers := range map[string]map[string]any{
		"a form answer":          {"call-2": approve},
		"done, page not decided": {"approval-page": map[string]any{"action": "accept"}},
		"both":                   {"call-2": approve, "approval-page": map[string]any{"action": "accept"}},
	} {
		res := fronttest.ToolsCall(t, g.URL, map[string]any{"name": "execute_code", "arguments": map[string]any{"code": fronttest.WriteThenDelete},
			"requestState": state, "inputResponses": answers})
		structured, _ := res["structuredContent"].(map[string]any)
		if structured != nil && structured["ok"] == true {
			t.Fatalf("%s ran the call: %+v", name, res)
		}
	}
	call := func(method, path, body string) int {
		req, _ := http.NewRequest(method, g.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if status := call("POST", "/executions/"+id+"/resume", `{"decisions": {"2": "approve"}}`); status != http.StatusForbidden {
		t.Fatalf("the REST resume approving: %d", status)
	}
	res := fronttest.ToolsCall(t, g.URL, map[string]any{"name": "resume_execution", "arguments": map[string]any{"execution_id": id, "decisions": map[string]any{"2": "approve"}}})
	if res["isError"] != true {
		t.Fatalf("resume_execution approving: %+v", res)
	}
	// The caller's request with the page's form: no session, so no.
	if status := call("POST", "/approvals/"+id, "call=2&version=1&decision=approve"); status != http.StatusUnauthorized {
		t.Fatalf("the caller posting to the page: %d", status)
	}
	ex, _, err := g.Sink.GetExecution(context.Background(), id)
	if err != nil || ex.Status != trace.StatusSuspended || len(ex.Events) != 1 {
		t.Fatalf("after the caller's tries: %+v %v", ex, err)
	}
	// The person decides on the page; the client's retry reads the end.
	if status := g.ApproveOnPage(t, pageURL, "2", "approve"); status != http.StatusOK {
		t.Fatalf("the person approving: %d", status)
	}
	res = fronttest.ToolsCall(t, g.URL, map[string]any{"name": "execute_code", "arguments": map[string]any{"code": fronttest.WriteThenDelete},
		"requestState": state, "inputResponses": map[string]any{"approval-page": map[string]any{"action": "accept"}}})
	structured, _ := res["structuredContent"].(map[string]any)
	if r, _ := json.Marshal(structured["result"]); structured["ok"] != true || string(r) != `{"deleted":true,"keep":41}` {
		t.Fatalf("the retry after the page: %+v", res)
	}
}
