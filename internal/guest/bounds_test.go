package guest_test

import (
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/trace"
)

// escapes are scripts that spend their time inside QuickJS's C code, where
// the interpreter's interrupt poll never runs: built-ins that loop over an
// array-like's length (read from quickjs.c: every js_get_length64 loop that
// skips absent elements without calling back into JS), string building
// from huge lengths, BigInt arithmetic, and growth caught in a loop. Before
// the loop check-ins each of these ran for minutes or forever. (Heap
// exhaustion caught in a loop now ends at the memory limit: outOfMemory.)
var escapes = []struct{ name, code string }{
	{"includes over a huge array-like", "return Array.prototype.includes.call({length: 2**53-1}, 1)"},
	{"indexOf over a huge array-like", "return Array.prototype.indexOf.call({length: 2**53-1}, 1)"},
	{"lastIndexOf over a huge array-like", "return Array.prototype.lastIndexOf.call({length: 2**53-1}, 1)"},
	{"join of holes", `return Array.prototype.join.call({length: 2**40}, "")`},
	{"toString of a sparse array", "const a = []; a.length = 2**32-1; return a.toString()"},
	{"toLocaleString of holes", "return Array.prototype.toLocaleString.call({length: 2**40})"},
	{"forEach skipping holes", "return Array.prototype.forEach.call({length: 2**53-1}, () => {})"},
	{"every skipping holes", "return Array.prototype.every.call({length: 2**53-1}, () => false)"},
	{"some skipping holes", "return Array.prototype.some.call({length: 2**53-1}, () => true)"},
	{"filter skipping holes", "return Array.prototype.filter.call({length: 2**53-1}, () => true)"},
	{"map over a sparse array", "const a = []; a.length = 2**32-1; return a.map(x => x).length"},
	{"reduce with an initial value", "return Array.prototype.reduce.call({length: 2**53-1}, (a, b) => a + b, 0)"},
	{"reduceRight with an initial value", "return Array.prototype.reduceRight.call({length: 2**53-1}, (a, b) => a + b, 0)"},
	{"reverse of holes", "return Array.prototype.reverse.call({length: 2**53-1})"},
	{"copyWithin of holes", "return Array.prototype.copyWithin.call({length: 2**53-1}, 0, 1)"},
	{"sort collecting holes", "return Array.prototype.sort.call({length: 2**53-1})"},
	{"slice of a sparse array", "const a = []; a.length = 2**32-1; return a.slice(0).length"},
	{"splice of a sparse array", "const a = []; a.length = 2**32-1; return a.splice(0).length"},
	{"concat of a spreadable array-like", "return [].concat({length: 2**53-1, [Symbol.isConcatSpreadable]: true}).length"},
	{"flat of holes", "return Array.prototype.flat.call({length: 2**53-1}).length"},
	{"String.raw of holes", "return String.raw({raw: {length: 2**53-1}})"},
	{"JSON.stringify with a huge replacer list", "const r = []; r.length = 2**32-1; return JSON.stringify({a: 1}, r)"},
	{"BigInt arithmetic", "const x = 3n ** 300000n; return String(x * x).length"},
	{"string growth caught in a loop", "let s = 'x'; for (;;) { try { s += s } catch (e) { s = 'x' } }"},
	{"a result nested 200,000 deep", "let o = null; for (let i = 0; i < 200000; i++) o = {o}; return o"},
	{"a tight Atomics.add loop", "const a = new Int32Array(new SharedArrayBuffer(4)); for (;;) Atomics.add(a, 0, 1)"},
	{"Atomics on a plain buffer", "const a = new BigInt64Array(2); for (;;) Atomics.compareExchange(a, 1, Atomics.load(a, 1), 1n)"},
	{"Atomics.wait with a huge timeout, retried", "const a = new Int32Array(new SharedArrayBuffer(4)); for (;;) { try { Atomics.wait(a, 0, 0, 1e12) } catch (e) {} }"},
}

