package guest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/testutil/enginetest"
)

var engine *guest.Engine

func TestMain(m *testing.M) {
	enginetest.Main(m, func(e *guest.Engine) { engine = e })
}

func run(t testing.TB, code string, mods ...func(*guest.Request)) *guest.Result {
	t.Helper()
	// A generous deadline: a run that must finish is not judged by how
	// busy the machine is (tests of the deadline set their own).
	req := guest.Request{Code: code, Tools: guest.DemoTools(), Host: guest.DemoHost{}, Limits: guest.Limits{Timeout: 30 * time.Second}}
	for _, m := range mods {
		m(&req)
	}
	return engine.Run(context.Background(), req)
}

func mustOK(t testing.TB, r *guest.Result) {
	t.Helper()
	if !r.OK {
		t.Fatalf("execution failed: %+v", r.Err)
	}
}

func jsonEq(t testing.TB, got json.RawMessage, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("result %q is not JSON: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad want %q: %v", want, err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	if string(gb) != string(wb) {
		t.Fatalf("result = %s, want %s", gb, wb)
	}
}

func TestSemantics(t *testing.T) {
	tests := []struct {
		name, code, args, want string
	}{
		{"arithmetic", "return 1 + 1", "", "2"},
		{"undefined is null", "return", "", "null"},
		{"args round trip", "return args", `{"a":[1,"x",null,true,{"b":1.5}]}`, `{"a":[1,"x",null,true,{"b":1.5}]}`},
		{"args absent", "return args", "", "null"},
		{"async await", "const f = async (x) => x * 2; return await f(await f(3))", "", "12"},
		{"promise all", "return await Promise.all([1, Promise.resolve(2), (async () => 3)()])", "", "[1,2,3]"},
		{"tool calls", "return await Promise.all([mcp.demo.echo({x:1}), mcp.demo.add({a:2,b:3})])", "", `[{"x":1},5]`},
		{"caught tool error", "try { await mcp.demo.fail({message:'no'}) } catch (e) { return [e.code, e.message, e.tool, e instanceof Error] }", "", `["TOOL_ERROR","no","demo:fail",true]`},
		{"caught not found", "try { mcp.demo.ech } catch (e) { return [e.code, e.details.suggestions[0]] }", "", `["TOOL_NOT_FOUND","demo:echo"]`},
		{"timers", "let s = ''; await new Promise(r => setTimeout(() => { s += 'b'; r() }, 10)); s = 'a' + s; return s", "", `"ab"`},
		{"cleared timer never fires", "let fired = false; const h = setTimeout(() => { fired = true }, 1); clearTimeout(h); await new Promise(r => setTimeout(r, 20)); return fired", "", "false"},
		{"date and json", "const d = new Date(0); return JSON.parse(JSON.stringify({d}))", "", `{"d":"1970-01-01T00:00:00.000Z"}`},
		{"regexp and unicode", "return 'héllo wörld'.replace(/ö/u, 'o').toUpperCase()", "", `"HÉLLO WORLD"`},
		{"await thenable mcp", "const s = await mcp.demo; return typeof s.echo", "", `"function"`},
		{"many calls queued past the in-flight cap", "const xs = await Promise.all(Array.from({length: 50}, (_, i) => mcp.demo.add({a: i, b: 1}))); return xs.reduce((a, b) => a + b, 0)", "", "1275"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, tt.code, func(r *guest.Request) { r.Args = json.RawMessage(tt.args) })
			mustOK(t, r)
			jsonEq(t, r.Value, tt.want)
		})
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name     string
		code     string
		wantCode fault.Code
		limit    string
		contains string // in the message
		stack    string // in the stack
	}{
		{"thrown error has stack with user lines", "const a = 1;\nfunction boom() { throw new Error('boom') }\nboom()", fault.ScriptError, "", "Error: boom", "main.js:2"},
		{"reference error", "return nope + 1", fault.ScriptError, "", "ReferenceError", "main.js:1"},
		{"syntax error", "return (", fault.ScriptError, "", "SyntaxError", ""},
		{"thrown non-error", "throw {a: 1}", fault.ScriptError, "", `Uncaught {"a": 1}`, ""},
		{"uncaught tool error keeps its code", "await mcp.demo.fail({message: 'bad day'})", fault.ToolError, "", "bad day", ""},
		{"unknown server", "return await mcp.nope.x()", fault.ToolNotFound, "", "mcp.nope", ""},
		{"unknown tool suggests", "return await mcp.demo.ecoh({})", fault.ToolNotFound, "", "did you mean mcp.demo.echo", ""},
		{"cyclic result", "const a = {}; a.self = a; return a", fault.InvalidResult, "", "circular", ""},
		{"bigint result", "return {n: 10n}", fault.InvalidResult, "", "BigInt", ""},
		{"function result", "return () => 1", fault.InvalidResult, "", "function", ""},
		{"function inside result", "return {f() {}}", fault.InvalidResult, "", `"f" is a function`, ""},
		{"args not JSON", "const a = {}; a.a = a; return await mcp.demo.echo(a)", fault.InvalidArguments, "", "JSON", ""},
		{"deadlock", "return await new Promise(() => {})", fault.Deadlock, "", "nothing can settle", ""},
		{"deep recursion", "function f(n) { return f(n + 1) + 1 }\nreturn f(0)", fault.LimitExceeded, fault.LimitStack, "stack", ""},
		{"out of memory", "const xs = []; for (;;) xs.push('x'.repeat(1 << 20) + xs.length)", fault.LimitExceeded, fault.LimitMemory, "memory", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, tt.code)
			if r.OK || r.Err == nil {
				t.Fatalf("want %s, got ok with %s", tt.wantCode, r.Value)
			}
			if r.Err.Code != tt.wantCode || r.Err.Limit != tt.limit {
				t.Fatalf("error = %s/%s (%s), want %s/%s", r.Err.Code, r.Err.Limit, r.Err.Message, tt.wantCode, tt.limit)
			}
			if !strings.Contains(r.Err.Message, tt.contains) {
				t.Fatalf("message %q does not contain %q", r.Err.Message, tt.contains)
			}
			if !strings.Contains(r.Err.Stack, tt.stack) {
				t.Fatalf("stack %q does not contain %q", r.Err.Stack, tt.stack)
			}
			if strings.Contains(r.Err.Stack, "prelude.js") {
				t.Fatalf("stack leaks prelude frames: %q", r.Err.Stack)
			}
		})
	}
}

