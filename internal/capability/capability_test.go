package capability_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/lambdaevents"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/testutil/dynamolocal"
	"github.com/pml-sandbox/pml/internal/testutil/enginetest"
)

var engine *guest.Engine

func TestMain(m *testing.M) {
	enginetest.Main(m, func(e *guest.Engine) { engine = e }, dynamolocal.StopAll)
}

// world is a service whose tools are the demo tools and the registry's
// capabilities, each capability run in process on the same service.
type world struct {
	reg    capability.Registry
	svc    *executor.Service
	runner *capability.Runner
}

// inProcess wires a service as internal/app does: opts' sources, then the
// registry's capabilities, run in process on the service itself through
// wrap(the runner) (wrap may be nil).
func inProcess(reg capability.Registry, opts executor.Options, wrap func(capability.Invoker) capability.Invoker) (*executor.Service, *capability.Runner) {
	runner := &capability.Runner{Registry: reg}
	var inv capability.Invoker = runner
	if wrap != nil {
		inv = wrap(inv)
	}
	opts.Sources = append(slices.Clone(opts.Sources), capability.NewSource(reg, inv, 0, opts.Logger))
	svc := executor.New(engine, opts)
	runner.Executor = svc
	return svc, runner
}

// handler is the capability function's handler over the world.
func (w *world) handler() func(context.Context, json.RawMessage) (*execution.Response, error) {
	return lambdaevents.CapabilityHandler(w.runner, w.svc, nil)
}

func newWorld(t *testing.T, caps map[string]string) *world {
	t.Helper()
	reg := capability.NewFileRegistry(filepath.Join(t.TempDir(), "caps.json"))
	w := &world{reg: reg}
	log := slog.New(slog.DiscardHandler)
	w.svc, w.runner = inProcess(reg, executor.Options{Policy: local, Sources: []execution.ToolSource{demoserver.Source{}}, Logger: log}, nil)
	for name, code := range caps {
		if _, err := reg.Save(context.Background(), capability.Capability{Name: name, Code: code}, nil); err != nil {
			t.Fatalf("save %s: %v", name, err)
		}
	}
	return w
}

func (w *world) run(code string) *execution.Response {
	return w.svc.Execute(context.Background(), execution.Request{Code: code, TimeoutMS: 20000})
}

func TestCapabilities(t *testing.T) {
	w := newWorld(t, map[string]string{
		"math:sum":    "return args.xs.reduce((a, b) => a + b, 0)",
		"math:double": "return (await mcp.demo.add({a: args.x, b: args.x}))",
		"math:quad":   "return await mcp.math.double({x: await mcp.math.double({x: args.x})})",
		"loop:a":      "return await mcp.loop.b({})",
		"loop:b":      "return await mcp.loop.a({})",
		"deep:one":    "return await mcp.deep.two({})",
		"deep:two":    "return await mcp.deep.three({})",
		"deep:three":  "return await mcp.deep.four({})",
		"deep:four":   "return 4",
		"bad:throws":  "throw new Error('capability says no')",
		"bad:tool":    "return await mcp.demo.fail({message: 'inner tool failed'})",
		"id:self":     "return Math.random()",
	})
	tests := []struct {
		name, code string
		want       string
		code_      fault.Code
		contains   string
	}{
		{"sum", "return await mcp.math.sum({xs: [1, 2, 3]})", "6", "", ""},
		{"calls a tool", "return await mcp.math.double({x: 21})", "42", "", ""},
		{"nested two deep", "return await mcp.math.quad({x: 3})", "12", "", ""},
		{"cycle", "return await mcp.loop.a({})", "", fault.CapabilityCycle, "loop:a → loop:b → loop:a"},
		{"depth exceeded", "return await mcp.deep.one({})", "", fault.LimitExceeded, "nest at most 3"},
		{"throws", "return await mcp.bad.throws({})", "", fault.ScriptError, "bad:throws: Error: capability says no"},
		{"inner tool error keeps its code", "return await mcp.bad.tool({})", "", fault.ToolError, "bad:tool: inner tool failed"},
		{"unresolved name rejected before running", "return await mcp.math.summ({xs: []})", "", fault.ToolNotFound, "mcp.math.sum"},
		{"caught inside the caller", "try { await mcp.bad.throws({}) } catch (e) { return e.code + ' ' + e.tool }", `"SCRIPT_ERROR bad:throws"`, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := w.run(tt.code)
			if tt.code_ != "" {
				if r.OK || r.Error.Code != tt.code_ || !strings.Contains(r.Error.Message, tt.contains) {
					t.Fatalf("want %s containing %q, got %+v", tt.code_, tt.contains, r.Error)
				}
				return
			}
			if !r.OK || string(r.Result) != tt.want {
				t.Fatalf("want %s, got %s %+v", tt.want, r.Result, r.Error)
			}
		})
	}
}

