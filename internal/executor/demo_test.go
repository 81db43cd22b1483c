package executor_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/trace"
)

// demoService is a service over the in-process demo tools that logs
// nothing, with sink (may be nil).
func demoService(sink trace.Sink) *executor.Service {
	return executor.New(engine, executor.Options{Sources: []execution.ToolSource{demoserver.Source{}}, Sink: sink, Logger: slog.New(slog.DiscardHandler)})
}

// TestDemoToolsValidateLikeMCPTools: the demo tools' arguments go through
// the same schema check as an MCP tool's, so a bad one is INVALID_ARGUMENTS
// naming the field, never a Go unmarshal message.
func TestDemoToolsValidateLikeMCPTools(t *testing.T) {
	svc := demoService(nil)
	tests := []struct {
		name, code string
		want       string // JSON result when ok
		tool, path string // else the tool named, and a path the message names
	}{
		{name: "string for a number", code: `return await mcp.demo.add({a: "x", b: 1})`, tool: "demo:add", path: "/a"},
		{name: "missing field", code: `return await mcp.demo.add({a: 1})`, tool: "demo:add", path: "(root)"},
		{name: "below the minimum", code: `return await mcp.demo.sleep({ms: -1})`, tool: "demo:sleep", path: "/ms"},
		{name: "string for sleep", code: `return await mcp.demo.sleep({ms: "5"})`, tool: "demo:sleep", path: "/ms"},
		{name: "number for the message", code: `return await mcp.demo.fail({message: 5})`, tool: "demo:fail", path: "/message"},
		{name: "not an object", code: `return await mcp.demo.echo(5)`, tool: "demo:echo", path: ""},
		{name: "valid add", code: `return await mcp.demo.add({a: 1, b: 2})`, want: `3`},
		{name: "valid echo", code: `return await mcp.demo.echo({x: [1]})`, want: `{"x":[1]}`},
		{name: "no arguments to echo", code: `return await mcp.demo.echo()`, want: `{}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := svc.Execute(context.Background(), execution.Request{Code: tt.code, TimeoutMS: 10000})
			if tt.want != "" {
				if !r.OK {
					t.Fatalf("failed: %+v", r.Error)
				}
				jsonEq(t, r.Result, tt.want)
				return
			}
			if r.OK || r.Error == nil {
				t.Fatalf("want INVALID_ARGUMENTS, got ok with %s", r.Result)
			}
			e := r.Error
			if e.Code != fault.InvalidArguments || e.Tool != tt.tool || e.Details == nil ||
				!strings.Contains(e.Message, tt.path) || strings.Contains(e.Message, "json:") || strings.Contains(e.Message, "unmarshal") {
				t.Fatalf("got %+v; want INVALID_ARGUMENTS for %s with details and a schema message naming %q", e, tt.tool, tt.path)
			}
			if len(r.Calls) != 1 || r.Calls[0].OK || r.Calls[0].ErrorCode != fault.InvalidArguments {
				t.Fatalf("traced %+v; want one refused call", r.Calls)
			}
		})
	}
}
