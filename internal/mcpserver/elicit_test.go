package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/mcpserver"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/testutil/fronttest"
	"github.com/pml-sandbox/pml/internal/testutil/mcptest"
)

// elicitServer is /mcp over a service that suspends, with the deployed
// policy (the caller decides nothing) trusting the callers' MCP client to
// put its questions to a person, and a state key; every request comes
// from fronttest.Agent, as the deployment's authorizer would say. sessions
// says whether it keeps MCP sessions, as pml serve does.
func elicitServer(t *testing.T, sessions bool) (*httptest.Server, *executor.Service) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(fronttest.TestWriter{T: t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	policy := approval.Policy{TrustedClients: []string{fronttest.Agent}}
	svc := executor.New(engine, executor.Options{Sources: []execution.ToolSource{demoserver.Source{Set: demoserver.New()}}, Logger: log,
		Suspensions: suspend.NewFile(t.TempDir(), suspend.Options{}), Policy: policy})
	key, err := approval.LoadKeyFile(t.TempDir() + "/key")
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, mcpserver.Options{Service: svc, Logger: log, Policy: policy,
		Settings: mcpserver.Settings{StateKey: key, Suspends: true, Sessions: sessions}}, fronttest.Agent)
	return srv, svc
}

// TestElicitationReachesThePerson: the destructive call reaches the
// client's user — a 2026-07-28 client through input_required and a retry,
// an older one through server-initiated elicitation on a session — and
// the script goes on from where it stopped, with state from before the
// question; a decline is a rejection the script catches.
func TestElicitationReachesThePerson(t *testing.T) {
	for _, tc := range []struct {
		name     string
		version  string
		sessions bool
	}{
		{"2026-07-28, stateless", "", false},
		{"2026-07-28, with sessions", "", true},
		{"2025-11-25 on a session", "2025-11-25", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := elicitServer(t, tc.sessions)
			yes := &fronttest.Person{Answer: fronttest.Accept("approve")}
			res, doc := fronttest.ExecuteCode(t, fronttest.ElicitingClient(t, srv.URL+"/mcp", tc.version, yes, nil), fronttest.WriteThenDelete)
			if res.IsError || doc["ok"] != true {
				t.Fatalf("approved: %+v", doc)
			}
			if r, _ := json.Marshal(doc["result"]); string(r) != `{"deleted":true,"keep":41}` {
				t.Fatalf("approved result %s", r)
			}
			if len(yes.Asked) != 1 || !strings.Contains(yes.Asked[0].Message, "demo.kv_delete") || !strings.Contains(yes.Asked[0].Message, `{"key":"k"}`) {
				t.Fatalf("the person was asked %+v", yes.Asked)
			}

			no := &fronttest.Person{Answer: fronttest.Decline}
			_, doc = fronttest.ExecuteCode(t, fronttest.ElicitingClient(t, srv.URL+"/mcp", tc.version, no, nil), fronttest.WriteThenDelete)
			r, _ := json.Marshal(doc["result"])
			if doc["ok"] != true || !strings.Contains(string(r), `"code":"REJECTED"`) || !strings.Contains(string(r), "declined by the user") || !strings.Contains(string(r), `"keep":41`) {
				t.Fatalf("declined: %s %+v", r, doc["error"])
			}
		})
	}
}

// TestNoElicitationNoQuestion: a client that cannot be asked — it did not
// declare elicitation, or it is an older client on a stateless endpoint,
// which cannot carry the answer back — gets the suspended document, which
// tells the model it may not approve, and who may.
func TestNoElicitationNoQuestion(t *testing.T) {
	srv, _ := elicitServer(t, false)
	for name, c := range map[string]*client.Client{
		"no elicitation":          mcptest.Streamable(t, srv.URL+"/mcp", ""),
		"2025-11-25 on stateless": fronttest.ElicitingClient(t, srv.URL+"/mcp", "2025-11-25", &fronttest.Person{Answer: fronttest.Accept("approve")}, nil),
	} {
		res, doc := fronttest.CallTool(t, c, "execute_code", map[string]any{"code": fronttest.WriteThenDelete, "approval": "suspend"})
		if res.IsError || doc["status"] != "suspended" {
			t.Fatalf("%s: %+v", name, doc)
		}
		text := res.Content[0].(mcp.TextContent).Text
		if !strings.Contains(text, "approving them is not yours to do") || !strings.Contains(text, "elicitation") {
			t.Errorf("%s: the model is not told who decides:\n%s", name, text)
		}
	}
}

