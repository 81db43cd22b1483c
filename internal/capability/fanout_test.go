package capability_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/fault"
)

// runNarrowed runs code as a root request narrowed to tools.
func (w *world) runNarrowed(code string, tools ...string) *execution.Response {
	return w.svc.Execute(context.Background(), execution.Request{Code: code, Tools: tools, TimeoutMS: 20000})
}

// wantForbidden checks that r failed FORBIDDEN because of tool, however
// deep in the capability tree the refusal happened.
func wantForbidden(t *testing.T, r *execution.Response, tool string) {
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
	h := w.handler()
	r, err := h(context.Background(), json.RawMessage(`{"parent": {"capability": "iso:x", "narrowing": [["iso:*"]]}}`))
	if err != nil {
		t.Fatal(err)
	}
	wantForbidden(t, r, "demo:echo")
}

// countingInvoker counts the capability runs it starts.
type countingInvoker struct {
	next    capability.Invoker
	started *atomic.Int64
}

func (c countingInvoker) Invoke(ctx context.Context, inv execution.Invocation) (*execution.Response, error) {
	c.started.Add(1)
	return c.next.Invoke(ctx, inv)
}

// countingService is a service over the demo tools and reg's
// capabilities, run in process, with every capability run counted.
func countingService(reg capability.Registry, opts executor.Options, started *atomic.Int64) *executor.Service {
	opts.Sources = []execution.ToolSource{demoserver.Source{}}
	svc, _ := inProcess(reg, opts, func(next capability.Invoker) capability.Invoker { return countingInvoker{next: next, started: started} })
	return svc
}

// fanOut saves fan:l1..fan:l3: each level calls the next width times at
// once, fan:l3 returns 1, so one call of fan:l1 is width+width² runs.
func fanOut(t *testing.T, width int) capability.Registry {
	t.Helper()
	w := newWorld(t, map[string]string{
		"fan:l1": fmt.Sprintf("return (await Promise.all(Array.from({length: %d}, () => mcp.fan.l2({})))).flat()", width),
		"fan:l2": fmt.Sprintf("return await Promise.all(Array.from({length: %d}, () => mcp.fan.l3({})))", width),
		"fan:l3": "return 1",
	})
	return w.reg
}

func TestFanOutIsBoundedBySandboxBudget(t *testing.T) {
	// Three levels of Promise.all over 4: 4 + 16 + 64 = 84 runs, more than
	// the default budget of a request tree.
	reg := fanOut(t, 4)
	var started atomic.Int64
	svc := countingService(reg, executor.Options{}, &started)
	r := svc.Execute(context.Background(), execution.Request{Code: "return (await Promise.all(Array.from({length: 4}, () => mcp.fan.l1({})))).flat().length", TimeoutMS: 20000})
	if r.OK || r.Error.Code != fault.LimitExceeded || r.Error.Limit != fault.LimitSandboxes {
		t.Fatalf("want LIMIT_EXCEEDED sandboxes, got %s %+v", r.Result, r.Error)
	}
	// Every run has ended by the time Execute returns (an execution waits
	// for its calls), so the count is final.
	if n := started.Load(); n > int64(execution.DefaultSandboxes) {
		t.Fatalf("%d sandboxes started; the budget is %d", n, execution.DefaultSandboxes)
	}
}

func TestSandboxBudgetSharesAndRefunds(t *testing.T) {
	w := newWorld(t, map[string]string{
		"b:leaf": "return 1",
		"b:mid":  "return await mcp.b.leaf({}) + 1",
		"b:wide": "return (await Promise.all(Array.from({length: args.n}, () => mcp.b.leaf({})))).length",
	})
	var started atomic.Int64
	svc := countingService(w.reg, executor.Options{Sandboxes: 10}, &started)
	run := func(code string) *execution.Response {
		t.Helper()
		started.Store(0)
		r := svc.Execute(context.Background(), execution.Request{Code: code, TimeoutMS: 20000})
		if int64(r.Sandboxes) != started.Load() {
			t.Fatalf("%s: reports %d sandboxes, started %d", code, r.Sandboxes, started.Load())
		}
		return r
	}
	wantLimit := func(r *execution.Response) {
		t.Helper()
		if r.OK || r.Error.Code != fault.LimitExceeded || r.Error.Limit != fault.LimitSandboxes {
			t.Fatalf("want LIMIT_EXCEEDED sandboxes, got %s %+v", r.Result, r.Error)
		}
	}
	t.Run("calls in turn get back what each did not use", func(t *testing.T) {
		// Each b:mid is handed half of what is left and spends 2.
		if r := run("let s = 0; for (let i = 0; i < 5; i++) s += await mcp.b.mid({}); return s"); !r.OK || string(r.Result) != "10" || r.Sandboxes != 10 {
			t.Fatalf("%s %+v (%d sandboxes)", r.Result, r.Error, r.Sandboxes)
		}
		wantLimit(run("let s = 0; for (let i = 0; i < 6; i++) s += await mcp.b.mid({}); return s"))
	})
	t.Run("leaves cost one sandbox each, however wide", func(t *testing.T) {
		if r := run("return (await Promise.all(Array.from({length: 10}, () => mcp.b.leaf({})))).length"); !r.OK || r.Sandboxes != 10 {
			t.Fatalf("%s %+v (%d sandboxes)", r.Result, r.Error, r.Sandboxes)
		}
		wantLimit(run("return (await Promise.all(Array.from({length: 11}, () => mcp.b.leaf({})))).length"))
	})
	t.Run("a lone call gets half of the budget", func(t *testing.T) {
		// 1 for b:wide itself, half of the other 9 (rounded up) for its calls.
		if r := run("return await mcp.b.wide({n: 5})"); !r.OK || string(r.Result) != "5" {
			t.Fatalf("%s %+v", r.Result, r.Error)
		}
		wantLimit(run("return await mcp.b.wide({n: 6})"))
	})
	t.Run("siblings cannot each claim what is left", func(t *testing.T) {
		// Without shares, three b:wide of 4 at once would start 15 runs.
		wantLimit(run("return await Promise.all([1, 2, 3].map(() => mcp.b.wide({n: 4})))"))
		if n := started.Load(); n > 10 {
			t.Fatalf("%d sandboxes started; the budget is 10", n)
		}
	})
}

// The share travels in the capability function's payload, and the
// response reports what the run spent.
func TestSandboxBudgetTravelsInTheInvocation(t *testing.T) {
	w := newWorld(t, map[string]string{
		"b:leaf": "return 1",
		"b:wide": "return (await Promise.all(Array.from({length: 4}, () => mcp.b.leaf({})))).length",
	})
	h := w.handler()
	for _, tc := range []struct {
		budget string
		ok     bool
	}{{`, "sandboxes": 4`, true}, {`, "sandboxes": 3`, false}, {``, false}} {
		r, err := h(context.Background(), json.RawMessage(`{"parent": {"capability": "b:wide"`+tc.budget+`}}`))
		if err != nil {
			t.Fatal(err)
		}
		if tc.ok != r.OK || (r.OK && r.Sandboxes != 4) || (!r.OK && r.Error.Limit != fault.LimitSandboxes) {
			t.Fatalf("budget %q: %s %+v (%d sandboxes)", tc.budget, r.Result, r.Error, r.Sandboxes)
		}
	}
	if r, _ := h(context.Background(), json.RawMessage(`{"parent": {"capability": "b:wide", "sandboxes": -1}}`)); r.OK || r.Error.Code != fault.InvalidRequest {
		t.Fatalf("negative budget: %+v", r.Error)
	}
}
