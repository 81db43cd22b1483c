package guest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/js/script"
	"github.com/pml-sandbox/pml/internal/testutil/cputime"
)

// sessionStep runs code as the next execution of a session whose sandbox
// is in state (nil: the first), the way the executor does: prepared,
// handing over its top-level bindings, in a sandbox restored from state.
// The state goes through JSON, as the stores keep it.
func sessionStep(t *testing.T, state *guest.State, code string, mods ...func(*guest.Request)) *guest.Result {
	t.Helper()
	p, err := script.Prepare(code, "")
	if err != nil {
		t.Fatalf("prepare %q: %v", code, err)
	}
	p.Persist()
	if state != nil {
		b, err := json.Marshal(state)
		if err != nil {
			t.Fatal(err)
		}
		state = new(guest.State)
		if err := json.Unmarshal(b, state); err != nil {
			t.Fatal(err)
		}
	}
	req := guest.Request{Code: p.Code, Tools: guest.DemoTools(), Host: guest.DemoHost{}, Limits: guest.Limits{Timeout: 5 * time.Second},
		Session: true, From: state, ArgsDeclared: p.Top.ArgsDeclared, Args: json.RawMessage(`{"in":1}`)}
	for _, m := range mods {
		m(&req)
	}
	res := engine.Run(context.Background(), req)
	p.MapError(res.Err)
	return res
}

// sessionRun runs steps in one session; each step's outcome is "= JSON"
// (its result) or "! TEXT" (it failed, TEXT in the error's message). A
// failed step leaves the session where the step before left it.
func sessionRun(t *testing.T, steps [][2]string) {
	t.Helper()
	var state *guest.State
	for i, st := range steps {
		res := sessionStep(t, state, st[0])
		want := st[1]
		switch {
		case strings.HasPrefix(want, "= "):
			if !res.OK {
				t.Fatalf("step %d %q failed: %+v", i+1, st[0], res.Err)
			}
			jsonEq(t, res.Value, want[2:])
			if res.State == nil {
				t.Fatalf("step %d succeeded without a state", i+1)
			}
			state = res.State
		case strings.HasPrefix(want, "! "):
			if res.OK || res.Err == nil {
				t.Fatalf("step %d %q = %s, want a failure with %q", i+1, st[0], res.Value, want[2:])
			}
			if !strings.Contains(res.Err.Message, want[2:]) {
				t.Fatalf("step %d %q failed with %q, want %q in it", i+1, st[0], res.Err.Message, want[2:])
			}
			if res.State != nil {
				t.Fatalf("step %d failed yet left a state", i+1)
			}
		default:
			t.Fatalf("bad want %q", want)
		}
	}
}