// TestRequestStateIsTamperProofAndUsedOnce: a changed requestState is
// refused and nothing runs; a retry sent again after it was answered is
// refused (CONFLICT): the answer was used once.
func TestRequestStateIsTamperProofAndUsedOnce(t *testing.T) {
	srv, _ := elicitServer(t, false)
	flip := &fronttest.StateTamperer{Change: func(s string) string { return strings.Replace(s, ".", ".A", 1) }}
	res, doc := fronttest.ExecuteCode(t, fronttest.ElicitingClient(t, srv.URL+"/mcp", "", &fronttest.Person{Answer: fronttest.Accept("approve")}, flip), fronttest.WriteThenDelete)
	if !res.IsError || !strings.Contains(res.Content[0].(mcp.TextContent).Text, "INVALID_REQUEST") {
		t.Fatalf("a tampered state: %+v", doc)
	}

	keep := &fronttest.StateTamperer{Change: func(s string) string { return s }}
	res, doc = fronttest.ExecuteCode(t, fronttest.ElicitingClient(t, srv.URL+"/mcp", "", &fronttest.Person{Answer: fronttest.Accept("approve")}, keep), fronttest.WriteThenDelete)
	if res.IsError || doc["ok"] != true {
		t.Fatalf("the honest retry: %+v", doc)
	}
	last, body := keep.Last()
	replay := last.Clone(context.Background())
	replay.Body = io.NopCloser(bytes.NewReader(body))
	replay.RequestURI = ""
	resp, err := http.DefaultClient.Do(replay)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(raw), "CONFLICT") || !strings.Contains(string(raw), `"isError":true`) {
		t.Fatalf("a replayed retry: %s", raw)
	}
}

