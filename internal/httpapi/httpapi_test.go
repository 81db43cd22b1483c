package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/httpapi"
	"github.com/pml-sandbox/pml/internal/testutil/enginetest"
	"github.com/pml-sandbox/pml/internal/testutil/mcptest"
	mcpkind "github.com/pml-sandbox/pml/internal/toolsource/mcp"
	"github.com/pml-sandbox/pml/internal/trace"
)

var engine *guest.Engine

func TestMain(m *testing.M) {
	enginetest.Main(m, func(e *guest.Engine) { engine = e })
}

// local is the policy of local use (pml run, pml serve on loopback): the
// caller is the person at the keyboard and decides.
var local = approval.Policy{CallerDecides: true}

// traces is a one-execution TraceReader.
type traces struct{ id string }

func (t traces) GetExecution(_ context.Context, id string) (trace.Execution, []trace.Call, error) {
	if id != t.id {
		return trace.Execution{}, nil, fault.New(fault.NotFound, "no execution %s", id)
	}
	return trace.Execution{ID: id, Status: "ok"}, []trace.Call{{ExecutionID: id, CallID: 1, Server: "demo", Tool: "echo", OK: true}}, nil
}

// testCaps is a registry in a temporary file behind the guard, under
// the local policy: the caller publishes its own capabilities at once.
func testCaps(t *testing.T) *capability.Guard {
	t.Helper()
	return &capability.Guard{Registry: capability.NewFileRegistry(filepath.Join(t.TempDir(), "caps.json")), Policy: approval.Policy{CallerDecides: true}}
}

func newServer(t *testing.T) *httptest.Server {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	svc := executor.New(engine, executor.Options{Sources: []execution.ToolSource{demoserver.Source{}}, Logger: log})
	h := httpapi.New(httpapi.Options{Service: svc, Traces: traces{id: "ex_known"}, Capabilities: testCaps(t), Logger: log, MaxBodyBytes: 64 << 10})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func TestRoutes(t *testing.T) {
	srv := newServer(t)
	big := `{"code": "return 1 // ` + strings.Repeat("x", 70<<10) + `"}`
	tests := []struct {
		name, method, path, body string
		status                   int
		contains                 string
	}{
		{"execute ok", "POST", "/execute", `{"code": "return await mcp.demo.add({a: 1, b: 2})"}`, 200, `"result":3`},
		{"bad JSON", "POST", "/execute", `{"code": `, 400, "INVALID_REQUEST"},
		{"missing code", "POST", "/execute", `{"args": {}}`, 400, "code is missing"},
		{"unknown field", "POST", "/execute", `{"code": "return 1", "timeout": 5}`, 400, "unknown field"},
		{"body too large", "POST", "/execute", big, 413, "LIMIT_EXCEEDED"},
		{"script error", "POST", "/execute", `{"code": "throw new TypeError('nope')"}`, 422, "SCRIPT_ERROR"},
		{"unknown tool", "POST", "/execute", `{"code": "return await mcp.demo.nope()"}`, 422, "TOOL_NOT_FOUND"},
		{"timeout", "POST", "/execute", `{"code": "while (true) {}", "timeout_ms": 100}`, 504, "TIMEOUT"},
		{"unknown route", "GET", "/nowhere", "", 404, "NOT_FOUND"},
		{"wrong method", "GET", "/execute", "", 405, ""},
		{"tools", "GET", "/tools", "", 200, `"name":"echo"`},
		{"tools as TypeScript", "GET", "/tools?format=dts", "", 200, "declare const mcp"},
		{"tools bad format", "GET", "/tools?format=xml", "", 400, "INVALID_REQUEST"},
		{"execution found", "GET", "/executions/ex_known", "", 200, `"tool":"echo"`},
		{"execution not found", "GET", "/executions/ex_unknown", "", 404, "NOT_FOUND"},
		{"save capability", "POST", "/capabilities", `{"name": "math:sum", "code": "return 1"}`, 201, "math:sum"},
		{"save bad capability", "POST", "/capabilities", `{"name": "nocolon", "code": "return 1"}`, 400, "INVALID_REQUEST"},
		{"save capability, a field in another case", "POST", "/capabilities", `{"name": "math:sum", "CODE": "return 1"}`, 400, "field names are exact"},
		{"save capability, a repeated field", "POST", "/capabilities", `{"name": "math:sum", "code": "return 1", "code": "return 2"}`, 400, "duplicate"},
		{"execute, a field in another case", "POST", "/execute", `{"code": "return 1", "Allow_Destructive": true}`, 400, "field names are exact"},
		{"list capabilities", "GET", "/capabilities", "", 200, `"capabilities"`},
		{"health", "GET", "/healthz", "", 200, `"ok":true`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := send(t, tt.method, srv.URL+tt.path, tt.body)
			if status != tt.status {
				t.Fatalf("status %d, want %d: %s", status, tt.status, body)
			}
			if !strings.Contains(body, tt.contains) {
				t.Fatalf("body %s does not contain %q", body, tt.contains)
			}
		})
	}
}