// TestCatchableLimits: the stack limit is a JS exception a script may
// catch. (Running out of memory is not: TestOutOfMemoryEndsTheRun.)
func TestCatchableLimits(t *testing.T) {
	tests := []struct{ name, code, want string }{
		{"deep recursion", "function f() { return f() + 1 }\ntry { f() } catch (e) { return e.message }", `"stack overflow"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, tt.code)
			mustOK(t, r)
			jsonEq(t, r.Value, tt.want)
			// The host keeps serving after the script hit its limit.
			mustOK(t, run(t, "return 1"))
		})
	}
}

func TestIsolation(t *testing.T) {
	t.Run("nothing survives between executions", func(t *testing.T) {
		mustOK(t, run(t, "globalThis.leak = 42; Object.prototype.polluted = 1; Array.prototype.push = null; return 1"))
		r := run(t, "return [typeof leak, ({}).polluted === undefined, typeof [].push]")
		mustOK(t, r)
		jsonEq(t, r.Value, `["undefined", true, "function"]`)
	})
	t.Run("Math.random differs per instance", func(t *testing.T) {
		a, b := run(t, "return Math.random()"), run(t, "return Math.random()")
		mustOK(t, a)
		mustOK(t, b)
		if string(a.Value) == string(b.Value) {
			t.Fatalf("two executions drew the same random number %s", a.Value)
		}
	})
	// Every door a script might try: none exists.
	doors := []struct{ name, code string }{
		{"std module", "return typeof std"},
		{"os module", "return typeof os"},
		{"require", "return typeof require"},
		{"process", "return typeof process"},
		{"fetch", "return typeof fetch"},
		{"XMLHttpRequest", "return typeof XMLHttpRequest"},
		{"WebSocket", "return typeof WebSocket"},
		{"Deno", "return typeof Deno"},
		{"scriptArgs", "return typeof scriptArgs"},
		{"print", "return typeof print"},
		{"native bindings", "return typeof native"},
		{"WebAssembly", "return typeof WebAssembly"},
	}
	for _, d := range doors {
		t.Run(d.name, func(t *testing.T) {
			r := run(t, d.code)
			mustOK(t, r)
			jsonEq(t, r.Value, `"undefined"`)
		})
	}
	imports := []struct{ name, code string }{
		{"import std", "await import('std')"},
		{"import os", "await import('os')"},
		{"import file", "await import('/etc/passwd')"},
	}
	for _, d := range imports {
		t.Run(d.name, func(t *testing.T) {
			r := run(t, d.code)
			if r.OK {
				t.Fatalf("%s succeeded: %s", d.code, r.Value)
			}
		})
	}
	t.Run("mcp cannot be replaced or extended", func(t *testing.T) {
		r := run(t, "try { mcp.demo.evil = () => 1 } catch (e) {}\ntry { mcp = {} } catch (e) {}\nreturn [typeof mcp.demo.echo, Object.keys(mcp.demo).sort()]")
		mustOK(t, r)
		jsonEq(t, r.Value, `["function", ["add","echo","fail","sleep"]]`)
	})
	t.Run("tool set is exactly the one given", func(t *testing.T) {
		r := run(t, "return Object.keys(mcp)", func(r *guest.Request) { r.Tools = r.Tools[:1] })
		mustOK(t, r)
		jsonEq(t, r.Value, `["demo"]`)
		r = run(t, "return await mcp.demo.add({a:1,b:2})", func(r *guest.Request) { r.Tools = r.Tools[:1] })
		if r.OK || r.Err.Code != fault.ToolNotFound {
			t.Fatalf("narrowed tool set still reached add: %+v", r)
		}
	})
}

func TestDeadline(t *testing.T) {
	const timeout = 200 * time.Millisecond
	tests := []struct{ name, code string }{
		{"busy loop", "while (true) {}"},
		{"catch cannot swallow the deadline", "for (;;) { try { while (true) {} } catch (e) {} }"},
		{"waiting on a slow tool", "await mcp.demo.sleep({ms: 10000})"},
		{"pathological regexp", "return /(a+)+$/.test('a'.repeat(40) + 'b')"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Best of five, so a busy CI machine measures the engine and not
			// the scheduler.
			best := time.Hour
			for range 5 {
				r := run(t, tt.code, func(r *guest.Request) { r.Limits.Timeout = timeout })
				if r.OK || r.Err.Code != fault.Timeout {
					t.Fatalf("want TIMEOUT, got %+v %s", r.Err, r.Value)
				}
				best = min(best, r.Duration)
			}
			if over := best - timeout; over > 10*time.Millisecond {
				t.Fatalf("stopped %v after the deadline; want ≤ 10ms", over)
			}
		})
	}
	t.Run("caller cancellation stops a waiting script", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		r := engine.Run(ctx, guest.Request{Code: "await mcp.demo.sleep({ms: 5000})", Tools: guest.DemoTools(), Host: guest.DemoHost{}})
		if r.OK || r.Err.Code != fault.Timeout || r.Duration > time.Second {
			t.Fatalf("want prompt TIMEOUT, got %+v after %v", r.Err, r.Duration)
		}
		if len(r.Calls) != 1 || r.Calls[0].OK {
			t.Fatalf("the cancelled call should be traced as failed: %+v", r.Calls)
		}
	})
}

func TestLimits(t *testing.T) {
	t.Run("code size", func(t *testing.T) {
		r := run(t, "return 1 //"+strings.Repeat("x", 2000), func(r *guest.Request) { r.Limits.CodeBytes = 1000 })
		if r.OK || r.Err.Code != fault.LimitExceeded || r.Err.Limit != fault.LimitCodeSize {
			t.Fatalf("got %+v", r.Err)
		}
	})
	t.Run("tool calls", func(t *testing.T) {
		r := run(t, "for (let i = 0; i < 10; i++) await mcp.demo.echo({i})", func(r *guest.Request) { r.Limits.ToolCalls = 5 })
		if r.OK || r.Err.Limit != fault.LimitToolCalls {
			t.Fatalf("got %+v", r.Err)
		}
		if len(r.Calls) != 6 || !r.Calls[4].OK || r.Calls[5].OK {
			t.Fatalf("want 5 ok calls and 1 refused, got %+v", r.Calls)
		}
	})
	t.Run("result bytes", func(t *testing.T) {
		r := run(t, "return 'x'.repeat(5000)", func(r *guest.Request) { r.Limits.ResultBytes = 1000 })
		if r.OK || r.Err.Limit != fault.LimitResultBytes {
			t.Fatalf("got %+v", r.Err)
		}
	})
	t.Run("tool result bytes", func(t *testing.T) {
		r := run(t, "return await mcp.demo.echo({s: 'x'.repeat(5000)})", func(r *guest.Request) { r.Limits.ToolResultSize = 1000 })
		if r.OK || r.Err.Limit != fault.LimitResultBytes || r.Err.Tool != "demo:echo" {
			t.Fatalf("got %+v", r.Err)
		}
	})
	t.Run("10 MB of console.log is capped", func(t *testing.T) {
		r := run(t, "const line = 'y'.repeat(1000); for (let i = 0; i < 10000; i++) console.log(line); return 'done'", func(r *guest.Request) { r.Limits.LogBytes = 64 << 10 })
		mustOK(t, r)
		if !r.LogsTruncated {
			t.Fatal("logs not marked truncated")
		}
		total := 0
		for _, l := range r.Logs[:len(r.Logs)-1] {
			total += len(l.Message)
		}
		if total > 64<<10 {
			t.Fatalf("kept %d bytes of logs; limit is %d", total, 64<<10)
		}
		if last := r.Logs[len(r.Logs)-1]; !strings.Contains(last.Message, fault.LimitLogBytes) {
			t.Fatalf("last log line does not name the limit: %q", last.Message)
		}
	})
	t.Run("in-flight cap is respected", func(t *testing.T) {
		h := &concurrencyHost{}
		r := run(t, "await Promise.all(Array.from({length: 20}, () => mcp.demo.sleep({ms: 5}))); return 1", func(r *guest.Request) {
			r.Host = h
			r.Limits.InFlight = 4
		})
		mustOK(t, r)
		if h.max.Load() != 4 {
			t.Fatalf("max calls in flight = %d, want 4", h.max.Load())
		}
	})
	t.Run("requests cannot raise limits past the engine's caps", func(t *testing.T) {
		r := run(t, "new ArrayBuffer(600 << 20); return 'allocated'", func(r *guest.Request) { r.Limits.MemoryBytes = 4 << 30 })
		if r.OK || r.Err.Limit != fault.LimitMemory || !strings.Contains(r.Err.Message, fmt.Sprint(guest.DefaultMaxLimits().MemoryBytes)) {
			t.Fatalf("want the memory limit at the engine's cap, got %+v %s", r.Err, r.Value)
		}
	})
}

// concurrencyHost records the most calls it ever saw at once.
type concurrencyHost struct {
	cur, max atomic.Int32
}

func (h *concurrencyHost) CallTool(ctx context.Context, c guest.Call) (json.RawMessage, error) {
	n := h.cur.Add(1)
	defer h.cur.Add(-1)
	for {
		m := h.max.Load()
		if n <= m || h.max.CompareAndSwap(m, n) {
			break
		}
	}
	return guest.DemoHost{}.CallTool(ctx, c)
}

func TestConsole(t *testing.T) {
	r := run(t, "console.log('a', 1, {b: [1, 2]}, null, undefined); console.info('i'); console.warn('w'); console.error(new Error('e')); const c = {}; c.c = c; console.log(c, 5n, () => 1); return 0")
	mustOK(t, r)
	want := []struct{ level, msg string }{
		{"log", `a 1 {"b": [1, 2]} null undefined`},
		{"info", "i"},
		{"warn", "w"},
		{"error", "Error: e"},
		{"log", `{"c": [Circular]} 5n [Function anonymous]`},
	}
	if len(r.Logs) != len(want) {
		t.Fatalf("logs = %+v", r.Logs)
	}
	for i, w := range want {
		if r.Logs[i].Level != w.level || !strings.HasPrefix(r.Logs[i].Message, w.msg) {
			t.Errorf("log %d = %s %q, want %s %q", i, r.Logs[i].Level, r.Logs[i].Message, w.level, w.msg)
		}
	}
}

func TestTracedCalls(t *testing.T) {
	r := run(t, "return await Promise.all([mcp.demo.echo({x:1}), mcp.demo.add({a:2,b:3})])", func(r *guest.Request) { r.ExecutionID = "ex_test" })
	mustOK(t, r)
	if len(r.Calls) != 2 {
		t.Fatalf("calls = %+v", r.Calls)
	}
	for i, c := range r.Calls {
		if c.ExecutionID != "ex_test" || c.CallID != i+1 || c.Server != "demo" || !c.OK || c.ArgsBytes == 0 || c.ResultBytes == 0 || c.StartedAt.IsZero() {
			t.Errorf("call %d badly traced: %+v", i, c)
		}
	}
	if r.Calls[0].Tool != "echo" || r.Calls[1].Tool != "add" {
		t.Fatalf("calls out of order: %+v", r.Calls)
	}
}

func TestParallelToolCalls(t *testing.T) {
	r := run(t, "const t0 = Date.now(); await Promise.all(Array.from({length: 16}, () => mcp.demo.sleep({ms: 100}))); return Date.now() - t0")
	mustOK(t, r)
	var ms float64
	_ = json.Unmarshal(r.Value, &ms)
	// 16 sequential sleeps would take 1.6 s.
	if ms >= 800 {
		t.Fatalf("16 parallel 100 ms calls took %v ms: not concurrent", ms)
	}
}

func TestConcurrentExecutions(t *testing.T) {
	var wg sync.WaitGroup
	errs := make(chan error, 8*25)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				code := fmt.Sprintf("const r = await mcp.demo.add({a: %d, b: %d}); return r", g, i)
				r := engine.Run(context.Background(), guest.Request{Code: code, Tools: guest.DemoTools(), Host: guest.DemoHost{}})
				if !r.OK || string(r.Value) != fmt.Sprint(g+i) {
					errs <- fmt.Errorf("goroutine %d run %d: %+v %s", g, i, r.Err, r.Value)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestNoLeaksOver2000Executions(t *testing.T) {
	if testing.Short() {
		t.Skip("long loop")
	}
	measure := func() (uint64, int) {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse, runtime.NumGoroutine()
	}
	loop := func(n int) {
		for i := range n {
			r := run(t, "const xs = []; for (let i = 0; i < 1000; i++) xs.push({i}); await mcp.demo.echo({n: xs.length}); console.log('x'); return xs.length", func(r *guest.Request) { r.Args = json.RawMessage(fmt.Sprint(i)) })
			if !r.OK {
				t.Fatalf("run %d: %+v", i, r.Err)
			}
		}
	}
	loop(200) // warm up pools and caches
	heap0, g0 := measure()
	loop(2000)
	heap1, g1 := measure()
	t.Logf("heap in use %d → %d KiB, goroutines %d → %d", heap0>>10, heap1>>10, g0, g1)
	if g1 > g0 {
		t.Errorf("goroutines grew from %d to %d", g0, g1)
	}
	// Each execution touches megabytes; a leak of even one instance per run
	// would add gigabytes. Allow noise, not growth.
	if heap1 > heap0+32<<20 {
		t.Errorf("heap grew from %d to %d KiB over 2000 executions", heap0>>10, heap1>>10)
	}
}

func TestClosedEngine(t *testing.T) {
	ctx := context.Background()
	e, err := guest.New(ctx, guest.Options{Prepared: -1})
	if err != nil {
		t.Fatal(err)
	}
	mustOK(t, e.Run(ctx, guest.Request{Code: "return 1"}))
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	r := e.Run(ctx, guest.Request{Code: "return 1"})
	if r.OK || r.Err.Code != fault.Unavailable {
		t.Fatalf("run on a closed engine: %+v", r)
	}
}

func TestCompilationCache(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for i := range 2 {
		start := time.Now()
		e, err := guest.New(ctx, guest.Options{CacheDir: dir, Prepared: -1})
		if err != nil {
			t.Fatal(err)
		}
		mustOK(t, e.Run(ctx, guest.Request{Code: "return 1"}))
		t.Logf("engine %d ready and ran in %v", i, time.Since(start))
		_ = e.Close(ctx)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) == 0 {
		t.Fatal("compilation cache directory stayed empty")
	}
}

func TestBigPayloadsAreHashedNotStored(t *testing.T) {
	r := run(t, "const big = 'x'.repeat(5000); await mcp.demo.echo({big}); await mcp.demo.echo({small: 1}); return 1")
	mustOK(t, r)
	big, small := r.Calls[0], r.Calls[1]
	if len(big.ArgsHash) != 16 || big.ArgsHash != big.ResultHash || big.ArgsBytes < 5000 {
		t.Fatalf("big payload not hashed: %+v", big)
	}
	if small.ArgsHash != "" || small.ResultHash != "" {
		t.Fatalf("small payload hashed: %+v", small)
	}
	b, _ := json.Marshal(r.Calls)
	if strings.Contains(string(b), "xxxxxxxx") {
		t.Fatal("a payload body reached the trace")
	}
}

// TestFreshDefaults: a request without tools, input or session runs with
// no configuration at all (the snapshot's defaults): args is null, mcp has
// no tools and says so, the globals are there.
func TestFreshDefaults(t *testing.T) {
	r := engine.Run(context.Background(), guest.Request{Code: `let miss;
try { mcp.demo.add } catch (e) { miss = e.code }
return [args, globalThis.args, Object.keys(mcp).length, miss, typeof setTimeout, typeof console.log, typeof tools.search]`})
	mustOK(t, r)
	jsonEq(t, r.Value, `[null, null, 0, "TOOL_NOT_FOUND", "function", "function", "function"]`)
}
