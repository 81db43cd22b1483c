package executor_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/trace"
)

// listSource lists whatever it is given last, handing out the same slice
// until then (as the MCP pool does), and answers every call with the
// tool's name.
type listSource struct {
	mu    sync.Mutex
	tools []catalog.Tool
}

func (s *listSource) set(names ...string) {
	tools := make([]catalog.Tool, len(names))
	for i, n := range names {
		tools[i] = catalog.Tool{Server: "ls", Name: n, InputSchema: json.RawMessage(`{"type":"object"}`), Kind: trace.KindMCP,
			Annotations: catalog.Annotations{ReadOnly: new(true)}}
	}
	s.mu.Lock()
	s.tools = tools
	s.mu.Unlock()
}

func (s *listSource) Tools(context.Context) ([]catalog.Tool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tools, nil
}

func (s *listSource) Call(_ context.Context, t catalog.Tool, _ json.RawMessage, _ execution.CallOptions) (json.RawMessage, error) {
	return json.Marshal(t.Name)
}

// resolveSource resolves any name under server "rs" (a capability
// registry's part in the catalog).
type resolveSource struct{ listSource }

func (s *resolveSource) Resolve(_ context.Context, names []string) ([]catalog.Tool, error) {
	var out []catalog.Tool
	for _, n := range names {
		server, tool, _ := cutName(n)
		if server == "rs" {
			out = append(out, catalog.Tool{Server: server, Name: tool, InputSchema: json.RawMessage(`{"type":"object"}`), Kind: trace.KindCapability})
		}
	}
	return out, nil
}

func (s *resolveSource) HasServer(_ context.Context, server string) (bool, error) {
	return server == "rs", nil
}

func cutName(n string) (string, string, bool) {
	for i := range n {
		if n[i] == ':' {
			return n[:i], n[i+1:], true
		}
	}
	return n, "", false
}

// TestListingFollowsTheSources: the service reuses what it merged from a
// source's list while the source answers the same slice, and every
// execution sees the list as it is when it starts: a tool added is
// callable, a tool removed is missing, a filter and a resolved name still
// narrow and add per execution, whatever order the sources come in.
func TestListingFollowsTheSources(t *testing.T) {
	for _, order := range []string{"listing first", "resolving first"} {
		t.Run(order, func(t *testing.T) {
			ls, rs := &listSource{}, &resolveSource{}
			ls.set("a")
			sources := []execution.ToolSource{ls, rs}
			if order == "resolving first" {
				sources = []execution.ToolSource{rs, ls}
			}
			svc := executor.New(engine, executor.Options{Sources: sources, Logger: slog.New(slog.DiscardHandler)})
			run := func(code string, filter ...string) *execution.Response {
				t.Helper()
				return svc.Execute(context.Background(), execution.Request{Code: code, TimeoutMS: 10000, Source: "test", Tools: filter})
			}
			keys := `return Object.keys(mcp.ls).sort().join(",")`
			for range 3 {
				if r := run(keys); !r.OK || string(r.Result) != `"a"` {
					t.Fatalf("tools of ls: %s %v", r.Result, r.Error)
				}
			}
			ls.set("a", "b")
			if r := run(`return await mcp.ls.b({})`); !r.OK || string(r.Result) != `"b"` {
				t.Fatalf("a tool added to the list: %s %v", r.Result, r.Error)
			}
			ls.set("b")
			if r := run(`return await mcp.ls.a({})`); r.OK || r.Error.Code != "TOOL_NOT_FOUND" {
				t.Fatalf("a tool removed from the list: %s %v", r.Result, r.Error)
			}
			if r := run(keys); !r.OK || string(r.Result) != `"b"` {
				t.Fatalf("tools of ls after the removal: %s %v", r.Result, r.Error)
			}
			ls.set("b", "c")
			if r := run(keys, "ls:c"); !r.OK || string(r.Result) != `"c"` {
				t.Fatalf("a filter narrows: %s %v", r.Result, r.Error)
			}
			if r := run(`return [await mcp.rs.x({}), Object.keys(mcp.ls).sort().join(",")]`); !r.OK || string(r.Result) != `["x","b,c"]` {
				t.Fatalf("a resolved name beside the list: %s %v", r.Result, r.Error)
			}
			if r := run(keys); !r.OK || string(r.Result) != `"b,c"` {
				t.Fatalf("a resolved name stays with its execution: %s %v", r.Result, r.Error)
			}
		})
	}
}