func TestCapabilityCallsAreTracedAndLinked(t *testing.T) {
	w := newWorld(t, map[string]string{"math:double": "return (await mcp.demo.add({a: args.x, b: args.x}))"})
	r := w.run("return await mcp.math.double({x: 2})")
	if !r.OK || len(r.Calls) != 2 {
		t.Fatalf("%+v", r)
	}
	c := r.Calls[0]
	if c.Kind != "capability" || c.Server != "math" || c.Tool != "double" || c.ChildExecutionID == "" || c.ChildExecutionID == r.ExecutionID {
		t.Fatalf("capability call not traced as such: %+v", c)
	}
	// The capability's own tool call follows, in the child execution,
	// linked to the call that started it.
	child := r.Calls[1]
	if child.ExecutionID != c.ChildExecutionID || child.ParentCallID != c.CallID || child.Server != "demo" || child.Tool != "add" || !child.OK {
		t.Fatalf("child call not linked: %+v", child)
	}
}

func TestSixteenParallelCapabilityCallsEachOwnSandbox(t *testing.T) {
	w := newWorld(t, map[string]string{"slow:rand": "await mcp.demo.sleep({ms: 500}); globalThis.seen = (globalThis.seen || 0) + 1; return [Math.random(), globalThis.seen]"})
	start := time.Now()
	r := w.run("return await Promise.all(Array.from({length: 16}, () => mcp.slow.rand({})))")
	if !r.OK {
		t.Fatal(r.Error)
	}
	var got [][2]float64
	_ = json.Unmarshal(r.Result, &got)
	seen := map[float64]bool{}
	for _, g := range got {
		// A shared sandbox would count past 1 and repeat no random number.
		if g[1] != 1 || seen[g[0]] {
			t.Fatalf("capability runs shared state: %v", got)
		}
		seen[g[0]] = true
	}
	children := map[string]bool{}
	for _, c := range r.Calls {
		if c.ExecutionID == r.ExecutionID {
			children[c.ChildExecutionID] = true
		}
	}
	if len(got) != 16 || len(children) != 16 {
		t.Fatalf("%d results from %d child executions", len(got), len(children))
	}
	// One at a time would be 8 s; the margin is for a loaded machine.
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("16 parallel 500 ms capability calls took %v: not concurrent", d)
	}
}

