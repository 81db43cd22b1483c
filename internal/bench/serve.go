package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/pml-sandbox/pml/internal/admission"
	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/httpapi"
	"github.com/pml-sandbox/pml/internal/mcpserver"
	"github.com/pml-sandbox/pml/internal/metrics/prom"
	"github.com/pml-sandbox/pml/internal/runs"
	"github.com/pml-sandbox/pml/internal/serverconfig"
	mcpkind "github.com/pml-sandbox/pml/internal/toolsource/mcp"
)

// ServeClients is how many clients drive `pml serve` at once for the
// throughput figures, and how many "requests" the Deno peer runs at once.
const ServeClients = 8

// ServeWarmUp runs before each throughput figure is measured, uncounted:
// connections open and the engine's instance pool fills first.
const ServeWarmUp = 500 * time.Millisecond

// HeldExecutions is how many executions the memory figure holds at once.
// Enough that the per-execution share dominates sampling noise (RSS moves
// by a few hundred KiB on its own), few enough to stay quick.
const HeldExecutions = 32

// The scripts the throughput figures run: nothing but the round trip, and
// one remote tool call over the demo MCP server.
const (
	scriptReturn  = "return 1+1"
	scriptOneCall = "return (await mcp.demo.echo({x: 1})).x"
)

// measureServe measures `pml serve`: executions per second with
// ServeClients concurrent clients, for each throughput script, each run for
// d after a warm-up, and the memory each concurrent execution costs.
//
// demoCmd, when not nil, makes the command of a demo MCP server in a
// process of its own (`pml demo-server`), as a remote server is: the
// memory figure then counts the executions' memory, not the tool server's
// goroutines and buffers for each held call.
func measureServe(ctx context.Context, cacheDir string, demoCmd func(context.Context) *exec.Cmd, d time.Duration, progress func(string)) ([]Figure, error) {
	s, err := startServedWith(ctx, cacheDir, nil, demoCmd)
	if err != nil {
		return nil, err
	}
	defer s.close()
	progress(fmt.Sprintf("pml serve throughput, %d clients, %s: return 1+1", ServeClients, d))
	ret, err := s.throughput(ctx, scriptReturn, ServeClients, ServeWarmUp, d)
	if err != nil {
		return nil, err
	}
	progress(fmt.Sprintf("pml serve throughput, %d clients, %s: one remote tool call", ServeClients, d))
	one, err := s.throughput(ctx, scriptOneCall, ServeClients, ServeWarmUp, d)
	if err != nil {
		return nil, err
	}
	figs := []Figure{
		{Key: "serve_throughput_return_rps", Name: fmt.Sprintf("pml serve executions/s, %d clients, `%s`", ServeClients, scriptReturn), Value: ret, Unit: "/s", Target: "≥ 10,000 /s on 2 cores", HigherIsBetter: true,
			Compare: compare["serve_throughput_return_rps"]},
		{Key: "serve_throughput_one_call_rps", Name: "same, one remote call (demo MCP server, streamable HTTP)", Value: one, Unit: "/s", Target: "≥ 5,000 /s on 2 cores", HigherIsBetter: true,
			Compare: compare["serve_throughput_one_call_rps"]},
	}
	progress(fmt.Sprintf("memory per concurrent execution (%d held)", HeldExecutions))
	mem, err := s.memoryPerExecution(ctx, HeldExecutions)
	if errors.Is(err, errNoRSS) {
		progress("memory per concurrent execution: " + err.Error())
		return figs, nil
	}
	if err != nil {
		return nil, err
	}
	return append(figs,
		Figure{Key: "memory_per_concurrent_execution_pss_kib", Name: fmt.Sprintf("memory per concurrent execution (%d held), PSS", HeldExecutions), Value: mem.PSS, Unit: "KiB", Target: "≤ 256 KiB"},
		Figure{Key: "memory_per_concurrent_execution_kib", Name: "same, VmRSS (shared image pages once per instance)", Value: mem.RSS, Unit: "KiB",
			Compare: compare["memory_per_concurrent_execution_kib"]},
		Figure{Key: "memory_per_concurrent_execution_private_kib", Name: "same, private (RssAnon: Go heap, stacks, guests' pages)", Value: mem.Private, Unit: "KiB"},
		Figure{Key: "memory_per_concurrent_execution_go_heap_kib", Name: "same, live Go heap", Value: mem.Heap, Unit: "KiB"},
	), nil
}

