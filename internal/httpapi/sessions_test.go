package httpapi_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/httpapi"
	"github.com/pml-sandbox/pml/internal/runs"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/testutil/fronttest"
	"github.com/pml-sandbox/pml/internal/testutil/mcptest"
)

// newSessionServer serves the API over a runs service and a service
// keeping sessions in file stores, the caller's principal taken from
// testPrincipal.
func newSessionServer(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	svc := executor.New(engine, executor.Options{Sources: []execution.ToolSource{demoserver.Source{}}, Logger: log,
		Sessions: suspend.NewFileSessions(filepath.Join(dir, "sessions"), suspend.Options{})})
	rs := runs.New(svc, runs.Options{Store: suspend.NewFileRuns(filepath.Join(dir, "runs"), suspend.Options{}), Logger: log, PollEvery: 20 * time.Millisecond})
	t.Cleanup(func() { _ = rs.Close(context.Background()) })
	h := httpapi.New(httpapi.Options{Service: rs, Traces: traces{id: "ex_known"}, Logger: log})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(execution.WithPrincipal(r.Context(), r.Header.Get(fronttest.PrincipalHeader))))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestSessionsOverHTTP: a session started, continued asynchronously and
// synchronously, read and deleted by its owner; invisible to anyone else.
func TestSessionsOverHTTP(t *testing.T) {
	base := newSessionServer(t)
	const agent, other = "jwt:https://idp#agent", "jwt:https://idp#other"
	status, _, doc := fronttest.Call(t, "POST", base+"/execute", agent, `{"code": "const seen = [1]; return seen.length", "session": "new"}`)
	sess, _ := doc["session"].(map[string]any)
	id, _ := sess["id"].(string)
	if status != 200 || !strings.HasPrefix(id, "ss_") || sess["saved"] != true {
		t.Fatalf("a new session: %d %v", status, doc)
	}
	// Continued asynchronously: the run keeps the request, session and all.
	status, _, doc = fronttest.Call(t, "POST", base+"/execute", agent, `{"code": "seen.push(2); return seen", "session_id": "`+id+`", "async": true}`)
	if status != 202 {
		t.Fatalf("async continue: %d %v", status, doc)
	}
	doc = pollDoc(t, base, doc["execution_id"].(string), agent)
	if doc["ok"] != true || doc["session"].(map[string]any)["saved"] != true {
		t.Fatalf("the async step: %v", doc)
	}
	if status, _, doc = fronttest.Call(t, "POST", base+"/execute", agent, `{"code": "return seen", "session_id": "`+id+`"}`); status != 200 || len(doc["result"].([]any)) != 2 {
		t.Fatalf("after the async step: %d %v", status, doc)
	}

	if status, _, doc = fronttest.Call(t, "GET", base+"/sessions/"+id, agent, ""); status != 200 || doc["executions"] != 3.0 || doc["state"] != "idle" {
		t.Fatalf("GET: %d %v", status, doc)
	}
	for _, r := range [][2]string{{"GET", "/sessions/" + id}, {"DELETE", "/sessions/" + id}, {"POST", "/execute"}, {"GET", "/sessions/ss_unknown"}, {"GET", "/sessions/not-a-session"}} {
		status, _, doc := fronttest.Call(t, r[0], base+r[1], other, `{"code": "return 1", "session_id": "`+id+`"}`)
		if status != 404 || doc["error"].(map[string]any)["code"] != "NOT_FOUND" {
			t.Fatalf("%s %s by another: %d %v", r[0], r[1], status, doc)
		}
	}
	if status, _, doc = fronttest.Call(t, "POST", base+"/execute", agent, `{"code": "x", "session": "ss_a"}`); status != 400 {
		t.Fatalf("a bad session field: %d %v", status, doc)
	}
	if status, _, doc = fronttest.Call(t, "DELETE", base+"/sessions/"+id, agent, ""); status != 200 || doc["deleted"] != true {
		t.Fatalf("DELETE: %d %v", status, doc)
	}
	if status, _, doc = fronttest.Call(t, "POST", base+"/execute", agent, `{"code": "return seen", "session_id": "`+id+`"}`); status != 404 {
		t.Fatalf("after DELETE: %d %v", status, doc)
	}
}

// TestSessionsOverMCP: execute_code's session arguments and end_session;
// a session's execution is not asked to suspend.
func TestSessionsOverMCP(t *testing.T) {
	base := newSessionServer(t)
	c := mcptest.Streamable(t, base+"/mcp", "")
	ctx := context.Background()
	callTool := func(name string, args map[string]any) *mcp.CallToolResult {
		t.Helper()
		var req mcp.CallToolRequest
		req.Params.Name, req.Params.Arguments = name, args
		res, err := c.CallTool(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := callTool("execute_code", map[string]any{"code": "const n = 41", "session": "new", "session_ttl_s": 600})
	doc, _ := res.StructuredContent.(map[string]any)
	sess, _ := doc["session"].(map[string]any)
	id, _ := sess["id"].(string)
	text := res.Content[0].(mcp.TextContent).Text
	if res.IsError || id == "" || !strings.Contains(text, "session "+id+": state kept") || !strings.Contains(text, "names: n") {
		t.Fatalf("execute_code, new: %v %q", doc, text)
	}
	if res = callTool("execute_code", map[string]any{"code": "return n + 1", "session_id": id}); res.IsError || res.StructuredContent.(map[string]any)["result"] != 42.0 {
		t.Fatalf("execute_code, continued: %+v", res)
	}
	// A session's execution may wait for a person where executions are
	// kept while they wait; this service keeps none.
	if res = callTool("execute_code", map[string]any{"code": "return n", "session_id": id, "approval": "suspend"}); !res.IsError ||
		!strings.Contains(res.Content[0].(mcp.TextContent).Text, "keeps no suspended executions") {
		t.Fatalf("a session's execution asking to suspend here: %+v", res)
	}
	if res = callTool("end_session", map[string]any{"session_id": id}); res.IsError {
		t.Fatalf("end_session: %+v", res)
	}
	if res = callTool("end_session", map[string]any{"session_id": id}); !res.IsError || !strings.Contains(res.Content[0].(mcp.TextContent).Text, "NOT_FOUND") {
		t.Fatalf("end_session again: %+v", res)
	}
}