// send makes a request, with body as JSON when there is one, and returns
// the status and body of the answer.
func send(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream") // what /mcp wants
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

// TestRouteKeysAreServed: every route RouteKeys lists (and template.yaml
// deploys) reaches a handler of its own rather than the 404/405 answer for
// unknown routes.
func TestRouteKeysAreServed(t *testing.T) {
	srv := newServer(t)
	keys := httpapi.RouteKeys()
	if len(keys) == 0 {
		t.Fatal("no routes")
	}
	for _, key := range keys {
		t.Run(key, func(t *testing.T) {
			method, path, ok := strings.Cut(key, " ")
			if !ok {
				t.Fatalf("route key %q is not METHOD /path", key)
			}
			status, body := send(t, method, srv.URL+strings.ReplaceAll(path, "{id}", "ex_known"), "{}")
			// /mcp answers GET with its own 405 that says why (no event
			// stream); the unknown-route answers never say that.
			if status == http.StatusNotFound && strings.Contains(body, "no route") ||
				status == http.StatusMethodNotAllowed && !strings.Contains(body, "opens no event stream") {
				t.Errorf("%s: %d %s", key, status, body)
			}
		})
	}
}

func TestMCPEndpoint(t *testing.T) {
	srv := newServer(t)
	ctx := context.Background()
	c := mcptest.Streamable(t, srv.URL+"/mcp", mcpkind.ProtocolVersion)
	list, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, tool := range list.Tools {
		names[tool.Name] = true
	}
	for _, want := range []string{"execute_code", "resume_execution", "cancel_execution", "end_session", "search_tools", "list_capabilities", "save_capability"} {
		if !names[want] {
			t.Fatalf("tools/list lacks %s: %v", want, names)
		}
	}

	call := func(name string, args map[string]any) *mcp.CallToolResult {
		var req mcp.CallToolRequest
		req.Params.Name = name
		req.Params.Arguments = args
		res, err := c.CallTool(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := call("execute_code", map[string]any{"code": "return (await mcp.demo.add({a: args.a, b: 1})) * 2", "args": map[string]any{"a": 20}})
	if res.IsError {
		t.Fatalf("execute_code failed: %+v", res)
	}
	raw, _ := json.Marshal(res.StructuredContent)
	var r execution.Response
	if err := json.Unmarshal(raw, &r); err != nil || !r.OK || string(r.Result) != "42" || len(r.Calls) != 1 {
		t.Fatalf("structured content %s (%v)", raw, err)
	}
	if bad := call("execute_code", map[string]any{"code": "throw new Error('x')"}); !bad.IsError {
		t.Fatalf("a failing script must set isError: %+v", bad)
	}
	hits := call("search_tools", map[string]any{"query": "add two numbers", "limit": 1})
	if hits.IsError || !strings.Contains(fmt.Sprint(hits.StructuredContent), "mcp.demo.add(args)") {
		t.Fatalf("search_tools: %+v", hits.StructuredContent)
	}
	if saved := call("save_capability", map[string]any{"name": "math:double", "code": "return args.x * 2"}); saved.IsError {
		t.Fatalf("save_capability: %+v", saved)
	}
	if l := call("list_capabilities", nil); !strings.Contains(fmt.Sprint(l.StructuredContent), "math:double") {
		t.Fatalf("list_capabilities: %+v", l.StructuredContent)
	}
}

// TestOversizedCodeIs413 sends code that fits the body cap but not the
// engine's code limit (256 KiB by default).
func TestOversizedCodeIs413(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	svc := executor.New(engine, executor.Options{Sources: []execution.ToolSource{demoserver.Source{}}, Logger: log})
	srv := httptest.NewServer(httpapi.New(httpapi.Options{Service: svc, Logger: log, MaxBodyBytes: 1 << 20}))
	defer srv.Close()
	body := `{"code": "return 1 // ` + strings.Repeat("x", 300<<10) + `"}`
	resp, err := http.Post(srv.URL+"/execute", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(raw), `"limit":"code_size"`) {
		t.Fatalf("%d %s", resp.StatusCode, raw)
	}
}

// ownedTraces holds one execution, run by owner.
type ownedTraces struct{ id, owner string }

func (o ownedTraces) GetExecution(_ context.Context, id string) (trace.Execution, []trace.Call, error) {
	if id != o.id {
		return trace.Execution{}, nil, fault.New(fault.NotFound, "no execution %q", id)
	}
	return trace.Execution{ID: id, Status: "ok", Principal: o.owner}, nil, nil
}

// TestExecutionsAnswerOnlyTheirPrincipal: GET /executions/{id} shows an
// execution to the principal that ran it, and to anyone else answers as
// for an id that does not exist, so ids cannot be probed.
func TestExecutionsAnswerOnlyTheirPrincipal(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	svc := executor.New(engine, executor.Options{Logger: log})
	h := httpapi.New(httpapi.Options{Service: svc, Traces: ownedTraces{id: "ex_owned", owner: "arn:aws:iam::1:user/owner"}, Logger: log})
	// Stands in for the Lambda adapter, which sets what API Gateway
	// verified (never a header in production).
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(execution.WithPrincipal(r.Context(), r.Header.Get("X-Test-Principal"))))
	}))
	defer srv.Close()
	get := func(id, principal string) (int, string) {
		req, _ := http.NewRequest("GET", srv.URL+"/executions/"+id, nil)
		req.Header.Set("X-Test-Principal", principal)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if status, body := get("ex_owned", "arn:aws:iam::1:user/owner"); status != 200 || !strings.Contains(body, `"principal":"arn:aws:iam::1:user/owner"`) {
		t.Fatalf("the owner: %d %s", status, body)
	}
	_, missing := get("ex_other", "arn:aws:iam::1:user/mallory")
	for _, principal := range []string{"arn:aws:iam::1:user/mallory", "", "jwt:https://issuer#owner"} {
		status, body := get("ex_owned", principal)
		if status != 404 || strings.Replace(body, "ex_owned", "ex_other", 1) != missing {
			t.Errorf("principal %q: %d %s; want the answer for a missing id (%s)", principal, status, body, missing)
		}
	}
}

