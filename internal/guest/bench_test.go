package guest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/testutil/cputime"
)

// BenchmarkFreshSandbox is one execution of `return 1+1` in a fresh
// instance, back to back (the pool cannot keep up, so this includes
// restoring instances inline on the slower path).
func BenchmarkFreshSandbox(b *testing.B) {
	for b.Loop() {
		r := engine.Run(context.Background(), guest.Request{Code: "return 1+1"})
		if !r.OK {
			b.Fatal(r.Err)
		}
	}
}

// BenchmarkFreshSandboxSteady is a fresh execution of `return 1+1` as a
// warm service runs one: it takes a reset instance from the pool, and the
// retire loop resets it after, before the next run starts (untimed), so no
// run instantiates. Each run's work is then the same, which is what an
// instruction count of it wants (docs/BENCHMARKS.md, "Guest instructions
// per fresh execution and fib(25)": a run under callgrind with the
// callgrind build tag counts each phase). The benchmark's goroutine keeps
// its thread: callgrind counts a phase per thread.
func BenchmarkFreshSandboxSteady(b *testing.B) {
	steady(b, guest.Request{Code: "return 1+1"})
}

// BenchmarkFreshSandboxSteadyDemoTools is BenchmarkFreshSandboxSteady with
// the demo tools in the request, as pml bench's fresh sandbox runs it.
func BenchmarkFreshSandboxSteadyDemoTools(b *testing.B) {
	steady(b, guest.Request{Code: "return 1+1", Tools: guest.DemoTools(), Host: guest.DemoHost{}})
}

func steady(b *testing.B, req guest.Request) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ctx := context.Background()
	created := engine.Stats().Created
	for b.Loop() {
		before := engine.Stats()
		r := engine.Run(ctx, req)
		if !r.OK {
			b.Fatal(r.Err)
		}
		b.StopTimer()
		for s := engine.Stats(); s.Reused == before.Reused && s.Closed == before.Closed; s = engine.Stats() {
			time.Sleep(100 * time.Microsecond)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(engine.Stats().Created-created)/float64(b.N), "instantiated/op")
}

// BenchmarkFreshSandbox16Tools is BenchmarkFreshSandbox with 16 tools in
// the request: building the mcp object is per-run work.
func BenchmarkFreshSandbox16Tools(b *testing.B) {
	var tools []guest.Tool
	for i := range 16 {
		tools = append(tools, guest.Tool{Server: "s" + fmt.Sprint(i%2), Name: fmt.Sprintf("tool_%d", i), Description: "A tool that does something useful."})
	}
	for b.Loop() {
		r := engine.Run(context.Background(), guest.Request{Code: "return 1+1", Tools: tools})
		if !r.OK {
			b.Fatal(r.Err)
		}
	}
}

// BenchmarkFreshSandboxPooled spaces executions so the pool has an instance
// ready, as a warm service has between requests; only Run is timed.
func BenchmarkFreshSandboxPooled(b *testing.B) {
	for b.Loop() {
		b.StopTimer()
		time.Sleep(time.Millisecond)
		b.StartTimer()
		r := engine.Run(context.Background(), guest.Request{Code: "return 1+1"})
		if !r.OK {
			b.Fatal(r.Err)
		}
	}
}

