package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/approvalpage"
	"github.com/pml-sandbox/pml/internal/bridge"
	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/httpapi"
	"github.com/pml-sandbox/pml/internal/runs"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/testutil/askserver"
	"github.com/pml-sandbox/pml/internal/testutil/mcptest"
	"github.com/pml-sandbox/pml/internal/toolsource"
	mcpkind "github.com/pml-sandbox/pml/internal/toolsource/mcp"
	"github.com/pml-sandbox/pml/internal/trace"
	"github.com/pml-sandbox/pml/internal/tracedb"
)

// gated is the deployed gate in one process: the deployed policy (the
// caller decides nothing, no client is trusted with a form), the person
// at the keyboard an approver on the approval page, executions kept as
// runs; every API request comes from elicitAgent.
type gated struct {
	srv   *httptest.Server
	links *approvalpage.LocalLinks
	sink  *tracedb.Memory
}

func newGated(t *testing.T, sessions bool, sources ...execution.ToolSource) *gated {
	t.Helper()
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	policy := approval.Policy{Approvers: []string{approvalpage.LocalPrincipal}}
	dir := t.TempDir()
	g := &gated{links: approvalpage.NewLocalLinks(), sink: tracedb.NewMemory(0)}
	sources = append([]execution.ToolSource{demoserver.Source{Set: demoserver.New()}}, sources...)
	svc := bridge.New(engine, bridge.Options{Sources: sources, Logger: log, Sink: g.sink,
		Suspensions: suspend.NewFile(filepath.Join(dir, "susp"), suspend.Options{}), Policy: policy})
	exec := runs.New(svc, runs.Options{Store: suspend.NewFileRuns(filepath.Join(dir, "runs"), suspend.Options{}), Policy: policy, Logger: log})
	t.Cleanup(func() { _ = exec.Close(context.Background()) })
	key, err := approval.LoadKeyFile(filepath.Join(dir, "key"))
	if err != nil {
		t.Fatal(err)
	}
	page, err := approvalpage.New(approvalpage.Options{Service: exec, Lister: svc, Policy: policy, Key: key, Links: g.links, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	h := httpapi.New(httpapi.Options{Service: exec, Logger: log, StateKey: key, Suspends: true, MCPSessions: sessions, Policy: policy, Approvals: page})
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(execution.WithPrincipal(r.Context(), elicitAgent)))
	}))
	t.Cleanup(func() {
		g.srv.Close()
		_ = h.Close(context.Background())
	})
	return g
}

var (
	csrfField    = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	versionField = regexp.MustCompile(`name="version" value="(\d+)"`)
)

// approveOnPage is the person: signs in with a fresh one-time link and
// takes decision on call of the execution at pageURL, and reports the
// page's status.
func (g *gated) approveOnPage(t *testing.T, pageURL, call, decision string) int {
	return g.onPage(t, pageURL, url.Values{"call": {call}, "decision": {decision}})
}

// onPage is the person: signs in with a fresh one-time link, opens the
// page at pageURL and posts its form with fields, and reports the page's
// status.
func (g *gated) onPage(t *testing.T, pageURL string, fields url.Values) int {
	jar, _ := cookiejar.New(nil)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	b := &http.Client{Jar: jar, Transport: tr}
	resp, err := b.Get(g.srv.URL + "/approvals/signin?link=" + g.links.Mint())
	if err != nil {
		t.Error(err)
		return 0
	}
	resp.Body.Close()
	resp, err = b.Get(pageURL)
	if err != nil {
		t.Error(err)
		return 0
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	c, v := csrfField.FindSubmatch(page), versionField.FindSubmatch(page)
	if c == nil || v == nil {
		t.Errorf("no form on %s: %s", pageURL, page)
		return 0
	}
	form := url.Values{"csrf": {string(c[1])}, "version": {string(v[1])}}
	for k, vs := range fields {
		form[k] = vs
	}
	resp, err = b.PostForm(pageURL, form)
	if err != nil {
		t.Error(err)
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// pagePerson answers URL-mode questions by deciding on the page before
// saying they are done; asked in a form, they approve (which must not
// count).
type pagePerson struct {
	t        *testing.T
	g        *gated
	decision string
	// fields, when set, are what the person posts on the page instead of
	// deciding call 2.
	fields url.Values
	mu     sync.Mutex
	asked  []mcp.ElicitationParams
}

func (p *pagePerson) Elicit(_ context.Context, r mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	p.mu.Lock()
	p.asked = append(p.asked, r.Params)
	p.mu.Unlock()
	if r.Params.Mode == mcp.ElicitationModeURL {
		fields := p.fields
		if fields == nil {
			fields = url.Values{"call": {"2"}, "decision": {p.decision}}
		}
		if status := p.g.onPage(p.t, r.Params.URL, fields); status != http.StatusOK {
			p.t.Errorf("deciding on the page: %d", status)
		}
		return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionAccept}}, nil
	}
	return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionAccept,
		Content: map[string]any{"decision": "approve"}}}, nil
}