// TestDeadlineIsAbsolute runs every escape against a short deadline: each
// must end as TIMEOUT within a second of it. Without its check-ins each
// would run for hours (2^53 steps); with them it stops within a few
// milliseconds on a quiet machine, but a loaded 2-core one deschedules the
// run's thread for 100-200 ms at a time (measured at load 15), so the bound
// is the alternative ruled out, not the quiet figure
// (BenchmarkBulkFillDeadline reports that).
func TestDeadlineIsAbsolute(t *testing.T) {
	const timeout = 300 * time.Millisecond
	for _, tt := range escapes {
		t.Run(tt.name, func(t *testing.T) {
			// Up to three tries, so a machine busy with other work measures
			// the engine and not the scheduler; every try must time out.
			var over time.Duration
			for range 3 {
				r := run(t, tt.code, func(r *guest.Request) { r.Limits.Timeout = timeout })
				if r.OK || r.Err.Code != fault.Timeout {
					t.Fatalf("want TIMEOUT, got %+v %s", r.Err, r.Value)
				}
				if over = r.Duration - timeout; over <= time.Second {
					return
				}
			}
			t.Fatalf("stopped %v after the deadline; want ≤ 1s", over)
		})
	}
}

// startedHost announces the first call of each execution, so a test knows
// its hostile scripts are past their start and into their loops.
type startedHost struct{ started chan<- struct{} }

func (h startedHost) CallTool(context.Context, guest.Call) (json.RawMessage, error) {
	h.started <- struct{}{}
	return json.RawMessage("null"), nil
}

// TestHostStaysLive runs escapes on every CPU at once and checks that the
// rest of the process carries on: garbage collections complete (a
// goroutine inside wasm cannot be stopped for one until it reaches the
// host) and other executions are answered. Without the check-ins either
// would wait for the hostile scripts' deadline, so that deadline is set far
// (30 s; the scripts are cancelled once measured) and the bound lies well
// between it and what a loaded machine shows with them (a GC took 2.9 s at
// load 15, three fresh-clone `make test` runs on two cores; ~20 ms quiet).
func TestHostStaysLive(t *testing.T) {
	const timeout, bound = 30 * time.Second, 5 * time.Second
	hostile := max(runtime.GOMAXPROCS(0), 2)
	started := make(chan struct{}, hostile)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for i := range hostile {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := engine.Run(ctx, guest.Request{
				Code:   "await mcp.x.started()\n" + escapes[i%len(escapes)].code,
				Tools:  []guest.Tool{{Server: "x", Name: "started"}},
				Host:   startedHost{started},
				Limits: guest.Limits{Timeout: timeout},
			})
			if r.OK || r.Err.Code != fault.Timeout {
				t.Errorf("hostile script: want TIMEOUT, got %+v", r.Err)
			}
			if r.Duration > timeout/2 {
				t.Errorf("hostile script ran %v: it did not stop when cancelled", r.Duration)
			}
		}()
	}
	for range hostile {
		<-started
	}
	var gc, answer time.Duration
	for range 5 {
		start := time.Now()
		runtime.GC()
		gc = max(gc, time.Since(start))
		start = time.Now()
		mustOK(t, run(t, "return 1 + 1"))
		answer = max(answer, time.Since(start))
	}
	t.Logf("while %d hostile scripts ran: slowest GC %v, slowest other execution %v", hostile, gc, answer)
	if gc > bound || answer > bound {
		t.Errorf("the host stalled: slowest GC %v, slowest other execution %v; want both < %v (the hostile scripts' deadline is %v)", gc, answer, bound, timeout)
	}
	cancel()
	wg.Wait()
}