// BenchmarkToolCall measures one `await mcp.demo.echo()` round trip; the
// ns/op of the 1,000-call loop is divided into a per-call metric.
func BenchmarkToolCall(b *testing.B) {
	const n = 1000
	code := fmt.Sprintf("let s = 0; for (let i = 0; i < %d; i++) s += (await mcp.demo.echo({i})).i; return s", n)
	cpu := cputime.Process()
	for b.Loop() {
		r := engine.Run(context.Background(), guest.Request{Code: code, Tools: guest.DemoTools(), Host: guest.DemoHost{}})
		if !r.OK {
			b.Fatal(r.Err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n/1000, "µs/call")
	b.ReportMetric(float64((cputime.Process()-cpu).Nanoseconds())/float64(b.N)/n/1000, "cpu-µs/call")
}

func BenchmarkParallel16x50ms(b *testing.B) {
	code := "return (await Promise.all(Array.from({length:16}, () => mcp.demo.sleep({ms:50})))).length"
	for b.Loop() {
		r := engine.Run(context.Background(), guest.Request{Code: code, Tools: guest.DemoTools(), Host: guest.DemoHost{}})
		if !r.OK {
			b.Fatal(r.Err)
		}
	}
}

func BenchmarkFib25(b *testing.B) {
	code := "function fib(n) { return n < 2 ? n : fib(n - 1) + fib(n - 2) }\nreturn fib(25)"
	cpu := cputime.Process()
	for b.Loop() {
		r := engine.Run(context.Background(), guest.Request{Code: code})
		if !r.OK {
			b.Fatal(r.Err)
		}
	}
	b.ReportMetric(float64((cputime.Process()-cpu).Nanoseconds())/float64(b.N)/1e6, "cpu-ms/op")
}

// slowHost hides DemoHost's ImmediateHost, forcing the goroutine path that
// remote tools take.
type slowHost struct{}

func (slowHost) CallTool(ctx context.Context, c guest.Call) (json.RawMessage, error) {
	return guest.DemoHost{}.CallTool(ctx, c)
}

// BenchmarkToolCallGoroutine is BenchmarkToolCall through the goroutine
// hand-off every non-immediate tool pays.
func BenchmarkToolCallGoroutine(b *testing.B) {
	const n = 1000
	code := fmt.Sprintf("let s = 0; for (let i = 0; i < %d; i++) s += (await mcp.demo.echo({i})).i; return s", n)
	for b.Loop() {
		r := engine.Run(context.Background(), guest.Request{Code: code, Tools: guest.DemoTools(), Host: slowHost{}})
		if !r.OK {
			b.Fatal(r.Err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n/1000, "µs/call")
}

// BenchmarkAwaitBaseline is the same loop awaiting a resolved promise: the
// JS cost every call pays, tools or not.
func BenchmarkAwaitBaseline(b *testing.B) {
	const n = 1000
	code := fmt.Sprintf("let s = 0; for (let i = 0; i < %d; i++) s += (await Promise.resolve({i})).i; return s", n)
	for b.Loop() {
		r := engine.Run(context.Background(), guest.Request{Code: code})
		if !r.OK {
			b.Fatal(r.Err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n/1000, "µs/call")
}

// BenchmarkStartCached is a process's guest start with a warm cache
// directory: guest.New over the compiled code and post-init image an
// earlier engine kept (Linux; elsewhere the initialisation runs), then
// Close. The package initialisation of a binary is not in it.
func BenchmarkStartCached(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	open := func() *guest.Engine {
		e, err := guest.New(ctx, guest.Options{CacheDir: dir, Prepared: -1})
		if err != nil {
			b.Fatal(err)
		}
		return e
	}
	_ = open().Close(ctx)
	for b.Loop() {
		_ = open().Close(ctx)
	}
}

// coldHost answers every call with a word count after writing over
// coldBytes of memory, as a network path does to the caches between two
// of a script's calls: the guest's next step starts with its code and
// data evicted. A call's wait is not the run's CPU time (Result.CPUTime),
// so the eviction is not counted.
type coldHost struct{ buf []byte }

const coldBytes = 4 << 20

func (h *coldHost) CallTool(ctx context.Context, c guest.Call) (json.RawMessage, error) {
	for i := 0; i < len(h.buf); i += 64 {
		h.buf[i]++
	}
	return json.RawMessage(`{"words":3,"lines":1,"chars":13}`), nil
}

// BenchmarkToolCallCold is the guest's share of an awaited call whose
// answer comes after the caches were evicted (coldHost): the step between
// two calls of pml bench's MCP loop, without the network's noise.
// guest-µs/call is the run's CPU time (its waits left out) per call.
func BenchmarkToolCallCold(b *testing.B) {
	const n = 100
	code := fmt.Sprintf("for (let i = 0; i < %d; i++) await mcp.demo.echo({text: 'one two three'}); return 1", n)
	host := &coldHost{buf: make([]byte, coldBytes)}
	var busy time.Duration
	for b.Loop() {
		r := engine.Run(context.Background(), guest.Request{Code: code, Tools: guest.DemoTools(), Host: host})
		if !r.OK {
			b.Fatal(r.Err)
		}
		busy += r.CPUTime
	}
	b.ReportMetric(float64(busy.Nanoseconds())/float64(b.N)/n/1000, "guest-µs/call")
}