// bothModes declares form and URL elicitation.
var bothModes = mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapability{Form: &struct{}{}, URL: &struct{}{}}}

// TestURLModeSendsThePersonToThePage: a client the deployment does not
// trust with a form, which can open URLs, sends its user to the approval
// page (URL-mode elicitation: a 2026-07-28 input_required, or
// elicitation/create on a 2025-11-25 session); the person decides there,
// and the retry answers the execution's result — approved, or rejected
// and caught by the script.
func TestURLModeSendsThePersonToThePage(t *testing.T) {
	for _, tc := range []struct {
		name     string
		version  string
		sessions bool
	}{
		{"2026-07-28, stateless", "", false},
		{"2025-11-25 on a session", "2025-11-25", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGated(t, tc.sessions)
			for _, decision := range []string{"approve", "reject"} {
				p := &pagePerson{t: t, g: g, decision: decision}
				tr, err := transport.NewStreamableHTTP(g.srv.URL + "/mcp")
				if err != nil {
					t.Fatal(err)
				}
				opts := []client.ClientOption{client.WithElicitationHandler(p), client.WithClientCapabilities(bothModes)}
				if tc.version != "" {
					opts = append(opts, client.WithProtocolVersion(tc.version))
				}
				c := mcptest.Connect(t, client.NewClient(tr, opts...), tc.version)
				res, doc := executeCode(t, c, writeThenDelete)
				r, _ := json.Marshal(doc["result"])
				switch {
				case decision == "approve" && (res.IsError || string(r) != `{"deleted":true,"keep":41}`):
					t.Fatalf("approved on the page: %s %+v", r, doc)
				case decision == "reject" && (!strings.Contains(string(r), `"code":"REJECTED"`) || !strings.Contains(string(r), "rejected on the approval page")):
					t.Fatalf("rejected on the page: %s %+v", r, doc)
				}
				if len(p.asked) != 1 || p.asked[0].Mode != mcp.ElicitationModeURL || !strings.HasPrefix(p.asked[0].URL, g.srv.URL+"/approvals/ex_") ||
					!strings.Contains(p.asked[0].Message, "#2 demo.kv_delete") {
					t.Fatalf("the person was asked %+v", p.asked)
				}
				id := strings.TrimPrefix(p.asked[0].URL, g.srv.URL+"/approvals/")
				ex, _, err := g.sink.GetExecution(context.Background(), id)
				if err != nil {
					t.Fatal(err)
				}
				if ev := ex.Events[len(ex.Events)-1]; ev.Via != trace.ViaPage || ev.Principal != approvalpage.LocalPrincipal {
					t.Fatalf("decided %+v, want by the local person on the page", ev)
				}
			}
		})
	}
}

