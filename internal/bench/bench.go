// Package bench measures the figures `pml bench` reports: a fresh sandbox,
// the per-call overhead, parallel calls, fib(25), the cost of the deadline,
// MCP calls over loopback against a bare mcp-go client, `pml serve`'s
// throughput and the memory each concurrent execution costs, what an
// execution costs as the capability registry grows, and process start.
// It also runs the peer sandboxes' benchmark script and reads its figures,
// so each of ours can be printed beside the peers' (shared/peers/run). The
// command prints; this package only measures.
package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/guest"
)

// Figure is one benchmark result; lower is better unless HigherIsBetter.
// Its JSON fields are the keys `pml bench --json` prints.
type Figure struct {
	Key            string  `json:"key"`
	Name           string  `json:"name"`
	Value          float64 `json:"value"`
	Unit           string  `json:"unit"`
	Target         string  `json:"target,omitempty"`
	HigherIsBetter bool    `json:"higher_is_better,omitempty"`
	// Compare names the peers' figures this one is compared with.
	Compare []PeerRef `json:"-"`
}

// gojaLabel names the goja peer in tables: a pure-Go interpreter in our own
// process, with no memory isolation (a script can exhaust the host), so
// its figures are the floor of what isolation costs us, not a rival.
const gojaLabel = "goja (pure Go, no memory isolation)"

// compare lists, by our figure's key, the peers' figures it is printed
// beside.
var compare = map[string][]PeerRef{
	"fresh_sandbox_p50_ms": {
		{"deno-worker-bridge", "fresh_sandbox_p50_ms", "Deno Worker"},
		{"quickjs-emscripten-node", "fresh_instance_p50_ms", "quickjs-emscripten, fresh Wasm instance"},
		{"quickjs-emscripten-node", "fresh_sandbox_p50_ms", "quickjs-emscripten, shared instance"},
		{"goja", "fresh_sandbox_p50_ms", gojaLabel + ", new runtime"},
	},
	"per_call_overhead_us": {
		{"deno-worker-bridge", "per_call_overhead_us", "Deno Worker (postMessage)"},
		{"quickjs-emscripten-node", "per_call_overhead_us", "quickjs-emscripten (sync, no JSON)"},
		{"goja", "per_call_overhead_us", gojaLabel + " (sync, JSON)"},
	},
	"parallel_16x50ms_ms": {
		{"deno-worker-bridge", "parallel_16x50ms_ms", "Deno Worker"},
	},
	"serve_throughput_return_rps": {
		{"deno-worker-bridge", "throughput_return_rps", "Deno Worker per request (no HTTP)"},
	},
	"serve_throughput_one_call_rps": {
		{"deno-worker-bridge", "throughput_one_call_rps", "Deno Worker + one postMessage call (no HTTP)"},
	},
	"memory_per_concurrent_execution_kib": {
		{"deno-worker-bridge", "memory_per_concurrent_execution_kib", "Deno Worker, per held Worker"},
	},
	"fib25_ms": {
		{"quickjs-emscripten-node", "fib25_ms", "quickjs-emscripten on V8"},
		{"goja", "fib25_ms", gojaLabel},
	},
}

// PeerRef names one figure of a peer: the peer, the key of the figure in
// its JSON line, and how a table labels it.
type PeerRef struct{ Peer, Key, Label string }

// Options say what Measure measures.
type Options struct {
	// Engine runs the sandbox figures; Measure does not close it. When
	// nil, Measure opens one over CacheDir (and closes it).
	Engine *guest.Engine
	// CacheDir is the engine's compilation cache ("" for none): the engine
	// without deadline enforcement and the cached process start use it.
	CacheDir string
	// Samples is the number of fresh-sandbox samples (default 500).
	Samples int
	// Executable is the pml binary timed from process start to first
	// result; empty leaves those figures out.
	Executable string
	// ServeDuration is how long each `pml serve` throughput figure is
	// measured, after a warm-up (default 2 s; negative leaves the serve
	// figures out, and the capability figures, which also start it).
	ServeDuration time.Duration
	// Progress is told what is being measured (may be nil).
	Progress func(string)
}