func TestSessionSemantics(t *testing.T) {
	tests := []struct {
		name  string
		steps [][2]string
	}{
		{"a function defined in one step is called two steps later", [][2]string{
			{`function twice(x) { return 2 * x }`, `= null`},
			{`const y = 5`, `= null`},
			{`return twice(y)`, `= 10`},
		}},
		{"a const may be declared again, and keeps refusing assignment", [][2]string{
			{`const limit = 1`, `= null`},
			{`limit = 2`, `! read-only`},
			{`const limit = 3; return limit`, `= 3`},
			{`return limit`, `= 3`},
			{`try { limit = 4 } catch (e) { return e instanceof TypeError }`, `= true`},
		}},
		{"a const is a const within its own execution", [][2]string{
			{`const c = 1; c = 2`, `! TypeError`},
			{`return typeof c`, `= "undefined"`},
		}},
		{"closures share the binding they captured with later steps", [][2]string{
			{`let count = 0; function inc() { return ++count }`, `= null`},
			{`inc(); inc(); return count`, `= 2`},
			{`count = 10; return inc()`, `= 11`},
		}},
		{"the temporal dead zone holds within an execution", [][2]string{
			{`const a = 1`, `= null`},
			{`const b = a + 1; return b`, `= 2`},
			{`try { x; } catch (e) { return e.name } let x = 1`, `= "ReferenceError"`},
		}},
		{"a failed step leaves the state of the step before", [][2]string{
			{`let items = [1, 2]; globalThis.g = "kept"`, `= null`},
			{`items.push(3); globalThis.g = "lost"; const extra = 1; throw new Error("boom")`, `! boom`},
			{`return [items, g, typeof extra]`, `= [[1, 2], "kept", "undefined"]`},
		}},
		{"a declaration that never ran is not kept", [][2]string{
			{`let early = "first"`, `= null`},
			{`if (true) return 1; let early = "second"; let later = 2`, `= 1`},
			{`return [early, typeof later]`, `= ["first", "undefined"]`},
		}},
		{"classes, destructuring, nested var, async functions", [][2]string{
			{`class Point { constructor(x) { this.x = x } }
const {p: [first, ...rest], q = 7} = {p: [1, 2, 3]}
if (true) { var nested = "v" }
async function later() { return await mcp.demo.add({a: first, b: q}) }`, `= null`},
			{`return [new Point(3).x, first, rest, q, nested, await later()]`, `= [3, 1, [2, 3], 7, "v", 8]`},
		}},
		{"globalThis persists, and the script may take over the prelude's names", [][2]string{
			{`globalThis.seen = ["a"]; const tools = ["mine"]; const console = {log() {}}`, `= null`},
			{`seen.push("b"); console.log("quiet"); return [seen, tools]`, `= [["a", "b"], ["mine"]]`},
		}},
		{"args is each execution's input; a script may declare its own", [][2]string{
			{`const args = {mine: true}; return [args, globalThis.args]`, `= [{"mine": true}, {"in": 1}]`},
			{`return args`, `= {"in": 1}`},
		}},
		{"strict mode survives the added statement", [][2]string{
			{"\"use strict\"\nconst s = 1; return this === undefined", `= true`},
			{`return s`, `= 1`},
			{"'use strict'; function f() { undeclared = 1 } try { f() } catch (e) { return e.name }", `= "ReferenceError"`},
		}},
		{"a script cannot take args or mcp from the next execution", [][2]string{
			{`Object.defineProperty(globalThis, "args", {value: "mine", configurable: false}); try { Object.defineProperty(globalThis, "mcp", {value: 1}) } catch (e) { return e.name }`, `= "TypeError"`},
			{`return [args, globalThis.args, typeof mcp.demo.echo]`, `= [{"in": 1}, "mine", "function"]`},
		}},
		{"a small change in a large heap is kept (the rest of the state is reused)", [][2]string{
			{`const big = []; for (let i = 0; i < 4096; i++) big.push("k" + i + "-".repeat(1000))`, `= null`},
			{`big[2000] = "changed"; return big.length`, `= 4096`},
			{`return [big[2000], big[1999].length, big[4095].slice(0, 5)]`, `= ["changed", 1005, "k4095"]`},
		}},
		{"function declarations hoist within their execution", [][2]string{
			{`return hoisted(); function hoisted() { return "up" }`, `= "up"`},
			{`return hoisted()`, `= "up"`},
		}},
		{"redeclaring a function replaces it for the next step", [][2]string{
			{`function v() { return 1 }`, `= null`},
			{`function v() { return 2 }`, `= null`},
			{`return v()`, `= 2`},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { sessionRun(t, tc.steps) })
	}
}

// TestSessionLeavesNoWork: calls and timers still running when a step
// returns are reported, and none of them reaches the next step.
func TestSessionLeavesNoWork(t *testing.T) {
	first := sessionStep(t, nil, `globalThis.fired = 0
setTimeout(() => { globalThis.fired++ }, 50)
mcp.demo.sleep({ms: 50}).then(() => { globalThis.fired++ })
return "left"`)
	mustOK(t, first)
	if first.Left.Calls != 1 || first.Left.Timers != 1 {
		t.Fatalf("Left = %+v, want one call and one timer", first.Left)
	}
	second := sessionStep(t, first.State, `await mcp.demo.sleep({ms: 120}); await new Promise((r) => setTimeout(r, 10)); return fired`)
	mustOK(t, second)
	jsonEq(t, second.Value, `0`)
	if !second.Left.None() {
		t.Fatalf("Left = %+v, want nothing", second.Left)
	}
}

// TestSessionStateIsBoundToTheBuild: a state from another guest build is
// refused, never run.
func TestSessionStateIsBoundToTheBuild(t *testing.T) {
	first := sessionStep(t, nil, `const x = 1`)
	mustOK(t, first)
	other := *first.State
	other.GuestHash = "0000000000000000"
	res := sessionStep(t, &other, `return x`)
	if res.OK || res.Err == nil || res.Err.Code != "RESUME_INCOMPATIBLE" {
		t.Fatalf("result = %s %+v, want RESUME_INCOMPATIBLE", res.Value, res.Err)
	}
}

// TestSessionGrowsWithTheData: a hundred steps each appending to an
// array stay correct, and the saved state grows with what the steps keep,
// not with their number: a hundred steps that keep nothing new leave it as
// it was (each step's compiled code, its promise, its configuration and
// its cyclic garbage are freed before the state is saved).
func TestSessionGrowsWithTheData(t *testing.T) {
	const steps = 100
	for _, tc := range []struct {
		name, step string
		keeps      bool
	}{
		{"appending a row each step", `rows.push({i: %d, text: "row " + %[1]d}); const step = %[1]d; return rows.length`, true},
		{"keeping nothing new", `const step = %d; return step + 1`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := sessionStep(t, nil, `const rows = []`).State
			sizes := make([]int, 0, steps)
			for i := range steps {
				res := sessionStep(t, state, fmt.Sprintf(tc.step, i))
				mustOK(t, res)
				jsonEq(t, res.Value, fmt.Sprint(i+1))
				state = res.State
				sizes = append(sizes, len(state.Memory))
			}
			t.Logf("saved state: %d bytes after step 1, %d after step 10, %d after step %d", sizes[0], sizes[9], sizes[steps-1], steps)
			res := sessionStep(t, state, `return [rows.length, rows.length && rows[0].i, rows.length && rows[99].text, step]`)
			mustOK(t, res)
			if tc.keeps {
				jsonEq(t, res.Value, `[100, 0, "row 99", 99]`)
				return
			}
			jsonEq(t, res.Value, `[0, 0, 0, 99]`)
			// What a step allocates and drops lands in memory the next
			// reuses; the first steps settle the heap's free lists.
			if grown := sizes[steps-1] - sizes[9]; grown > 2<<10 {
				t.Fatalf("steps that keep nothing grew the saved state by %d bytes (from %d to %d)", grown, sizes[9], sizes[steps-1])
			}
		})
	}
}