// TestToolsNarrowed: GET /tools answers for the servers ?server= names and
// the tools ?q= finds, so that one server's declarations, or a search
// hit's, are served without the whole catalog's.
func TestToolsNarrowed(t *testing.T) {
	srv := newServer(t)
	for _, tt := range []struct {
		name, path  string
		status      int
		has, hasNot string
	}{
		{"a server's declarations", "/tools?format=dts&server=demo", 200, "demo: {", ""},
		{"another server's: none", "/tools?format=dts&server=elsewhere", 200, "declare const mcp: {}", "demo: {"},
		{"servers comma-separated", "/tools?server=elsewhere,demo", 200, `"name":"echo"`, ""},
		{"a search hit's declarations", "/tools?format=dts&q=echo&limit=1", 200, "echo(args", "add(args"},
		{"a search as JSON", "/tools?q=add&limit=1", 200, `"name":"add"`, `"name":"echo"`},
		{"bad limit", "/tools?q=add&limit=x", 400, "INVALID_REQUEST", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, body := send(t, "GET", srv.URL+tt.path, "")
			if status != tt.status || !strings.Contains(body, tt.has) || (tt.hasNot != "" && strings.Contains(body, tt.hasNot)) {
				t.Fatalf("status %d (want %d), body %.600s: want %q and not %q", status, tt.status, body, tt.has, tt.hasNot)
			}
		})
	}
}
