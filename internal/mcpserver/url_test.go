package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/pml-sandbox/pml/internal/approvalpage"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/mcpserver"
	"github.com/pml-sandbox/pml/internal/testutil/askserver"
	"github.com/pml-sandbox/pml/internal/testutil/fronttest"
	"github.com/pml-sandbox/pml/internal/testutil/mcptest"
	"github.com/pml-sandbox/pml/internal/toolsource"
	mcpkind "github.com/pml-sandbox/pml/internal/toolsource/mcp"
	"github.com/pml-sandbox/pml/internal/trace"
)

// newGated is fronttest's gate with the MCP server (and the approval
// page) in front of it; sessions says whether it keeps MCP sessions, as
// pml serve does.
func newGated(t *testing.T, sessions bool, sources ...execution.ToolSource) *fronttest.Gate {
	t.Helper()
	return fronttest.NewGate(t, engine, func(g *fronttest.Gate) http.Handler {
		return mount(t, mcpserver.Options{Service: g.Exec, Logger: g.Log, Policy: g.Policy, Approvals: g.Page,
			Settings: mcpserver.Settings{StateKey: g.Key, Suspends: true, Sessions: sessions}})
	}, sources...)
}

// pagePerson answers URL-mode questions by deciding on the page before
// saying they are done; asked in a form, they approve (which must not
// count).
type pagePerson struct {
	t        *testing.T
	g        *fronttest.Gate
	decision string
	// fields, when set, are what the person posts on the page instead of
	// deciding call 2.
	fields url.Values
	mu     sync.Mutex
	Asked  []mcp.ElicitationParams
}

func (p *pagePerson) Elicit(_ context.Context, r mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	p.mu.Lock()
	p.Asked = append(p.Asked, r.Params)
	p.mu.Unlock()
	if r.Params.Mode == mcp.ElicitationModeURL {
		fields := p.fields
		if fields == nil {
			fields = url.Values{"call": {"2"}, "decision": {p.decision}}
		}
		if status := p.g.OnPage(p.t, r.Params.URL, fields); status != http.StatusOK {
			p.t.Errorf("deciding on the page: %d", status)
		}
		return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionAccept}}, nil
	}
	return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionAccept,
		Content: map[string]any{"decision": "approve"}}}, nil
}

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
				tr, err := transport.NewStreamableHTTP(g.URL + "/mcp")
				if err != nil {
					t.Fatal(err)
				}
				opts := []client.ClientOption{client.WithElicitationHandler(p), client.WithClientCapabilities(fronttest.BothModes)}
				if tc.version != "" {
					opts = append(opts, client.WithProtocolVersion(tc.version))
				}
				c := mcptest.Connect(t, client.NewClient(tr, opts...), tc.version)
				res, doc := fronttest.ExecuteCode(t, c, fronttest.WriteThenDelete)
				r, _ := json.Marshal(doc["result"])
				switch {
				case decision == "approve" && (res.IsError || string(r) != `{"deleted":true,"keep":41}`):
					t.Fatalf("approved on the page: %s %+v", r, doc)
				case decision == "reject" && (!strings.Contains(string(r), `"code":"REJECTED"`) || !strings.Contains(string(r), "rejected on the approval page")):
					t.Fatalf("rejected on the page: %s %+v", r, doc)
				}
				if len(p.Asked) != 1 || p.Asked[0].Mode != mcp.ElicitationModeURL || !strings.HasPrefix(p.Asked[0].URL, g.URL+"/approvals/ex_") ||
					!strings.Contains(p.Asked[0].Message, "#2 demo.kv_delete") {
					t.Fatalf("the person was asked %+v", p.Asked)
				}
				id := strings.TrimPrefix(p.Asked[0].URL, g.URL+"/approvals/")
				ex, _, err := g.Sink.GetExecution(context.Background(), id)
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
				tr, err := transport.NewStreamableHTTP(g.URL + "/mcp")
				if err != nil {
					t.Fatal(err)
				}
				opts := []client.ClientOption{client.WithElicitationHandler(p), client.WithClientCapabilities(fronttest.BothModes)}
				if tc.version != "" {
					opts = append(opts, client.WithProtocolVersion(tc.version))
				}
				before := len(ask.Retries())
				res, doc := fronttest.ExecuteCode(t, mcptest.Connect(t, client.NewClient(tr, opts...), tc.version), asking)
				r, _ := json.Marshal(doc["result"])
				switch {
				case answer == "answer" && (res.IsError || string(r) != `{"deleted":true,"item":"from-the-page","note":"on the page"}`):
					t.Fatalf("answered on the page: %s %+v", r, doc)
				case answer == "decline" && (!strings.Contains(string(r), `"code":"REJECTED"`) || len(ask.Retries()) != before):
					t.Fatalf("declined on the page: %s %+v", r, doc)
				}
				if len(p.Asked) != 1 || p.Asked[0].Mode != mcp.ElicitationModeURL || !strings.HasPrefix(p.Asked[0].URL, g.URL+"/approvals/ex_") ||
					!strings.Contains(p.Asked[0].Message, `The MCP server "ask" asks a question before it answers the script's call #1 ask.confirm_delete`) ||
					!strings.Contains(p.Asked[0].Message, fmt.Sprintf(askserver.Question, "from-the-page")) || !strings.Contains(p.Asked[0].Message, "answer or decline it there") {
					t.Fatalf("the person was asked %+v", p.Asked)
				}
				id := strings.TrimPrefix(p.Asked[0].URL, g.URL+"/approvals/")
				ex, _, err := g.Sink.GetExecution(context.Background(), id)
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