func TestArgumentsValidatedAgainstTheInputSchema(t *testing.T) {
	w := newWorld(t, nil)
	_, err := w.reg.Save(context.Background(), capability.Capability{Name: "math:sq", Code: "return args.x * args.x",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"x":{"type":"number"}},"required":["x"]}`)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := w.run("return await mcp.math.sq({x: 'nope'})"); r.OK || r.Error.Code != fault.InvalidArguments {
		t.Fatalf("%+v", r.Error)
	}
	if r := w.run("return await mcp.math.sq({x: 7})"); !r.OK || string(r.Result) != "49" {
		t.Fatalf("%+v", r)
	}
}

// registries runs a test against the file registry and DynamoDB Local.
func registries(t *testing.T, f func(t *testing.T, reg capability.Registry)) {
	t.Run("file", func(t *testing.T) { f(t, capability.NewFileRegistry(filepath.Join(t.TempDir(), "caps.json"))) })
	t.Run("dynamodb", func(t *testing.T) {
		db := dynamolocal.Start(t).Client()
		table := dynamolocal.TableName(t)
		if err := capability.CreateTable(context.Background(), db, table); err != nil {
			t.Fatal(err)
		}
		f(t, capability.NewDynamoRegistry(db, table))
	})
}

func TestRegistryVersions(t *testing.T) {
	registries(t, func(t *testing.T, reg capability.Registry) {
		ctx := context.Background()
		for i, code := range []string{"return 1", "return 2", "return 3"} {
			c, err := reg.Save(ctx, capability.Capability{Name: "v:x", Code: code, Description: fmt.Sprint("v", i+1)}, nil)
			if err != nil || c.Version != i+1 || c.ID != fmt.Sprintf("cap:v:x@%d", i+1) {
				t.Fatalf("save %d: %+v %v", i, c, err)
			}
		}
		latest, err := reg.Get(ctx, "v:x", 0)
		if err != nil || latest.Code != "return 3" || latest.Version != 3 {
			t.Fatalf("latest: %+v %v", latest, err)
		}
		pinned, err := reg.Get(ctx, "v:x", 2)
		if err != nil || pinned.Code != "return 2" {
			t.Fatalf("pinned: %+v %v", pinned, err)
		}
		if _, err := reg.Get(ctx, "v:x", 9); fault.CodeOf(err) != fault.NotFound {
			t.Fatalf("missing version: %v", err)
		}
		if _, err := reg.Get(ctx, "v:nope", 0); fault.CodeOf(err) != fault.NotFound {
			t.Fatalf("missing capability: %v", err)
		}
		if err := reg.AddCalls(ctx, map[string]int64{"v:x": 1, "v:gone": 5}); err != nil {
			t.Fatal(err)
		}
		list, err := reg.List(ctx)
		if err != nil || len(list) != 1 || list[0].Version != 3 || list[0].Calls != 1 {
			t.Fatalf("list: %+v %v", list, err)
		}
		for _, bad := range []capability.Capability{
			{Name: "nocolon", Code: "return 1"},
			{Name: "a:__proto__", Code: "return 1"},
			{Name: "then:b", Code: "return 1"},
			{Name: "a:toJSON", Code: "return 1"},
			{Name: "a:b", Code: "return ("},
			{Name: "a:b", Code: "return 1", InputSchema: json.RawMessage(`{"type": 5}`)},
			{Name: "a:b", Code: "  "},
		} {
			if _, err := reg.Save(ctx, bad, nil); err == nil {
				t.Errorf("saved a bad capability %+v", bad)
			}
		}
	})
}

func TestConcurrentSavesNeverShareAVersion(t *testing.T) {
	registries(t, func(t *testing.T, reg capability.Registry) {
		var wg sync.WaitGroup
		versions := make(chan int, 8)
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := reg.Save(context.Background(), capability.Capability{Name: "c:x", Code: fmt.Sprintf("return %d", i)}, nil)
				if err != nil {
					t.Error(err)
					return
				}
				versions <- c.Version
			}()
		}
		wg.Wait()
		close(versions)
		seen := map[int]bool{}
		for v := range versions {
			if seen[v] {
				t.Fatalf("version %d given twice", v)
			}
			seen[v] = true
		}
		if len(seen) != 8 || !seen[8] {
			t.Fatalf("versions %v", seen)
		}
	})
}

func TestLambdaHandlerRejectsBadPayloads(t *testing.T) {
	w := newWorld(t, map[string]string{"math:one": "return 1"})
	h := w.handler()
	for _, p := range []string{`{`, `{"parent": {"capability": "nocolon"}}`, `{"parent": {"capability": ""}}`, `{"parent": {"capability": "math:one"}, "extra": 1}`,
		`{"parent": {"capability": "math:one", "sandboxes": -1}}`, `{"PARENT": {"capability": "math:one"}}`, `{"parent": {"capability": "math:one"}, "parent": {}}`} {
		r, err := h(context.Background(), json.RawMessage(p))
		if err != nil || r.OK || r.Error.Code != fault.InvalidRequest {
			t.Errorf("%s: %+v %v", p, r, err)
		}
	}
	r, err := h(context.Background(), json.RawMessage(`{"parent": {"capability": "math:one", "execution_id": "ex_p", "call_id": 3}}`))
	if err != nil || !r.OK || string(r.Result) != "1" {
		t.Fatalf("%+v %v", r, err)
	}
}

func TestChildRunNeverOutlivesItsCaller(t *testing.T) {
	w := newWorld(t, map[string]string{"slow:wait": "await mcp.demo.sleep({ms: 30000}); return 1"})
	start := time.Now()
	r := w.svc.Execute(context.Background(), execution.Request{Code: "return await mcp.slow.wait({})", TimeoutMS: 300})
	// Well before the child's 30 s: its caller's deadline ended it.
	if r.OK || r.Error.Code != fault.Timeout || time.Since(start) > 10*time.Second {
		t.Fatalf("%+v after %v", r.Error, time.Since(start))
	}
	// The payload to the capability function carries what is left.
	h := w.handler()
	start = time.Now()
	resp, err := h(context.Background(), json.RawMessage(`{"parent": {"capability": "slow:wait"}, "timeout_ms": 200}`))
	if err != nil || resp.OK || resp.Error.Code != fault.Timeout || time.Since(start) > 10*time.Second {
		t.Fatalf("%+v %v after %v", resp, err, time.Since(start))
	}
}

// TestApprovalInsideACapabilityIsRefused: a capability run never parks (a
// suspended tree of runs is not supported): a call needing approval in it
// fails FORBIDDEN saying so, which the capability's caller sees, while the
// same call in the root script parks. The approval mode travels in the
// invocation, so the capability function refuses alike.
func TestApprovalInsideACapabilityIsRefused(t *testing.T) {
	reg := capability.NewFileRegistry(filepath.Join(t.TempDir(), "caps.json"))
	if _, err := reg.Save(context.Background(), capability.Capability{Name: "tidy:wipe", Code: `return await mcp.demo.kv_delete({key: "k"})`}, nil); err != nil {
		t.Fatal(err)
	}
	svc, _ := inProcess(reg, executor.Options{Policy: local, Sources: []execution.ToolSource{demoserver.Source{}}, Logger: slog.New(slog.DiscardHandler),
		Suspensions: suspend.NewFile(t.TempDir(), suspend.Options{})}, nil)
	r := svc.Execute(context.Background(), execution.Request{Code: `return await mcp.tidy.wipe({})`, Approval: execution.ApprovalSuspend})
	if r.OK || r.Status != "" || r.Error == nil || r.Error.Code != fault.Forbidden || !strings.Contains(r.Error.Message, "approval inside a capability is not supported") {
		t.Fatalf("status %q error %+v; want FORBIDDEN about approval inside a capability", r.Status, r.Error)
	}
	r = svc.Execute(context.Background(), execution.Request{Code: `return await mcp.demo.kv_delete({key: "k"})`, Approval: execution.ApprovalSuspend})
	if r.Status != execution.StatusSuspended {
		t.Fatalf("the root script's call: status %q error %+v; want it parked", r.Status, r.Error)
	}
}

// local is the policy of local use (pml run, pml serve on loopback): the
// caller is the person at the keyboard and decides.
var local = approval.Policy{CallerDecides: true}