// TestTheAgentCannotApproveItself: under the deployed policy neither
// allow_destructive nor resume_execution lets the calling agent run what
// needs a person; it may reject.
func TestTheAgentCannotApproveItself(t *testing.T) {
	srv, _ := elicitServer(t, false)
	c := mcptest.Streamable(t, srv.URL+"/mcp", "")
	call := func(name string, args map[string]any) (*mcp.CallToolResult, string) {
		var req mcp.CallToolRequest
		req.Params.Name, req.Params.Arguments = name, args
		res, err := c.CallTool(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		return res, res.Content[0].(mcp.TextContent).Text
	}
	res, text := call("execute_code", map[string]any{"code": fronttest.WriteThenDelete, "allow_destructive": true})
	if !res.IsError || !strings.Contains(text, "allow_destructive is not honoured") {
		t.Fatalf("allow_destructive from the agent: %s", text)
	}
	_, doc := fronttest.ExecuteCode(t, c, strings.Replace(fronttest.WriteThenDelete, "const keep", "// approval: suspend\nconst keep", 1))
	if doc["status"] != nil {
		t.Fatalf("without approval the agent's destructive call is refused, not suspended: %+v", doc)
	}
	res, text = call("execute_code", map[string]any{"code": fronttest.WriteThenDelete, "approval": "suspend"})
	var sus struct {
		ExecutionID string `json:"execution_id"`
	}
	raw, _ := json.Marshal(res.StructuredContent)
	_ = json.Unmarshal(raw, &sus)
	if res.IsError || sus.ExecutionID == "" {
		t.Fatalf("suspend: %s", text)
	}
	res, text = call("resume_execution", map[string]any{"execution_id": sus.ExecutionID, "decisions": map[string]any{"2": "approve"}})
	if !res.IsError || !strings.Contains(text, "FORBIDDEN") || !strings.Contains(text, "the caller may reject") {
		t.Fatalf("the agent approving: %s", text)
	}
	res, text = call("resume_execution", map[string]any{"execution_id": sus.ExecutionID, "decisions": map[string]any{"2": "reject"}})
	if res.IsError || !strings.Contains(text, "REJECTED") {
		t.Fatalf("the agent rejecting: %s", text)
	}
}

// TestTheAgentCancelsItsExecution: what the agent may not approve it may
// stop; a cancelled execution's pending call never runs, and a second
// cancel or a resume afterwards is refused.
func TestTheAgentCancelsItsExecution(t *testing.T) {
	srv, _ := elicitServer(t, false)
	c := mcptest.Streamable(t, srv.URL+"/mcp", "")
	call := func(name string, args map[string]any) (*mcp.CallToolResult, string, map[string]any) {
		var req mcp.CallToolRequest
		req.Params.Name, req.Params.Arguments = name, args
		res, err := c.CallTool(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		raw, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(raw, &doc)
		return res, res.Content[0].(mcp.TextContent).Text, doc
	}
	res, text, doc := call("execute_code", map[string]any{"code": fronttest.WriteThenDelete, "approval": "suspend"})
	id, _ := doc["execution_id"].(string)
	if res.IsError || id == "" || !strings.Contains(text, `cancel_execution {"execution_id": "`+id+`"}`) {
		t.Fatalf("suspend, and the text names cancel_execution: %s", text)
	}
	res, text, doc = call("cancel_execution", map[string]any{"execution_id": id})
	if res.IsError || doc["status"] != execution.StatusCancelled {
		t.Fatalf("cancel: %s", text)
	}
	for _, tc := range []struct {
		name string
		args map[string]any
		want string
	}{
		{"cancel_execution", map[string]any{"execution_id": id}, "CONFLICT"},
		{"resume_execution", map[string]any{"execution_id": id, "decisions": map[string]any{"2": "reject"}}, "CONFLICT"},
		{"cancel_execution", map[string]any{"execution_id": "ex_000000000000000000000000"}, "NOT_FOUND"},
		{"cancel_execution", map[string]any{}, "execution_id is required"},
	} {
		if res, text, _ := call(tc.name, tc.args); !res.IsError || !strings.Contains(text, tc.want) {
			t.Errorf("%s %v: want an error with %s, got %s", tc.name, tc.args, tc.want, text)
		}
	}
}

// TestElicitationScopes: the client's user (the deployment trusts the
// client) is offered a scope; "site" with a count approves a loop's calls
// on one answer, and asks again past the count; "all" decides every
// pending call at once. Each covered call is traced as approved by the
// user, under the grant.
func TestElicitationScopes(t *testing.T) {
	srv, _ := elicitServer(t, false)
	const loop = `const out = []
for (const key of ["s0", "s1", "s2", "s3"]) { await mcp.demo.kv_set({key, value: 1}); out.push(await mcp.demo.kv_delete({key})) }
return out`
	answers := 0
	person := &fronttest.Person{Answer: func(p mcp.ElicitationParams) *mcp.ElicitationResult {
		answers++
		content := map[string]any{"decision": "approve", "scope": "site", "count": 3}
		if answers > 1 {
			content = map[string]any{"decision": "approve"}
		}
		return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionAccept, Content: content}}
	}}
	res, doc := fronttest.CallTool(t, fronttest.ElicitingClient(t, srv.URL+"/mcp", "", person, nil), "execute_code",
		map[string]any{"code": loop, "call_detail": "full"})
	if res.IsError || doc["ok"] != true || answers != 2 {
		t.Fatalf("after %d answers: %+v", answers, doc)
	}
	schema, _ := json.Marshal(person.Asked[0].RequestedSchema)
	if !strings.Contains(string(schema), `"scope"`) || !strings.Contains(string(schema), `"maximum":100`) {
		t.Fatalf("the form offers no scope: %s", schema)
	}
	granted := 0
	for _, c := range doc["calls"].([]any) {
		if a, ok := c.(map[string]any)["approval"].(map[string]any); ok && a["grant"] == "g1" && a["via"] == "elicitation" {
			granted++
		}
	}
	if granted != 3 {
		t.Fatalf("%d calls under the grant: %+v", granted, doc["calls"])
	}

	all := &fronttest.Person{Answer: func(mcp.ElicitationParams) *mcp.ElicitationResult {
		return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionAccept,
			Content: map[string]any{"decision": "approve", "scope": "all"}}}
	}}
	res, doc = fronttest.ExecuteCode(t, fronttest.ElicitingClient(t, srv.URL+"/mcp", "", all, nil),
		`await Promise.all(["t0", "t1", "t2"].map((key) => mcp.demo.kv_set({key, value: 1})))
return await Promise.all(["t0", "t1", "t2"].map((key) => mcp.demo.kv_delete({key})))`)
	if res.IsError || doc["ok"] != true || len(all.Asked) != 3 {
		t.Fatalf("approve all: asked %d, %+v", len(all.Asked), doc)
	}
}