// TestUntrustedFormOnlyClientGetsTheDocument: a client that can only show
// forms, which the deployment does not trust, is asked nothing: the
// document and its text name the page.
func TestUntrustedFormOnlyClientGetsTheDocument(t *testing.T) {
	g := newGated(t, false)
	p := &fronttest.Person{Answer: fronttest.Accept("approve")}
	_, doc := fronttest.ExecuteCode(t, fronttest.ElicitingClient(t, g.URL+"/mcp", "", p, nil), fronttest.WriteThenDelete)
	if len(p.Asked) != 0 {
		t.Fatalf("an untrusted client was asked in a form: %+v", p.Asked)
	}
	u, _ := doc["approval_url"].(string)
	if doc["status"] != "suspended" || !strings.HasPrefix(u, g.URL+"/approvals/ex_") {
		t.Fatalf("document %+v", doc)
	}
}

// TestTasksWaitForThePage: an execution run as an MCP task waits for
// input; the agent's resume_execution may not approve it, and its task
// stays waiting; the person's approval on the page completes it.
func TestTasksWaitForThePage(t *testing.T) {
	g := newGated(t, false)
	res, _ := fronttest.RPC(t, g.URL, fronttest.Agent, "tools/call", map[string]any{"name": "execute_code", "task": map[string]any{},
		"arguments": map[string]any{"code": "await mcp.demo.kv_set({key: 'k', value: 1}); await mcp.demo.kv_delete({key: 'k'}); return 'deleted'", "approval": "suspend"}})
	id := res["task"].(map[string]any)["taskId"].(string)
	res, _ = fronttest.RPC(t, g.URL, fronttest.Agent, "tasks/result", map[string]any{"taskId": id})
	u, _ := res["structuredContent"].(map[string]any)["approval_url"].(string)
	if !strings.Contains(fronttest.ToJSON(res["structuredContent"]), `"status":"suspended"`) || u != g.URL+"/approvals/"+id {
		t.Fatalf("the suspended task's result %v", res)
	}
	res, _ = fronttest.RPC(t, g.URL, fronttest.Agent, "tools/call", map[string]any{"name": "resume_execution",
		"arguments": map[string]any{"execution_id": id, "decisions": map[string]string{"2": "approve"}}})
	if res["isError"] != true || !strings.Contains(fronttest.ToJSON(res), "FORBIDDEN") {
		t.Fatalf("the agent approving its task: %v", res)
	}
	if res, _ := fronttest.RPC(t, g.URL, fronttest.Agent, "tasks/get", map[string]any{"taskId": id}); res["status"] != "input_required" {
		t.Fatalf("tasks/get after the agent's try %v", res)
	}
	if status := g.ApproveOnPage(t, u, "2", "approve"); status != http.StatusOK {
		t.Fatalf("the person approving: %d", status)
	}
	res, _ = fronttest.RPC(t, g.URL, fronttest.Agent, "tasks/result", map[string]any{"taskId": id})
	if res["isError"] == true || !strings.Contains(fronttest.ToJSON(res["structuredContent"]), `"result":"deleted"`) {
		t.Fatalf("the task after the page: %v", res)
	}
}