// Measure runs our side of the benchmarks, one after another (never two
// at once on the same cores).
func Measure(ctx context.Context, o Options) ([]Figure, error) {
	if o.Engine == nil {
		opened, err := guest.New(ctx, guest.Options{CacheDir: o.CacheDir, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return nil, err
		}
		defer opened.Close(context.Background())
		o.Engine = opened
	}
	if o.Samples <= 0 {
		o.Samples = 500
	}
	if o.Progress == nil {
		o.Progress = func(string) {}
	}
	m := &measurement{Options: o}
	// The demo tools in process, without bridge or schema check: the
	// per-call figure measures the engine's own hand-off.
	m.demoTools, m.demoHost = demoserver.New().Guest()
	// The groups of figures, in the order they are printed.
	groups := []func(context.Context) ([]Figure, error){
		m.freshSandbox, m.perCall, m.parallel, m.fib,
		func(ctx context.Context) ([]Figure, error) {
			return measureMCP(ctx, m.Engine, DemoServerCommand(m.Executable), m.Progress)
		},
		m.serve, m.processStart,
	}
	var figs []Figure
	for _, measure := range groups {
		f, err := measure(ctx)
		if err != nil {
			return nil, err
		}
		figs = append(figs, f...)
	}
	return figs, nil
}

// measurement is what Measure's groups of figures share: the options,
// defaults filled in, and the demo tools.
type measurement struct {
	Options
	demoTools []guest.Tool
	demoHost  guest.ToolHost
}

// demo runs code on the engine with the demo tools.
func (m *measurement) demo(ctx context.Context, code string) *guest.Result {
	return m.Engine.Run(ctx, guest.Request{Code: code, Tools: m.demoTools, Host: m.demoHost, Limits: guest.Limits{Timeout: time.Minute, ToolCalls: 10000}})
}

// must turns a failed benchmark script into an error: a figure of a
// failing run would time the failure.
func must(r *guest.Result) (*guest.Result, error) {
	if !r.OK {
		return r, fmt.Errorf("benchmark script failed: %v", r.Err)
	}
	return r, nil
}

// freshSandbox times a fresh sandbox running return 1+1: back to back
// (p50, p99), then each after an idle pause.
func (m *measurement) freshSandbox(ctx context.Context) ([]Figure, error) {
	m.Progress("fresh sandbox + return 1+1")
	for range 50 {
		m.demo(ctx, "return 1+1") // warm up
	}
	// Back to back: each Run takes a prepared instance while the pool
	// restores the next on the other core, as a busy service does.
	var b2b []time.Duration
	for range m.Samples {
		start := time.Now()
		if _, err := must(m.demo(ctx, "return 1+1")); err != nil {
			return nil, err
		}
		b2b = append(b2b, time.Since(start))
	}
	// After an idle pause: caches cold, as for a lone request.
	var idle []time.Duration
	for range m.Samples / 5 {
		time.Sleep(5 * time.Millisecond)
		start := time.Now()
		m.demo(ctx, "return 1+1")
		idle = append(idle, time.Since(start))
	}
	return []Figure{
		{Key: "fresh_sandbox_p50_ms", Name: "fresh sandbox + return 1+1, p50", Value: msf(median(b2b)), Unit: "ms", Target: "≤ 0.10 ms",
			Compare: compare["fresh_sandbox_p50_ms"]},
		{Key: "fresh_sandbox_p99_ms", Name: "same, p99", Value: msf(percentile(b2b, 0.99)), Unit: "ms", Target: "≤ 0.5 ms"},
		{Key: "fresh_sandbox_idle_p50_ms", Name: "same, each after a 5 ms idle pause", Value: msf(median(idle)), Unit: "ms"},
	}, nil
}

// perCall is a tool call's overhead: a loop awaiting a tool call less the
// same loop awaiting a resolved promise, the best of three each.
func (m *measurement) perCall(ctx context.Context) ([]Figure, error) {
	m.Progress("per tool-call overhead (10,000 awaits)")
	const n = 10000
	base := time.Hour
	loop := time.Hour
	for range 3 {
		r, err := must(m.demo(ctx, fmt.Sprintf("let s = 0; for (let i = 0; i < %d; i++) s += (await Promise.resolve({i})).i; return s", n)))
		if err != nil {
			return nil, err
		}
		base = min(base, r.Duration)
		r, err = must(m.demo(ctx, fmt.Sprintf("let s = 0; for (let i = 0; i < %d; i++) s += (await mcp.demo.echo({i})).i; return s", n)))
		if err != nil {
			return nil, err
		}
		loop = min(loop, r.Duration)
	}
	return []Figure{{Key: "per_call_overhead_us", Name: "per tool-call overhead", Value: float64((loop - base).Nanoseconds()) / n / 1000, Unit: "µs", Target: "≤ 5 µs, below quickjs-emscripten's sync call",
		Compare: compare["per_call_overhead_us"]}}, nil
}

// parallel times 16 tool calls of 50 ms each awaited together.
func (m *measurement) parallel(ctx context.Context) ([]Figure, error) {
	m.Progress("16 parallel 50 ms calls")
	var par []time.Duration
	for range 5 {
		start := time.Now()
		if _, err := must(m.demo(ctx, "return (await Promise.all(Array.from({length:16}, () => mcp.demo.sleep({ms:50})))).length")); err != nil {
			return nil, err
		}
		par = append(par, time.Since(start))
	}
	return []Figure{{Key: "parallel_16x50ms_ms", Name: "16 parallel 50 ms calls", Value: msf(median(par)), Unit: "ms", Target: "≤ 60 ms",
		Compare: compare["parallel_16x50ms_ms"]}}, nil
}

// fib times fib(25), then the same on an engine without deadline
// enforcement: what the deadline costs is the difference.
func (m *measurement) fib(ctx context.Context) ([]Figure, error) {
	m.Progress("fib(25)")
	fibT, err := fibOf(ctx, m.Engine)
	if err != nil {
		return nil, err
	}
	figs := []Figure{{Key: "fib25_ms", Name: "fib(25)", Value: msf(fibT), Unit: "ms", Target: "≤ 0.8× quickjs-emscripten",
		Compare: compare["fib25_ms"]}}

	m.Progress("cost of deadline enforcement")
	noDL, err := guest.New(ctx, guest.Options{CacheDir: m.CacheDir, UnsafeNoDeadline: true, Prepared: -1})
	if err != nil {
		return nil, err
	}
	fibNo, err := fibOf(ctx, noDL)
	_ = noDL.Close(context.Background())
	if err != nil {
		return nil, err
	}
	fibAgain, err := fibOf(ctx, m.Engine)
	if err != nil {
		return nil, err
	}
	return append(figs, Figure{Key: "deadline_cost_pct", Name: "cost of deadline enforcement on fib(25)", Value: 100 * (msf(min(fibT, fibAgain)) - msf(fibNo)) / msf(fibNo), Unit: "%", Target: "≤ 15 %"}), nil
}

// fibOf is the median of 9 runs of fib(25) on e.
func fibOf(ctx context.Context, e *guest.Engine) (time.Duration, error) {
	const fib = "function fib(n) { return n < 2 ? n : fib(n - 1) + fib(n - 2) }\nreturn fib(25)"
	var ts []time.Duration
	for range 9 {
		r := e.Run(ctx, guest.Request{Code: fib, Limits: guest.Limits{Timeout: time.Minute}})
		if !r.OK {
			return 0, fmt.Errorf("fib: %v", r.Err)
		}
		ts = append(ts, r.Duration)
	}
	return median(ts), nil
}

// serve is `pml serve`'s figures and the capability registry's, both
// measured against a server started in process; left out when
// ServeDuration is negative.
func (m *measurement) serve(ctx context.Context) ([]Figure, error) {
	if m.ServeDuration < 0 {
		return nil, nil
	}
	d := m.ServeDuration
	if d == 0 {
		d = 2 * time.Second
	}
	serveFigs, err := measureServe(ctx, m.CacheDir, DemoServerCommand(m.Executable), d, m.Progress)
	if err != nil {
		return nil, fmt.Errorf("pml serve figures: %w", err)
	}
	capFigs, err := measureCapabilities(ctx, m.CacheDir, m.Progress)
	if err != nil {
		return nil, fmt.Errorf("capability figures: %w", err)
	}
	return append(serveFigs, capFigs...), nil
}

// processStart times the pml binary from process start to its first
// result, with and without the compilation cache; a figure whose runs
// failed is left out.
func (m *measurement) processStart(ctx context.Context) ([]Figure, error) {
	m.Progress("process start → first result")
	self := m.Executable
	if self == "" {
		return nil, nil
	}
	var figs []Figure
	warm, err1 := timeProcess(ctx, self, "run", "--cache-dir", m.CacheDir, "-e", "return 1+1")
	cold, err2 := timeProcess(ctx, self, "run", "--no-cache", "-e", "return 1+1")
	if err1 == nil {
		figs = append(figs, Figure{Key: "process_start_cached_ms", Name: "process start → first result, compilation cache", Value: msf(warm), Unit: "ms", Target: "≤ 40 ms"})
	}
	if err2 == nil {
		figs = append(figs, Figure{Key: "process_start_uncached_ms", Name: "process start → first result, no cache", Value: msf(cold), Unit: "ms"})
	}
	return figs, nil
}

// timeProcess runs the command 5 times and returns the median wall time.
func timeProcess(ctx context.Context, name string, args ...string) (time.Duration, error) {
	var ts []time.Duration
	for range 5 {
		start := time.Now()
		cmd := exec.CommandContext(ctx, name, args...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return 0, fmt.Errorf("%s: %w: %s", name, err, out)
		}
		ts = append(ts, time.Since(start))
	}
	return median(ts), nil
}

// Machine describes the machine the figures were measured on.
func Machine() string {
	model := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	return fmt.Sprintf("%s/%s, %d cores, %s, %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), model, runtime.Version())
}

func median(ts []time.Duration) time.Duration { return percentile(ts, 0.5) }

func percentile(ts []time.Duration, p float64) time.Duration {
	s := slices.Clone(ts)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func msf(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
