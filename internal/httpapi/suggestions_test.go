package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/httpapi"
)

// suggestions gives each principal its own list and publishes only what
// it lists.
type suggestions struct{ published []string }

func (s *suggestions) List(_ context.Context, principal string) (any, error) {
	return []map[string]string{{"id": "0123456789abcdef", "for": principal}}, nil
}

func (s *suggestions) Publish(_ context.Context, principal, id, name string) (any, error) {
	if principal != "alice" || id != "0123456789abcdef" {
		return nil, fault.New(fault.NotFound, "no suggestion %q for this caller", id)
	}
	s.published = append(s.published, id+" "+name)
	return map[string]string{"name": name}, nil
}

// ranker puts every capability first, annotated.
type ranker struct{}

func (ranker) Search(_ context.Context, tools []catalog.Tool, _ string, _ int) []catalog.Hit {
	return []catalog.Hit{{Tool: catalog.Tool{Server: "ranked", Name: "first"}, Score: 9}}
}
func (ranker) Annotate(_ context.Context, tools []catalog.Tool) []catalog.Tool {
	out := append([]catalog.Tool(nil), tools...)
	out[0].Description = "ANNOTATED"
	return out
}

func TestSuggestionRoutes(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	svc := executor.New(engine, executor.Options{Sources: []execution.ToolSource{demoserver.Source{}}, Logger: log})
	sugs := &suggestions{}
	h := httpapi.New(httpapi.Options{Service: svc, Capabilities: testCaps(t), Suggestions: sugs, Ranker: ranker{}, Logger: log})
	// The principal is the front's to say (the authorizer, pml serve's
	// token); here a header stands in for it.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(execution.WithPrincipal(r.Context(), r.Header.Get("X-Test-Principal"))))
	}))
	t.Cleanup(srv.Close)
	do := func(principal, method, path, body string) (int, string) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("X-Test-Principal", principal)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	for _, tc := range []struct {
		name, principal, method, path, body string
		status                              int
		contains                            string
	}{
		{"list, the caller's own", "bob", "GET", "/capabilities/suggestions", "", 200, `"for":"bob"`},
		{"publish", "alice", "POST", "/capabilities/suggestions/0123456789abcdef/publish", `{"name": "crm:mail"}`, 201, `"name":"crm:mail"`},
		{"publish with the proposed name", "alice", "POST", "/capabilities/suggestions/0123456789abcdef/publish", `{}`, 201, `"name":""`},
		{"publish another's", "bob", "POST", "/capabilities/suggestions/0123456789abcdef/publish", `{}`, 404, "NOT_FOUND"},
		{"publish, an unknown field", "alice", "POST", "/capabilities/suggestions/0123456789abcdef/publish", `{"code": "evil()"}`, 400, "unknown field"},
		{"publish, not JSON", "alice", "POST", "/capabilities/suggestions/0123456789abcdef/publish", `name`, 400, "INVALID_REQUEST"},
		{"d.ts annotated", "bob", "GET", "/tools?format=dts", "", 200, "ANNOTATED"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := do(tc.principal, tc.method, tc.path, tc.body)
			if status != tc.status || !strings.Contains(body, tc.contains) {
				t.Fatalf("%d %s; want %d with %q", status, body, tc.status, tc.contains)
			}
		})
	}
	if len(sugs.published) != 2 {
		t.Errorf("published %v", sugs.published)
	}

	// Over /mcp: list_capabilities has the caller's suggestions,
	// search_tools the ranker's order.
	call := func(tool, args string) map[string]any {
		body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + tool + `","arguments":` + args + `}}`
		status, raw := do("carol", "POST", "/mcp", body)
		if status != 200 {
			t.Fatalf("%s: %d %s", tool, status, raw)
		}
		var rpc struct {
			Result struct {
				Structured map[string]any `json:"structuredContent"`
			} `json:"result"`
		}
		if err := json.Unmarshal([]byte(raw), &rpc); err != nil {
			t.Fatalf("%s: %v: %s", tool, err, raw)
		}
		return rpc.Result.Structured
	}
	got, _ := json.Marshal(call("list_capabilities", `{}`))
	if !strings.Contains(string(got), `"suggested":[{"for":"carol"`) {
		t.Errorf("list_capabilities: %s", got)
	}
	got, _ = json.Marshal(call("search_tools", `{"query": "anything"}`))
	if !strings.Contains(string(got), `mcp.ranked.first`) {
		t.Errorf("search_tools: %s", got)
	}
}