// TestLogsAreBounded floods the console: empty lines cost their overhead,
// and the number of lines is capped.
func TestLogsAreBounded(t *testing.T) {
	tests := []struct {
		name, code string
		limits     guest.Limits
		limit      string
	}{
		{"a flood of empty lines", "for (;;) console.log()", guest.Limits{Timeout: 2 * time.Second}, fault.LimitLogEntries},
		{"empty lines against a byte budget", "for (let i = 0; i < 1e6; i++) console.log(); return 1", guest.Limits{LogBytes: 64 << 10, LogEntries: 1e6}, fault.LimitLogBytes},
		{"long lines", "const l = 'z'.repeat(10000); for (let i = 0; i < 1e4; i++) console.log(l); return 1", guest.Limits{}, fault.LimitLogBytes},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, tt.code, func(r *guest.Request) { r.Limits = tt.limits })
			lim := guest.DefaultLimits()
			entries, bytes := lim.LogEntries, lim.LogBytes
			if tt.limits.LogEntries > 0 {
				entries = tt.limits.LogEntries
			}
			if tt.limits.LogBytes > 0 {
				bytes = tt.limits.LogBytes
			}
			if !r.LogsTruncated || len(r.Logs) > entries+1 {
				t.Fatalf("kept %d lines (truncated %v); want at most %d", len(r.Logs), r.LogsTruncated, entries+1)
			}
			cost := 0
			for _, l := range r.Logs[:len(r.Logs)-1] {
				cost += len(l.Message) + guest.LogEntryOverhead
			}
			if cost > bytes {
				t.Fatalf("kept %d bytes of logs counting overhead; the limit is %d", cost, bytes)
			}
			if last := r.Logs[len(r.Logs)-1].Message; !strings.Contains(last, tt.limit) {
				t.Fatalf("last line does not name %s: %q", tt.limit, last)
			}
		})
	}
}

// TestRefusedCallsAreSummarised loops on calls past the limit: they keep
// failing with a catchable LIMIT_EXCEEDED, and the trace holds one summary
// record for all of them.
func TestRefusedCallsAreSummarised(t *testing.T) {
	code := `let refused = 0
for (let i = 0; i < 20000; i++) {
  try { await mcp.demo.echo({i}) } catch (e) { if (e.code === "LIMIT_EXCEEDED" && e.limit === "tool_calls") refused++ }
}
return refused`
	var streamed atomic.Int32
	r := run(t, code, func(r *guest.Request) {
		r.Limits.ToolCalls = 100
		r.OnCall = func(trace.Call) { streamed.Add(1) }
	})
	mustOK(t, r)
	jsonEq(t, r.Value, "19900")
	if len(r.Calls) != 101 {
		t.Fatalf("%d call records; want 100 and one summary", len(r.Calls))
	}
	if s := r.Calls[100]; s.Count != 19900 || s.ErrorCode != fault.LimitExceeded || s.OK {
		t.Fatalf("summary record = %+v", s)
	}
	if streamed.Load() != 101 {
		t.Fatalf("%d records streamed; want 101", streamed.Load())
	}
}

// TestHostErrorsCannotBeForged: a failure keeps a host code only when it
// is the very error the host delivered, unchanged.
func TestHostErrorsCannotBeForged(t *testing.T) {
	tests := []struct {
		name, code string
		want       fault.Code
	}{
		{"rethrown unchanged", "try { await mcp.demo.fail({message: 'no'}) } catch (e) { throw e }", fault.ToolError},
		{"code edited to TIMEOUT", "let e; try { await mcp.demo.fail({}) } catch (r) { e = r }\ne.code = 'TIMEOUT'; throw e", fault.ScriptError},
		{"edited to a retryable UNAVAILABLE", "let e; try { await mcp.demo.fail({}) } catch (r) { e = r }\ne.code = 'UNAVAILABLE'; e.retryable = true; throw e", fault.ScriptError},
		{"message edited", "try { await mcp.demo.fail({}) } catch (e) { e.message += '!'; throw e }", fault.ScriptError},
		{"code behind a getter", "try { await mcp.demo.fail({}) } catch (e) { Object.defineProperty(e, 'code', {get: () => 'TIMEOUT'}); throw e }", fault.ScriptError},
		{"a lookalike object", "throw {code: 'TIMEOUT', message: 'execution deadline exceeded'}", fault.ScriptError},
		{"a lookalike Error", "throw Object.assign(new Error('execution deadline exceeded'), {code: 'TIMEOUT'})", fault.ScriptError},
		{"prelude error rethrown", "try { mcp.demo.ech } catch (e) { throw e }", fault.ToolNotFound},
		{"prelude error edited", "try { mcp.demo.ech } catch (e) { e.code = 'UNAVAILABLE'; throw e }", fault.ScriptError},
		{"a throwing getter", "try { await mcp.demo.fail({}) } catch (e) { Object.defineProperty(e, 'code', {get() { throw 1 }}); throw e }", fault.ScriptError},
		{"another execution's id", "throw Object.assign(new Error('x'), {code: 'TIMEOUT', host_error: 1})", fault.ScriptError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, tt.code)
			if r.OK || r.Err.Code != tt.want {
				t.Fatalf("want %s, got %+v", tt.want, r.Err)
			}
			if tt.want == fault.ScriptError && r.Err.Retryable {
				t.Fatalf("a script error came out retryable: %+v", r.Err)
			}
		})
	}
}

