package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/httpapi"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/testutil/enginetest"
	"github.com/pml-sandbox/pml/internal/testutil/mcptest"
	mcpkind "github.com/pml-sandbox/pml/internal/toolsource/mcp"
)

const approvalScript = enginetest.ApprovalScript

// twiceScript suspends twice: at call 1, then, approved, at call 2.
const twiceScript = `await mcp.demo.kv_delete({key: "a"}); await mcp.demo.kv_delete({key: "b"}); return "both"`

// clock is a settable suspend.Options.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.t = c.t.Add(d) }

// durableEnv is a service over the demo tools (a store holding "k", "a"
// and "b") and a suspension directory, on a settable clock.
type durableEnv struct {
	svc *executor.Service
	dir string
	clk *clock
}

func newDurableEnv(t *testing.T) *durableEnv {
	t.Helper()
	kv := demoserver.New()
	for _, k := range []string{"k", "a", "b"} {
		if _, err := kv.Call(context.Background(), "kv_set", json.RawMessage(`{"key": "`+k+`", "value": 1}`)); err != nil {
			t.Fatal(err)
		}
	}
	e := &durableEnv{dir: t.TempDir(), clk: &clock{t: time.Now().UTC()}}
	e.svc = executor.New(engine, executor.Options{Policy: local, Sources: []execution.ToolSource{demoserver.Source{Set: kv}}, Logger: slog.New(slog.DiscardHandler),
		Suspensions: suspend.NewFile(e.dir, suspend.Options{Now: e.clk.Now})})
	return e
}

func (e *durableEnv) server(t *testing.T, opts httpapi.Options) *httptest.Server {
	t.Helper()
	opts.Service, opts.Logger = e.svc, slog.New(slog.DiscardHandler)
	srv := httptest.NewServer(httpapi.New(opts))
	t.Cleanup(srv.Close)
	return srv
}

// otherBuild stores a copy of execution id as "ex_other_build", as if
// another guest build had suspended it.
func (e *durableEnv) otherBuild(t *testing.T, id string) {
	t.Helper()
	store := suspend.NewFile(e.dir, suspend.Options{Now: e.clk.Now})
	rec, err := store.Load(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	rec.ID, rec.Version, rec.Suspension.GuestHash = "ex_other_build", 0, "0000000000000000"
	if err := store.Save(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
}

// suspendedDoc is the document of a suspended execution.
type suspendedDoc struct {
	OK          *bool               `json:"ok"`
	Status      string              `json:"status"`
	ExecutionID string              `json:"execution_id"`
	Pending     []execution.Pending `json:"pending"`
	ExpiresAt   time.Time           `json:"expires_at"`
	Error       *fault.Error        `json:"error"`
	Result      json.RawMessage     `json:"result"`
}

// suspendVia posts code with approval "suspend" and checks the 202 answer.
func suspendVia(t *testing.T, url, code string, wantPending ...int) suspendedDoc {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"code": code, "approval": "suspend"})
	status, raw := send(t, "POST", url+"/execute", string(body))
	var doc suspendedDoc
	if err := json.Unmarshal([]byte(raw), &doc); err != nil || status != http.StatusAccepted {
		t.Fatalf("%d %s (%v), want 202", status, raw, err)
	}
	checkSuspended(t, doc, wantPending)
	return doc
}

func checkSuspended(t *testing.T, doc suspendedDoc, wantPending []int) {
	t.Helper()
	if doc.OK == nil || *doc.OK || doc.Status != "suspended" || !strings.HasPrefix(doc.ExecutionID, "ex_") || doc.Error != nil ||
		doc.ExpiresAt.IsZero() || len(doc.Pending) != len(wantPending) {
		t.Fatalf("not a suspended document: %+v", doc)
	}
	for i, p := range doc.Pending {
		if p.CallID != wantPending[i] || p.Server != "demo" || p.Tool != "kv_delete" || p.Reason != "approval" || !json.Valid(p.Args) {
			t.Fatalf("pending %+v, want call %d demo:kv_delete for approval", p, wantPending[i])
		}
	}
}