// served is `pml serve` without the process: the service internal/app
// wires and the handler internal/httpapi serves, as serveCmd builds them,
// on a loopback listener, with the demo MCP server (streamable HTTP) as its
// one MCP server. Running it in the benchmark's own process needs no
// second binary and lets the memory figure read the server's own memory.
type served struct {
	url    string
	app    *app.App
	demo   demoServer
	hs     *http.Server
	api    *httpapi.Handler
	exec   *runs.Service
	done   chan error
	tmp    string
	client *http.Client
	// onIdle and onHeld, when set, run right after the memory figure's
	// idle and held samples (a benchmark's breakdown and heap profile).
	onIdle, onHeld func()
}

// startServed starts the server; cacheDir is the engine's compilation
// cache ("" for none).
func startServed(ctx context.Context, cacheDir string) (_ *served, err error) {
	return startServedWith(ctx, cacheDir, nil, nil)
}

// startServedWith starts the server with its capability registry file
// made by seed first (nil: empty), and the demo MCP server in the process
// demoCmd makes (nil: in this one).
func startServedWith(ctx context.Context, cacheDir string, seed func(path string) error, demoCmd func(context.Context) *exec.Cmd) (_ *served, err error) {
	s := &served{}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	if s.demo, err = startDemo(ctx, demoCmd); err != nil {
		return nil, err
	}
	// A capability registry of its own: empty, as on a first run, and
	// never the user's file.
	if s.tmp, err = os.MkdirTemp("", "pml-bench-serve-"); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	capFile := filepath.Join(s.tmp, "capabilities.json")
	if seed != nil {
		if err := seed(capFile); err != nil {
			return nil, fmt.Errorf("bench: seeding the capability registry: %w", err)
		}
	}
	demo, err := mcpkind.ParseServerFlag("demo=" + s.demo.StreamableURL())
	if err != nil {
		return nil, err
	}
	// The logger `pml serve` uses, writing nowhere: each request's log
	// line is still built. Traces stay in memory, pml serve's file store
	// would append to the user's trace file.
	log := app.Logger(io.Discard, slog.LevelInfo)
	s.app, err = app.New(ctx, app.Config{
		CacheDir:         cacheDir,
		Servers:          serverconfig.Servers{demo},
		Traces:           app.TraceConfig{Store: app.StoreMemory},
		CapabilitiesFile: capFile,
		// pml serve's defaults: Prometheus metrics, suspended executions
		// and sessions kept in a directory (here the benchmark's own).
		Metrics:         app.MetricsPrometheus,
		MetricsExporter: prom.NewExporter,
		Suspensions:     app.SuspensionConfig{Dir: filepath.Join(s.tmp, "suspensions")},
	}, log)
	if err != nil {
		return nil, fmt.Errorf("bench: starting the service: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	s.url = "http://" + ln.Addr().String()
	// The front end pml serve puts around the service (servecmd.go): the
	// server's budget of executions and memory, the runs of asynchronous
	// executions, client limits, streaming, MCP sessions and /metrics.
	budget, err := admission.New(admission.DefaultConfig())
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	s.exec = s.app.Executor(budget.Admit(s.app.Service), nil)
	clients := httpapi.DefaultClientLimits()
	s.api = s.app.HTTPHandler(httpapi.Options{
		Service:   s.exec,
		Logger:    log,
		Guard:     &httpapi.Guard{}, // what pml serve guards loopback with
		Streaming: true,
		MCP:       mcpserver.Settings{Sessions: true},
		Clients:   &clients,
		Metrics:   s.app.MetricsHandler(),
	})
	s.hs = &http.Server{Handler: budget.RetryAfter(s.api), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	s.done = make(chan error, 1)
	go func() { s.done <- s.hs.Serve(ln) }()
	// Keep-alive connections for every client and every held execution,
	// as a client that sends many requests keeps them: the default of two
	// idle connections a host would make most requests dial anew.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = HeldExecutions + ServeClients
	s.client = &http.Client{Transport: tr}
	return s, nil
}

// close stops everything startServed started.
func (s *served) close() {
	if s.client != nil {
		s.client.CloseIdleConnections()
	}
	if s.hs != nil {
		// Shutdown waits for the handlers, cancelled executions included,
		// so the engine is not closed under one.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if s.hs.Shutdown(ctx) != nil {
			_ = s.hs.Close()
		}
		cancel()
		<-s.done
	}
	if s.api != nil {
		_ = s.api.Close(context.Background())
	}
	if s.exec != nil {
		_ = s.exec.Close(context.Background())
	}
	if s.app != nil {
		s.app.Close(context.Background())
	}
	if s.demo != nil {
		_ = s.demo.Close()
	}
	if s.tmp != "" {
		_ = os.RemoveAll(s.tmp)
	}
}

// execute sends one POST /execute and checks that the script succeeded.
func (s *served) execute(ctx context.Context, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/execute", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("bench: POST /execute: %w", err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("bench: POST /execute: %w", err)
	}
	var r struct {
		OK bool `json:"ok"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(out, &r) != nil || !r.OK {
		return fmt.Errorf("bench: POST /execute: %s: %.300s", resp.Status, out)
	}
	return nil
}

// throughput drives the server with clients concurrent clients, each
// sending the next request as soon as its last is answered: first for
// warm, uncounted, then for d. It returns executions per second: the
// requests answered in the measured phase over the time until the last of
// them was answered (requests in flight when d ends are finished and
// counted, so none is half counted).
func (s *served) throughput(ctx context.Context, code string, clients int, warm, d time.Duration) (float64, error) {
	body, err := json.Marshal(map[string]string{"code": code})
	if err != nil {
		return 0, fmt.Errorf("bench: %w", err)
	}
	phase := func(d time.Duration) (int64, time.Duration, error) {
		var n atomic.Int64
		g, gctx := errgroup.WithContext(ctx)
		start := time.Now()
		end := start.Add(d)
		for range clients {
			g.Go(func() error {
				for time.Now().Before(end) {
					if err := s.execute(gctx, body); err != nil {
						return err
					}
					n.Add(1)
				}
				return nil
			})
		}
		err := g.Wait()
		return n.Load(), time.Since(start), err
	}
	if _, _, err := phase(warm); err != nil {
		return 0, err
	}
	n, elapsed, err := phase(d)
	if err != nil {
		return 0, err
	}
	return float64(n) / elapsed.Seconds(), nil
}

// heldMemory is what one held execution costs, in KiB: the rise of the
// process's proportional set size (PSS: each resident page counted once,
// however many instances map it), of its resident set (VmRSS, which counts
// a page of the shared post-initialisation image once per instance
// mapping it), of its private part (RssAnon: the Go heap and stacks, and
// the guests' pages written) and of the live Go heap.
type heldMemory struct{ PSS, RSS, Private, Heap float64 }

// memoryPerExecution holds n executions at once, each awaiting a long
// demo.sleep on the demo MCP server, and returns what each costs: the rise
// of the process's memory over idle, divided by n. Both samples come after
// collections that return freed memory to the OS, so they count what is
// held, not garbage.
//
// Each execution is one POST /execute written on a connection of its own
// that is not read until the sample is taken: a client elsewhere, holding
// no goroutine or buffer in this process, as pml serve's callers are.
func (s *served) memoryPerExecution(ctx context.Context, n int) (mem heldMemory, err error) {
	m0, err := sampleMemory()
	if err != nil {
		return mem, err
	}
	if s.onIdle != nil {
		s.onIdle()
	}
	// The pool counts a call when it is answered, so each execution makes
	// one quick call first: once all n are answered, every execution has
	// its sandbox and is (within microseconds) awaiting its sleep, which
	// lasts far longer than the sampling takes. Then they are let go:
	// closing a request's connection ends its execution.
	body, err := json.Marshal(map[string]string{"code": "await mcp.demo.echo({}); await mcp.demo.sleep({ms: 30000}); return 1"})
	if err != nil {
		return mem, fmt.Errorf("bench: %w", err)
	}
	calls := s.app.MCP.Stats().Calls
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for range n {
		c, err := s.hold(ctx, body)
		if err != nil {
			return mem, err
		}
		conns = append(conns, c)
	}
	err = waitFor(ctx, 10*time.Second, func() (bool, error) {
		return s.app.MCP.Stats().Calls >= calls+int64(n), nil
	})
	if err == nil {
		// Held is waiting long: the sample comes once each execution has
		// waited for its sleep a while (the engine lets an instance's call
		// stacks go after 10 ms of waiting), not in its first microseconds.
		err = sleepCtx(ctx, heldSettle)
	}
	if err != nil {
		return mem, err
	}
	m1, err := sampleMemory()
	if err != nil {
		return mem, err
	}
	if s.onHeld != nil {
		s.onHeld()
	}
	for _, c := range conns {
		if !stillHeld(c) {
			return mem, errors.New("bench: an execution that should be held ended early")
		}
	}
	per := func(a, b uint64) float64 { return (float64(a) - float64(b)) / 1024 / float64(n) }
	return heldMemory{PSS: per(m1.pss, m0.pss), RSS: per(m1.rss, m0.rss), Private: per(m1.anon, m0.anon), Heap: per(m1.heap, m0.heap)}, nil
}

// hold sends one POST /execute of body on a connection of its own and
// returns the connection, unread.
func (s *served) hold(ctx context.Context, body []byte) (net.Conn, error) {
	host := strings.TrimPrefix(s.url, "http://")
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	req := fmt.Appendf(nil, "POST /execute HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", host, len(body))
	if _, err := c.Write(append(req, body...)); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("bench: %w", err)
	}
	return c, nil
}

// stillHeld reports whether nothing has been answered on c yet.
func stillHeld(c net.Conn) bool {
	if c.SetReadDeadline(time.Now().Add(time.Millisecond)) != nil {
		return false
	}
	var b [1]byte
	_, err := c.Read(b[:])
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// heldSettle is how long the memory figure's executions wait for their
// sleep before the sample.
const heldSettle = 50 * time.Millisecond

// sleepCtx waits d, or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitFor polls cond until it holds or fails, ctx ends or limit passes.
// Nothing signals the pool's calls, so polling is the only way to see them.
func waitFor(ctx context.Context, limit time.Duration, cond func() (bool, error)) error {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		if ok, err := cond(); err != nil || ok {
			return err
		}
		select {
		case <-deadline.C:
			return fmt.Errorf("bench: the executions were not all held after %v", limit)
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// memorySample is the process's proportional set size (Pss), resident
// set (VmRSS), its anonymous part (RssAnon) and the live Go heap, in bytes.
type memorySample struct{ pss, rss, anon, heap uint64 }

// sampleMemory collects garbage, returns freed memory to the OS, and reads
// the process's memory. Twice: what the sync.Pools kept survives one
// collection (their victim caches), and would be counted in one sample
// and not the other.
func sampleMemory() (m memorySample, err error) {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m.heap = ms.HeapAlloc
	status, err := procBytes("/proc/self/status", "VmRSS", "RssAnon")
	if err != nil {
		return m, err
	}
	m.rss, m.anon = status[0], status[1]
	rollup, err := procBytes("/proc/self/smaps_rollup", "Pss")
	if err != nil {
		return m, err
	}
	m.pss = rollup[0]
	return m, nil
}

// errNoRSS: the process's resident memory cannot be read here (not Linux).
var errNoRSS = errors.New("bench: no resident memory figure on this system")

// procBytes reads the fields names ("Name: N kB") of the /proc file path,
// in bytes, in the order asked: VmRSS and RssAnon from /proc/self/status,
// Pss from /proc/self/smaps_rollup (Linux 4.14 and later). A file that
// cannot be read is errNoRSS (not Linux).
func procBytes(path string, names ...string) ([]uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errNoRSS, err)
	}
	out := make([]uint64, len(names))
	found := 0
	for line := range strings.Lines(string(b)) {
		name, v, ok := strings.Cut(line, ":")
		i := slices.Index(names, name)
		if !ok || i < 0 {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("bench: %s %q: %w", name, v, err)
		}
		out[i] = kb * 1024
		found++
	}
	if found < len(names) {
		return nil, fmt.Errorf("bench: no %s in %s", strings.Join(names, " and "), path)
	}
	return out, nil
}