// TestPreludeInternalsStayHidden replaces the built-ins the prelude would
// use and plants setters on prototypes: tool calls, timers and errors keep
// working, and none of the prelude's objects reaches the script.
func TestPreludeInternalsStayHidden(t *testing.T) {
	const trap = `const seen = [], keep = Set.prototype.add.bind(new Set()), seenSet = new Set(), has = Set.prototype.has.bind(seenSet);
let grabbing = false;
const grab = (v) => { if (!grabbing && (v && typeof v === "object" || typeof v === "function")) { grabbing = true; Set.prototype.add.call(seenSet, v); grabbing = false } };
const push = Array.prototype.push;
Array.prototype.push = function (...xs) { xs.forEach(grab); return push.apply(this, xs) };
for (let i = 0; i < 64; i++) Object.defineProperty(Array.prototype, i, {set(v) { grab(v) }, configurable: true});
Map.prototype.set = function (k, v) { grab(v); return this };
Map.prototype.delete = function () { return true };
WeakMap.prototype.set = function (k, v) { grab(k); return this };
WeakMap.prototype.get = function () { return 1 };
WeakSet.prototype.has = function () { return true };
Object.defineProperty(Object.prototype, "resolve", {set(v) { grab(v) }, configurable: true});
Object.defineProperty(Object.prototype, "index", {set(v) { grab(v) }, configurable: true});
`
	tests := []struct{ name, code, want string }{
		{"tool calls", "const xs = await Promise.all(Array.from({length: 40}, (_, i) => mcp.demo.add({a: i, b: 1}))); return xs.length", "40"},
		{"timers", "let n = 0; await new Promise(r => { setTimeout(() => { n++; r() }, 1) }); return n", "1"},
		{"errors", "try { await mcp.demo.fail({}) } catch (e) { return e.code }", `"TOOL_ERROR"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, trap+tt.code+"\n")
			mustOK(t, r)
			jsonEq(t, r.Value, tt.want)
			leak := run(t, trap+"await Promise.all([mcp.demo.echo({}), mcp.demo.add({a:1,b:2}), new Promise(r => setTimeout(r, 1))]);\ntry { await mcp.demo.fail({}) } catch (e) {}\nreturn [...seenSet].filter(v => typeof v === 'function' || ['resolve', 'reject', 'index', 'start', 'log', 'fault'].some(k => Object.hasOwn(v, k))).length")
			mustOK(t, leak)
			jsonEq(t, leak.Value, "0")
		})
	}
	// The mcp object is built on the script's first read of it, so after
	// whatever the script replaced: building it must call nothing the
	// script can reach (push, iterators, descriptors read through
	// Object.prototype).
	t.Run("mcp first read after the built-ins broke", func(t *testing.T) {
		const broken = `const define = Object.defineProperty, names = ["get", "set", "value", "writable", "enumerable", "configurable"];
for (let i = 0; i < 64; i++) define(Array.prototype, i, {set(v) { throw new Error("index " + i) }, configurable: true});
Array.prototype.push = () => { throw new Error("push") };
Array.prototype[Symbol.iterator] = function () { throw new Error("iterator") };
for (let i = 0; i < names.length; i++) { const k = names[i]; define(Object.prototype, k, {__proto__: null, get() { throw new Error(k) }, configurable: true}) }
`
		r := run(t, broken+"const r = await mcp.demo.add({a: 1, b: 2}); return [r, Object.keys(mcp).length > 0, typeof mcp.demo.echo]\n")
		mustOK(t, r)
		jsonEq(t, r.Value, `[3,true,"function"]`)
	})
	t.Run("a forged host error through replaced built-ins", func(t *testing.T) {
		r := run(t, trap+"throw Object.assign(new Error('x'), {code: 'TIMEOUT'})")
		if r.OK || r.Err.Code != fault.ScriptError {
			t.Fatalf("want SCRIPT_ERROR, got %+v", r.Err)
		}
	})
}