// TestURLModeSendsThePersonToThePageForAQuestion: a remote server (a real
// mcp-go server) asks before it answers a script's call, and the client,
// which the deployment does not trust with a form, can open URLs: its user
// is sent to the approval page, told which server asks what, and answers
// the server's question there (or declines it); the retry reports what
// the page decided — the server's result, or the REJECTED the script
// caught — and the trace records the answer as the person's.
func TestURLModeSendsThePersonToThePageForAQuestion(t *testing.T) {
	ask, err := askserver.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ask.Close() })
	const asking = `try { return await mcp.ask.confirm_delete({item: "from-the-page"}); } catch (e) { return {code: e.code, message: e.message}; }`
	for _, tc := range []struct {
		name     string
		version  string
		sessions bool
	}{
		{"2026-07-28, stateless", "", false},
		{"2025-11-25 on a session", "2025-11-25", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool, err := new(mcpkind.Kind).NewSet(context.Background(), toolsource.Env{Logger: slog.New(slog.DiscardHandler)}, mcpkind.Config{Config: toolsource.Config{Name: "ask"}, URL: ask.URL, Transport: "streamable"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = pool.Close() })
			g := newGated(t, tc.sessions, pool)
			for _, answer := range []string{"answer", "decline"} {
				p := &pagePerson{t: t, g: g, fields: url.Values{"call": {"1"}, "decision": {answer}, "a.0.confirmed": {"true"}, "a.0.note": {"on the page"}}}
				tr, err := transport.NewStreamableHTTP(g.srv.URL + "/mcp")
				if err != nil {
					t.Fatal(err)
				}
				opts := []client.ClientOption{client.WithElicitationHandler(p), client.WithClientCapabilities(bothModes)}
				if tc.version != "" {
					opts = append(opts, client.WithProtocolVersion(tc.version))
				}
				before := len(ask.Retries())
				res, doc := executeCode(t, mcptest.Connect(t, client.NewClient(tr, opts...), tc.version), asking)
				r, _ := json.Marshal(doc["result"])
				switch {
				case answer == "answer" && (res.IsError || string(r) != `{"deleted":true,"item":"from-the-page","note":"on the page"}`):
					t.Fatalf("answered on the page: %s %+v", r, doc)
				case answer == "decline" && (!strings.Contains(string(r), `"code":"REJECTED"`) || len(ask.Retries()) != before):
					t.Fatalf("declined on the page: %s %+v", r, doc)
				}
				if len(p.asked) != 1 || p.asked[0].Mode != mcp.ElicitationModeURL || !strings.HasPrefix(p.asked[0].URL, g.srv.URL+"/approvals/ex_") ||
					!strings.Contains(p.asked[0].Message, `The MCP server "ask" asks a question before it answers the script's call #1 ask.confirm_delete`) ||
					!strings.Contains(p.asked[0].Message, fmt.Sprintf(askserver.Question, "from-the-page")) || !strings.Contains(p.asked[0].Message, "answer or decline it there") {
					t.Fatalf("the person was asked %+v", p.asked)
				}
				id := strings.TrimPrefix(p.asked[0].URL, g.srv.URL+"/approvals/")
				ex, _, err := g.sink.GetExecution(context.Background(), id)
				if err != nil {
					t.Fatal(err)
				}
				if ev := ex.Events[len(ex.Events)-1]; ev.Via != trace.ViaPage || ev.Principal != approvalpage.LocalPrincipal || ev.Decisions[0].Decision != "answer" {
					t.Fatalf("decided %+v, want answered by the local person on the page", ev)
				}
			}
		})
	}
}

// toolsCall posts one 2026-07-28 JSON-RPC request as the agent's client would,
// declaring both elicitation modes, and returns the result.
func toolsCall(t *testing.T, base string, params map[string]any) map[string]any {
	t.Helper()
	params["_meta"] = map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
		"io.modelcontextprotocol/clientCapabilities": bothModes, "io.modelcontextprotocol/clientInfo": map[string]any{"name": "agent", "version": "1"}}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
	req, _ := http.NewRequest(http.MethodPost, base+"/mcp", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set(mcp.HeaderMethod, "tools/call")
	req.Header.Set(mcp.HeaderName, params["name"].(string))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if i := bytes.Index(raw, []byte("data: ")); i >= 0 {
		raw = raw[i+6:]
	}
	var msg struct {
		Result map[string]any `json:"result"`
		Error  any            `json:"error"`
	}
	if err := json.Unmarshal(raw, &msg); err != nil || msg.Result == nil {
		t.Fatalf("tools/call: %s", raw)
	}
	return msg.Result
}

