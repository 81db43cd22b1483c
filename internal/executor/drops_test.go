package executor_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/testutil/syncbuf"
)

// fixedSource offers the tools it is given and answers every call with
// its own name.
type fixedSource struct {
	name  string
	tools []catalog.Tool
}

func (s fixedSource) Tools(context.Context) ([]catalog.Tool, error) { return s.tools, nil }

func (s fixedSource) Call(context.Context, catalog.Tool, json.RawMessage, execution.CallOptions) (json.RawMessage, error) {
	return json.Marshal(s.name)
}

// TestCatalogLogsEveryDropOnce: a tool the catalog leaves out is logged
// with the reason, once, however many executions build the catalog again;
// services sharing a DropLog (capability runs) do not repeat it either.
func TestCatalogLogsEveryDropOnce(t *testing.T) {
	ro := catalog.Annotations{ReadOnly: &readOnlyHint}
	first := fixedSource{name: "first", tools: []catalog.Tool{{Server: "x", Name: "a", Annotations: ro}, {Server: "x", Name: "then", Annotations: ro}}}
	second := fixedSource{name: "second", tools: []catalog.Tool{{Server: "x", Name: "a", Annotations: ro}, {Server: "x", Name: "b", Annotations: ro},
		{Server: "toJSON", Name: "c", Annotations: ro}}}
	logs := &syncbuf.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	drops := catalog.NewDropLog(log)
	newService := func() *executor.Service {
		return executor.New(engine, executor.Options{Sources: []execution.ToolSource{first, second}, Logger: log, Drops: drops})
	}
	for range 2 {
		svc := newService()
		for range 2 {
			r := svc.Execute(context.Background(), execution.Request{Code: "return [await mcp.x.a(), await mcp.x.b()]", TimeoutMS: 10000})
			if !r.OK || string(r.Result) != `["first","second"]` {
				t.Fatalf("got %s %+v; want the first source's x:a and the second's x:b", r.Result, r.Error)
			}
		}
		if r := svc.Execute(context.Background(), execution.Request{Code: "return await mcp.x.then()", TimeoutMS: 10000}); r.OK || r.Error.Code != fault.ToolNotFound {
			t.Fatalf("x:then reached the sandbox: %s %+v", r.Result, r.Error)
		}
	}
	tests := []struct{ tool, reason string }{
		{"x:a", "an earlier source"},
		{"x:then", "reserved"},
		{"toJSON:c", "reserved"},
	}
	out := logs.String()
	for _, tt := range tests {
		var lines []string
		for line := range strings.Lines(out) {
			if strings.Contains(line, `"tool":"`+tt.tool+`"`) {
				lines = append(lines, line)
			}
		}
		if len(lines) != 1 || !strings.Contains(lines[0], tt.reason) {
			t.Errorf("%s: logged %q; want one line giving the reason %q", tt.tool, lines, tt.reason)
		}
	}
}

// readOnlyHint is what a test tool that only reads says: MCP's defaults
// make one that says nothing destructive.
var readOnlyHint = true
