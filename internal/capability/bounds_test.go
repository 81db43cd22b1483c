package capability_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/bridge"
	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/fault"
)

// runNarrowed runs code as a root request narrowed to tools.
func (w *world) runNarrowed(code string, tools ...string) *bridge.Response {
	return w.svc.Execute(context.Background(), bridge.Request{Code: code, Tools: tools, TimeoutMS: 20000})
}

// wantForbidden checks that r failed FORBIDDEN because of tool, however
// deep in the capability tree the refusal happened.
func wantForbidden(t *testing.T, r *bridge.Response, tool string) {
	t.Helper()
	if r.OK || r.Error.Code != fault.Forbidden || !strings.Contains(r.Error.Message, tool) {
		t.Fatalf("want FORBIDDEN naming %s, got %+v", tool, r.Error)
	}
	// A capability's error names the capability; the tool that failed
	// inside it is its details' inner_tool, one level per capability.
	got, d := r.Error.Tool, r.Error.Details
	for got != tool {
		m, ok := d.(map[string]any)
		if !ok {
			t.Fatalf("FORBIDDEN does not name %s as the tool: %+v", tool, r.Error)
		}
		got, _ = m["inner_tool"].(string)
		d = m["details"]
	}
}

func TestCapabilityInheritsTheCallersNarrowing(t *testing.T) {
	w := newWorld(t, map[string]string{
		"iso:x":   "return await mcp.demo.echo({message: 'leak'})",
		"iso:dyn": "const s = ['de', 'mo'].join(''); return await mcp[s].echo({message: 'leak'})",
		"iso:add": "return await mcp.demo.add({a: 1, b: 2})",
		"iso:mid": "return await mcp.iso.x({})",
		"iso:ok":  "return await mcp.iso.add({})",
		"iso:ls":  "return (await tools.list()).map(t => t.server + ':' + t.name).sort()",
	})
	t.Run("static reference refused before the child runs", func(t *testing.T) {
		wantForbidden(t, w.runNarrowed("return await mcp.iso.x({})", "iso:*"), "demo:echo")
	})
	t.Run("dynamic access refused at run time", func(t *testing.T) {
		wantForbidden(t, w.runNarrowed("return await mcp.iso.dyn({})", "iso:*"), "demo:echo")
	})
	t.Run("unnarrowed caller", func(t *testing.T) {
		for _, code := range []string{"return await mcp.iso.x({})", "return await mcp.iso.dyn({})"} {
			if r := w.run(code); !r.OK {
				t.Fatalf("%s: %+v", code, r.Error)
			}
		}
	})
	t.Run("nested two levels keeps the narrowing", func(t *testing.T) {
		wantForbidden(t, w.runNarrowed("return await mcp.iso.mid({})", "iso:*"), "demo:echo")
		if r := w.runNarrowed("return await mcp.iso.ok({})", "iso:*", "demo:add"); !r.OK || string(r.Result) != "3" {
			t.Fatalf("a tool the narrowing names must stay callable two levels down: %s %+v", r.Result, r.Error)
		}
		wantForbidden(t, w.runNarrowed("return await mcp.iso.ok({})", "iso:*", "demo:echo"), "demo:add")
	})
	t.Run("the child sees only what its caller may", func(t *testing.T) {
		r := w.runNarrowed("return await mcp.iso.ls({})", "iso:add", "iso:ls", "demo:echo")
		if !r.OK || string(r.Result) != `["demo:echo","iso:add","iso:ls"]` {
			t.Fatalf("%s %+v", r.Result, r.Error)
		}
	})
}

// The narrowing travels in the capability function's payload as well.
func TestNarrowingTravelsInTheInvocation(t *testing.T) {
	w := newWorld(t, map[string]string{"iso:x": "return await mcp.demo.echo({message: 'leak'})"})
	h := capability.Handler(w.reg, func() *bridge.Service { return w.svc })
	r, err := h(context.Background(), json.RawMessage(`{"capability": "iso:x", "depth": 1, "chain": ["iso:x"], "narrowing": [["iso:*"]]}`))
	if err != nil {
		t.Fatal(err)
	}
	wantForbidden(t, r, "demo:echo")
}