// TestExecuteSuspends: a request with approval "suspend" that reaches a
// destructive call answers 202 with the pending call; without it the call
// is refused as before.
func TestExecuteSuspends(t *testing.T) {
	srv := newDurableEnv(t).server(t, httpapi.Options{})
	doc := suspendVia(t, srv.URL, approvalScript, 2)
	if string(doc.Pending[0].Args) != `{"key":"k"}` {
		t.Errorf("pending args %s", doc.Pending[0].Args)
	}
	for _, tc := range []struct{ name, body, contains string }{
		{"refuse is the default", `{"code": "return await mcp.demo.kv_delete({key: \"a\"})"}`, `"FORBIDDEN"`},
		{"refuse said", `{"code": "return await mcp.demo.kv_delete({key: \"a\"})", "approval": "refuse"}`, `"FORBIDDEN"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if status, raw := send(t, "POST", srv.URL+"/execute", tc.body); status != 422 || !strings.Contains(raw, tc.contains) {
				t.Fatalf("%d %s", status, raw)
			}
		})
	}
	if status, raw := send(t, "POST", srv.URL+"/execute", `{"code": "return 1", "approval": "ask"}`); status != 400 || !strings.Contains(raw, `approval must be`) {
		t.Fatalf("unknown approval: %d %s", status, raw)
	}
}

// TestResumeRoute: POST /executions/{id}/resume, through a handler built
// like `pml serve`'s (a second one over the same stores, as a second
// process would be), with every answer the issue names.
func TestResumeRoute(t *testing.T) {
	env := newDurableEnv(t)
	first := env.server(t, httpapi.Options{MaxBodyBytes: 4 << 10})
	approveMe := suspendVia(t, first.URL, approvalScript, 2).ExecutionID
	rejectMe := suspendVia(t, first.URL, approvalScript, 2).ExecutionID
	twice := suspendVia(t, first.URL, twiceScript, 1).ExecutionID
	expireMe := suspendVia(t, first.URL, approvalScript, 2).ExecutionID
	refusals := suspendVia(t, first.URL, approvalScript, 2).ExecutionID
	env.otherBuild(t, refusals)
	first.Close()
	srv := env.server(t, httpapi.Options{MaxBodyBytes: 4 << 10})

	tests := []struct {
		name, id, body string
		status         int
		contains       []string
		before         func()
	}{
		{name: "approve", id: approveMe, body: `{"decisions": {"2": "approve"}}`, status: 200,
			contains: []string{`"ok":true`, `"kept":"set before suspending"`, `"found":true`, `"deleted":"deleted k"`}},
		{name: "resumed twice", id: approveMe, body: `{"decisions": {"2": "approve"}}`, status: 409, contains: []string{`"CONFLICT"`, "done"}},
		{name: "reject with a reason", id: rejectMe, body: `{"decisions": {"2": {"decision": "reject", "reason": "not today"}}, "call_detail": "none"}`, status: 200,
			contains: []string{`"ok":true`, `"code":"REJECTED"`, "not today", `"kept":"set before suspending"`}},
		{name: "suspends again", id: twice, body: `{"decisions": {"1": "approve"}}`, status: 202,
			contains: []string{`"status":"suspended"`, `"pending":[{"call_id":2,"server":"demo","tool":"kv_delete","args":{"key":"b"},"reason":"approval","site":"1:63","line":1}]`}},
		{name: "and ends", id: twice, body: `{"decisions": {"2": "approve"}}`, status: 200, contains: []string{`"result":"both"`}},
		{name: "unknown id", id: "ex_000000000000000000000000", body: `{"decisions": {"2": "approve"}}`, status: 404, contains: []string{`"NOT_FOUND"`}},
		{name: "malformed id", id: "..%2f..%2fetc", body: `{"decisions": {"2": "approve"}}`, status: 404, contains: []string{`"NOT_FOUND"`}},
		{name: "another build", id: "ex_other_build", body: `{"decisions": {"2": "approve"}}`, status: 422, contains: []string{`"RESUME_INCOMPATIBLE"`}},
		{name: "a call that is not pending", id: refusals, body: `{"decisions": {"7": "approve"}}`, status: 400, contains: []string{`"INVALID_REQUEST"`, "not pending: 7"}},
		{name: "not a decision", id: refusals, body: `{"decisions": {"2": "maybe"}}`, status: 400, contains: []string{`"INVALID_REQUEST"`, `not \"maybe\"`}},
		{name: "no decisions", id: refusals, body: `{}`, status: 400, contains: []string{"decisions is missing"}},
		{name: "unknown field", id: refusals, body: `{"decisions": {"2": "approve"}, "approve": true}`, status: 400, contains: []string{"unknown field"}},
		{name: "id in the body", id: refusals, body: `{"execution_id": "ex_x", "decisions": {"2": "approve"}}`, status: 400, contains: []string{"in the path"}},
		{name: "bad call_detail", id: refusals, body: `{"decisions": {"2": "approve"}, "call_detail": "all"}`, status: 400, contains: []string{"call_detail"}},
		{name: "trailing data", id: refusals, body: `{"decisions": {"2": "approve"}} {}`, status: 400, contains: []string{"after the JSON"}},
		{name: "body too large", id: refusals, body: `{"decisions": {"2": {"decision": "reject", "reason": "` + strings.Repeat("x", 5<<10) + `"}}}`, status: 413, contains: []string{`"LIMIT_EXCEEDED"`}},
		{name: "expired", id: expireMe, body: `{"decisions": {"2": "approve"}}`, status: 410, contains: []string{`"EXPIRED"`},
			before: func() { env.clk.Add(suspend.DefaultTTL + time.Minute) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.before != nil {
				tc.before()
			}
			req, _ := http.NewRequest("POST", srv.URL+"/executions/"+tc.id+"/resume", strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var b strings.Builder
			_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, b.String())
			}
			for _, want := range tc.contains {
				if !strings.Contains(b.String(), want) {
					t.Errorf("body lacks %s: %s", want, b.String())
				}
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			if tc.status < 300 && resp.Header.Get("X-Execution-Id") != tc.id {
				t.Errorf("X-Execution-Id %q, want %s", resp.Header.Get("X-Execution-Id"), tc.id)
			}
		})
	}
}

// TestResumeStreams: with serve's streaming, the result event of an
// execution that suspends carries 202, a resume streams its calls and
// ends with 200, and a refused resume's result event carries its status.
func TestResumeStreams(t *testing.T) {
	srv := newDurableEnv(t).server(t, httpapi.Options{Streaming: true})
	sc := bufio.NewScanner(postStream(t, srv.URL, `{"code": `+mustJSON(approvalScript)+`, "approval": "suspend"}`).Body)
	var ev sseEvent
	for ev = readEvent(t, sc); ev.name != "result"; ev = readEvent(t, sc) {
	}
	// The event's status is the HTTP status, 202, in place of the
	// document's "suspended".
	var first struct {
		Status int `json:"status"`
		suspendedDoc
	}
	if err := json.Unmarshal([]byte(ev.data), &first); err != nil || first.Status != 202 {
		t.Fatalf("result %s (%v), want status 202", ev.data, err)
	}
	first.suspendedDoc.Status = "suspended"
	checkSuspended(t, first.suspendedDoc, []int{2})

	stream := func(id, body string) *bufio.Scanner {
		resp := postStreamTo(t, srv.URL+"/executions/"+id+"/resume", body)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get("X-Execution-Id") != id {
			t.Fatalf("%d %v", resp.StatusCode, resp.Header)
		}
		return bufio.NewScanner(resp.Body)
	}
	sc = stream(first.ExecutionID, `{"decisions": {"2": "approve"}}`)
	// The approved call started (and was parked) before the suspension.
	if ev := readEvent(t, sc); ev.name != "call_end" || !strings.Contains(ev.data, `"tool":"kv_delete"`) || !strings.Contains(ev.data, `"ok":true`) {
		t.Fatalf("event %s %s, want the approved call's end", ev.name, ev.data)
	}
	for ev = readEvent(t, sc); ev.name != "result"; ev = readEvent(t, sc) {
	}
	if !strings.Contains(ev.data, `"status":200`) || !strings.Contains(ev.data, `"kept":"set before suspending"`) {
		t.Fatalf("result %s", ev.data)
	}
	sc = stream(first.ExecutionID, `{"decisions": {"2": "approve"}}`)
	if ev := readEvent(t, sc); ev.name != "result" || !strings.Contains(ev.data, `"status":409`) || !strings.Contains(ev.data, `"CONFLICT"`) {
		t.Fatalf("event %s %s, want a result with 409", ev.name, ev.data)
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestStatuses(t *testing.T) {
	refusals := []struct {
		code   fault.Code
		status int
	}{
		{fault.InvalidRequest, 400}, {fault.Forbidden, 403}, {fault.NotFound, 404}, {fault.Conflict, 409},
		{fault.Expired, 410}, {fault.ResumeIncompatible, 422}, {fault.Unavailable, 503}, {fault.Internal, 500},
	}
	for _, tc := range refusals {
		if got := httpapi.RefusalStatus(fault.New(tc.code, "x")); got != tc.status {
			t.Errorf("RefusalStatus(%s) = %d, want %d", tc.code, got, tc.status)
		}
	}
	outcomes := []struct {
		name   string
		resp   execution.Response
		status int
	}{
		{"ok", execution.Response{OK: true}, 200},
		{"suspended", execution.Response{Status: execution.StatusSuspended}, 202},
		// A script's failure is the execution's, whatever its code.
		{"a tool refused", execution.Response{Error: fault.New(fault.Forbidden, "x")}, 422},
		{"a capability not found", execution.Response{Error: fault.New(fault.NotFound, "x")}, 422},
		{"rejected and not caught", execution.Response{Error: fault.New(fault.Rejected, "x")}, 422},
		{"timeout", execution.Response{Error: fault.New(fault.Timeout, "x")}, 504},
		{"no error", execution.Response{}, 500},
	}
	for _, tc := range outcomes {
		if got := httpapi.StatusOf(&tc.resp); got != tc.status {
			t.Errorf("StatusOf(%s) = %d, want %d", tc.name, got, tc.status)
		}
	}
}

// TestMCPApprovals: execute_code with approval "suspend" answers the
// suspended document, not as an error, with text that says how to resume;
// resume_execution continues it in another server over the same stores,
// and its refusals are errors carrying their code.
func TestMCPApprovals(t *testing.T) {
	env := newDurableEnv(t)
	first := mcptest.Streamable(t, env.server(t, httpapi.Options{}).URL+"/mcp", mcpkind.ProtocolVersion)
	second := mcptest.Streamable(t, env.server(t, httpapi.Options{}).URL+"/mcp", mcpkind.ProtocolVersion)
	ctx := context.Background()

	list, err := second.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var schemas = map[string]mcp.ToolInputSchema{}
	for _, tool := range list.Tools {
		schemas[tool.Name] = tool.InputSchema
	}
	if s, ok := schemas["resume_execution"]; !ok || !slices.Contains(s.Required, "execution_id") || !slices.Contains(s.Required, "decisions") {
		t.Fatalf("resume_execution's schema: %+v", s)
	}
	if p, _ := schemas["execute_code"].Properties["approval"].(map[string]any); fmt.Sprint(p["enum"]) != "[refuse suspend]" {
		t.Fatalf("execute_code's approval: %+v", p)
	}

	call := func(c *client.Client, name string, args map[string]any) (*mcp.CallToolResult, string, map[string]any) {
		t.Helper()
		var req mcp.CallToolRequest
		req.Params.Name, req.Params.Arguments = name, args
		res, err := c.CallTool(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		text := ""
		if len(res.Content) > 0 {
			text = res.Content[0].(mcp.TextContent).Text
		}
		doc, _ := res.StructuredContent.(map[string]any)
		return res, text, doc
	}
	suspendOne := func() string {
		t.Helper()
		res, text, doc := call(first, "execute_code", map[string]any{"code": approvalScript, "approval": "suspend"})
		raw, _ := json.Marshal(doc)
		var sd suspendedDoc
		_ = json.Unmarshal(raw, &sd)
		if res.IsError {
			t.Fatalf("a suspension flagged as an error: %s", text)
		}
		checkSuspended(t, sd, []int{2})
		for _, want := range []string{"suspended: 1 call awaits approval", "#2 demo:kv_delete {\"key\":\"k\"}", `"execution_id": "` + sd.ExecutionID + `"`, "resume_execution"} {
			if !strings.Contains(text, want) {
				t.Errorf("text lacks %q:\n%s", want, text)
			}
		}
		return sd.ExecutionID
	}
	approved, rejected := suspendOne(), suspendOne()

	tests := []struct {
		name    string
		args    map[string]any
		isError bool
		text    []string
		code    string // the error code in structuredContent
	}{
		{name: "approve", args: map[string]any{"execution_id": approved, "decisions": map[string]any{"2": "approve"}},
			text: []string{"ok (execution " + approved, `"kept":"set before suspending"`, `"deleted":"deleted k"`}},
		{name: "again", args: map[string]any{"execution_id": approved, "decisions": map[string]any{"2": "approve"}}, isError: true,
			text: []string{"resume refused: CONFLICT", "do not retry"}, code: "CONFLICT"},
		{name: "reject", args: map[string]any{"execution_id": rejected, "decisions": map[string]any{"2": map[string]any{"decision": "reject", "reason": "not today"}}, "max_text_bytes": 2000},
			text: []string{"ok (execution", `"code":"REJECTED"`, "not today"}},
		{name: "unknown id", args: map[string]any{"execution_id": "ex_000000000000000000000000", "decisions": map[string]any{"2": "approve"}}, isError: true,
			text: []string{"NOT_FOUND"}, code: "NOT_FOUND"},
		{name: "no id", args: map[string]any{"decisions": map[string]any{"2": "approve"}}, isError: true, text: []string{"execution_id is missing"}},
		{name: "bad decision", args: map[string]any{"execution_id": approved, "decisions": map[string]any{"2": "ok"}}, isError: true, text: []string{`not "ok"`}},
		{name: "unknown argument", args: map[string]any{"execution_id": approved, "decisions": map[string]any{"2": "approve"}, "force": true}, isError: true, text: []string{"unknown field"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, text, doc := call(second, "resume_execution", tc.args)
			if res.IsError != tc.isError {
				t.Fatalf("isError %v, want %v: %s", res.IsError, tc.isError, text)
			}
			for _, want := range tc.text {
				if !strings.Contains(text, want) {
					t.Errorf("text lacks %q:\n%s", want, text)
				}
			}
			if tc.code != "" {
				if e, _ := doc["error"].(map[string]any); e["code"] != tc.code {
					t.Errorf("structuredContent %v, want error code %s", doc, tc.code)
				}
			}
		})
	}
}