// TestSessionErrorPositions: the statement a session's script gets does
// not move the positions its errors report: each stack is the one the same
// code gives outside a session.
func TestSessionErrorPositions(t *testing.T) {
	for _, code := range []string{
		`const e = 1; null.foo`,
		"'use strict'; let s = 2; function f() { undefined.x } f()",
		"const n: number = 1;\nconst m = n as number; null.bar",
		`const a = 1; return (`,
	} {
		p, err := script.Prepare(code, "")
		if err != nil {
			t.Fatal(err)
		}
		plain := run(t, p.Code)
		p.MapError(plain.Err)
		inSession := sessionStep(t, nil, code)
		if plain.OK || inSession.OK {
			t.Fatalf("%q did not fail", code)
		}
		if plain.Err.Stack == "" || plain.Err.Stack != inSession.Err.Stack || plain.Err.Message != inSession.Err.Message {
			t.Errorf("%q:\nin a session %q %q\noutside      %q %q", code, inSession.Err.Message, inSession.Err.Stack, plain.Err.Message, plain.Err.Stack)
		}
	}
}

// heapSession is a session's first execution that leaves ~4 MiB of live
// heap (the suspension benchmarks' data), kept in x.
const heapSession = `const x = []
for (let i = 0; i < 4096; i++) x.push("k" + i + "-".repeat(1000))`

// BenchmarkSessionContinue4MiB measures continuing a session whose heap
// holds ~4 MiB: load (a pooled instance, the saved state decompressed and
// applied) and run `return x.length`, then save (find the written pages,
// diff them against the image, compress). It reports the p50 of each; the
// store's read and write are BenchmarkFileSessions' (internal/suspend).
func BenchmarkSessionContinue4MiB(b *testing.B) {
	p, err := script.Prepare(heapSession, "")
	if err != nil {
		b.Fatal(err)
	}
	p.Persist()
	first := engine.Run(context.Background(), guest.Request{Code: p.Code, Session: true, Limits: guest.Limits{Timeout: 30 * time.Second}})
	if !first.OK {
		b.Fatal(first.Err)
	}
	next, err := script.Prepare(`return x.length`, "")
	if err != nil {
		b.Fatal(err)
	}
	var loads, saves []time.Duration
	cpu := cputime.Process()
	for b.Loop() {
		res := engine.Run(context.Background(), guest.Request{Code: next.Code, Session: true, From: first.State})
		if !res.OK || string(res.Value) != "4096" {
			b.Fatalf("%s %+v", res.Value, res.Err)
		}
		loads = append(loads, res.Duration-res.SaveTime)
		saves = append(saves, res.SaveTime)
	}
	b.ReportMetric(float64((cputime.Process()-cpu).Microseconds())/1000/float64(len(loads)), "cpu-ms/op")
	b.ReportMetric(p50ms(loads), "load+run-p50-ms")
	b.ReportMetric(p50ms(saves), "save-p50-ms")
	b.ReportMetric(float64(len(first.State.Memory)), "bytes/state")
}

func p50ms(ds []time.Duration) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[len(s)/2].Microseconds()) / 1000
}