// TestTheCallerCannotAnswerForThePage: the agent holds the question's
// requestState and the caller's credentials, and tries every way to
// approve its own call: the form answer a client would send, "done" for
// the page, resume_execution, the REST resume; none runs it, and the
// person on the page still can.
func TestTheCallerCannotAnswerForThePage(t *testing.T) {
	g := newGated(t, false)
	first := toolsCall(t, g.srv.URL, map[string]any{"name": "execute_code", "arguments": map[string]any{"code": writeThenDelete}})
	state, _ := first["requestState"].(string)
	inputs, _ := first["inputRequests"].(map[string]any)
	ask, _ := inputs["approval-page"].(map[string]any)
	params, _ := ask["params"].(map[string]any)
	if first["resultType"] != "input_required" || state == "" || params["mode"] != "url" {
		t.Fatalf("first answer %+v", first)
	}
	pageURL, _ := params["url"].(string)
	id := strings.TrimPrefix(pageURL, g.srv.URL+"/approvals/")
	approve := map[string]any{"action": "accept", "content": map[string]any{"decision": "approve"}}
	for name, answers := range map[string]map[string]any{
		"a form answer":          {"call-2": approve},
		"done, page not decided": {"approval-page": map[string]any{"action": "accept"}},
		"both":                   {"call-2": approve, "approval-page": map[string]any{"action": "accept"}},
	} {
		res := toolsCall(t, g.srv.URL, map[string]any{"name": "execute_code", "arguments": map[string]any{"code": writeThenDelete},
			"requestState": state, "inputResponses": answers})
		structured, _ := res["structuredContent"].(map[string]any)
		if structured != nil && structured["ok"] == true {
			t.Fatalf("%s ran the call: %+v", name, res)
		}
	}
	call := func(method, path, body string) int {
		req, _ := http.NewRequest(method, g.srv.URL+path, strings.NewReader(body))
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
	res := toolsCall(t, g.srv.URL, map[string]any{"name": "resume_execution", "arguments": map[string]any{"execution_id": id, "decisions": map[string]any{"2": "approve"}}})
	if res["isError"] != true {
		t.Fatalf("resume_execution approving: %+v", res)
	}
	// The caller's request with the page's form: no session, so no.
	if status := call("POST", "/approvals/"+id, "call=2&version=1&decision=approve"); status != http.StatusUnauthorized {
		t.Fatalf("the caller posting to the page: %d", status)
	}
	ex, _, err := g.sink.GetExecution(context.Background(), id)
	if err != nil || ex.Status != trace.StatusSuspended || len(ex.Events) != 1 {
		t.Fatalf("after the caller's tries: %+v %v", ex, err)
	}
	// The person decides on the page; the client's retry reads the end.
	if status := g.approveOnPage(t, pageURL, "2", "approve"); status != http.StatusOK {
		t.Fatalf("the person approving: %d", status)
	}
	res = toolsCall(t, g.srv.URL, map[string]any{"name": "execute_code", "arguments": map[string]any{"code": writeThenDelete},
		"requestState": state, "inputResponses": map[string]any{"approval-page": map[string]any{"action": "accept"}}})
	structured, _ := res["structuredContent"].(map[string]any)
	if r, _ := json.Marshal(structured["result"]); structured["ok"] != true || string(r) != `{"deleted":true,"keep":41}` {
		t.Fatalf("the retry after the page: %+v", res)
	}
}

// TestUntrustedFormOnlyClientGetsTheDocument: a client that can only show
// forms, which the deployment does not trust, is asked nothing: the
// document and its text name the page.
func TestUntrustedFormOnlyClientGetsTheDocument(t *testing.T) {
	g := newGated(t, false)
	p := &person{answer: accept("approve")}
	_, doc := executeCode(t, elicitingClient(t, g.srv.URL+"/mcp", "", p, nil), writeThenDelete)
	if len(p.asked) != 0 {
		t.Fatalf("an untrusted client was asked in a form: %+v", p.asked)
	}
	u, _ := doc["approval_url"].(string)
	if doc["status"] != "suspended" || !strings.HasPrefix(u, g.srv.URL+"/approvals/ex_") {
		t.Fatalf("document %+v", doc)
	}
}

// TestTasksWaitForThePage: an execution run as an MCP task waits for
// input; the agent's resume_execution may not approve it, and its task
// stays waiting; the person's approval on the page completes it.
func TestTasksWaitForThePage(t *testing.T) {
	g := newGated(t, false)
	res, _ := rpc(t, g.srv.URL, elicitAgent, "tools/call", map[string]any{"name": "execute_code", "task": map[string]any{},
		"arguments": map[string]any{"code": "await mcp.demo.kv_set({key: 'k', value: 1}); await mcp.demo.kv_delete({key: 'k'}); return 'deleted'", "approval": "suspend"}})
	id := res["task"].(map[string]any)["taskId"].(string)
	res, _ = rpc(t, g.srv.URL, elicitAgent, "tasks/result", map[string]any{"taskId": id})
	u, _ := res["structuredContent"].(map[string]any)["approval_url"].(string)
	if !strings.Contains(toJSON(res["structuredContent"]), `"status":"suspended"`) || u != g.srv.URL+"/approvals/"+id {
		t.Fatalf("the suspended task's result %v", res)
	}
	res, _ = rpc(t, g.srv.URL, elicitAgent, "tools/call", map[string]any{"name": "resume_execution",
		"arguments": map[string]any{"execution_id": id, "decisions": map[string]string{"2": "approve"}}})
	if res["isError"] != true || !strings.Contains(toJSON(res), "FORBIDDEN") {
		t.Fatalf("the agent approving its task: %v", res)
	}
	if res, _ := rpc(t, g.srv.URL, elicitAgent, "tasks/get", map[string]any{"taskId": id}); res["status"] != "input_required" {
		t.Fatalf("tasks/get after the agent's try %v", res)
	}
	if status := g.approveOnPage(t, u, "2", "approve"); status != http.StatusOK {
		t.Fatalf("the person approving: %d", status)
	}
	res, _ = rpc(t, g.srv.URL, elicitAgent, "tasks/result", map[string]any{"taskId": id})
	if res["isError"] == true || !strings.Contains(toJSON(res["structuredContent"]), `"result":"deleted"`) {
		t.Fatalf("the task after the page: %v", res)
	}
}
