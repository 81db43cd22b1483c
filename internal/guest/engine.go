// Package guest is the sandbox engine: it runs untrusted JavaScript in
// QuickJS compiled to WebAssembly, on wazero, one fresh instance per
// execution.
//
// The module is compiled once per Engine (and, with a cache directory, once
// per machine). After compiling, the engine instantiates the guest once, lets
// it build its JS runtime and prelude, and snapshots linear memory. Every
// execution then gets a brand-new instance restored from that snapshot; a
// small pool keeps a few restored instances ready so the request path does
// not pay for instantiation. An instance is used for one execution and then
// closed: nothing a script does can be seen by the next one.
//
// The guest has no WASI file system, environment, arguments, sockets or
// processes: the engine provides only a clock and a discarding stdout. Its one
// door to the outside is the "pml" host module, through which tool calls
// leave as non-blocking start/wait pairs, so `Promise.all` over tools runs
// them concurrently.
package guest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/pml-sandbox/pml/internal/fault"
)

// Options configure an Engine. The zero value is usable.
type Options struct {
	// CacheDir, when set, keeps wazero's compiled machine code on disk so a
	// new process skips the ~0.4 s compile.
	CacheDir string
	// Prepared is how many restored instances are kept ready (default 2).
	// Negative disables the pool: every execution instantiates inline.
	Prepared int
	// Limits are the defaults for every execution; a Request may lower
	// them but never raise them above MaxLimits.
	Limits Limits
	// MaxLimits caps what a Request may ask for (default: DefaultMaxLimits).
	MaxLimits Limits
	// Logger receives engine diagnostics (default: slog.Default()).
	Logger *slog.Logger
	// Wasm overrides the embedded guest binary (tests only).
	Wasm []byte
	// UnsafeNoDeadline turns the guest's deadline polling off (QuickJS's
	// interrupt handler, and the loop check-ins all but), so a runaway
	// script is stopped only when it next reaches the host. It exists for
	// benchmarks that measure what deadline enforcement costs; never set it
	// for real work.
	UnsafeNoDeadline bool
}

// Engine runs executions. It is safe for concurrent use; create one per
// process and Close it on shutdown.
type Engine struct {
	runtime  wazero.Runtime
	compiled wazero.CompiledModule
	snap     *snapshot
	defaults Limits
	max      Limits
	log      *slog.Logger
	wasmHash string
	runFlags uint64 // pml_run flags; bit 0 disables deadline polling (benchmarks only)

	pool     chan api.Module
	refill   chan struct{}
	retire   chan api.Module // used instances, closed off the request path
	stop     chan struct{}
	poolDone sync.WaitGroup

	closeOnce sync.Once
	running   sync.WaitGroup
	mu        sync.Mutex
	closed    bool
}

// New compiles the guest, takes the post-init snapshot and starts the pool.
func New(ctx context.Context, opts Options) (*Engine, error) {
	wasm := opts.Wasm
	if wasm == nil {
		wasm = embeddedWasm
	}
	if len(wasm) == 0 {
		return nil, errors.New("guest: no guest binary embedded; run `make guest` first")
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	sum := sha256.Sum256(wasm)
	e := &Engine{
		defaults: opts.Limits.withDefaults(DefaultLimits()),
		max:      opts.MaxLimits.withDefaults(DefaultMaxLimits()),
		log:      logger,
		wasmHash: hex.EncodeToString(sum[:8]),
		stop:     make(chan struct{}),
	}
	if opts.UnsafeNoDeadline {
		e.runFlags = 1
	}
	e.defaults = e.defaults.capped(e.max)

	cfg := wazero.NewRuntimeConfig().
		WithMemoryLimitPages(memoryPages(e.max.MemoryBytes)).
		WithCloseOnContextDone(false) // deadlines are enforced by the guest's check-ins; see limits.go
	if opts.CacheDir != "" {
		cache, err := wazero.NewCompilationCacheWithDir(opts.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("guest: compilation cache %s: %w", opts.CacheDir, err)
		}
		cfg = cfg.WithCompilationCache(cache)
	}
	e.runtime = wazero.NewRuntimeWithConfig(ctx, cfg)
	if err := e.instantiateHostModules(ctx); err != nil {
		_ = e.runtime.Close(ctx)
		return nil, err
	}
	compiled, err := e.runtime.CompileModule(ctx, wasm)
	if err != nil {
		_ = e.runtime.Close(ctx)
		return nil, fmt.Errorf("guest: compile: %w", err)
	}
	e.compiled = compiled
	if e.snap, err = takeSnapshot(ctx, e.runtime, compiled); err != nil {
		_ = e.runtime.Close(ctx)
		return nil, err
	}

	e.retire = make(chan api.Module, 64)
	e.poolDone.Add(1)
	go e.retireLoop()

	prepared := opts.Prepared
	if prepared == 0 {
		prepared = 2
	}
	if prepared > 0 {
		e.pool = make(chan api.Module, prepared)
		e.refill = make(chan struct{}, 1)
		e.poolDone.Add(1)
		go e.fillPool()
	}
	return e, nil
}

// WasmHash identifies the guest binary (first 8 bytes of its sha256, hex).
func (e *Engine) WasmHash() string { return e.wasmHash }

// Close stops the pool, waits for running executions and frees the runtime.
func (e *Engine) Close(ctx context.Context) error {
	var err error
	e.closeOnce.Do(func() {
		e.mu.Lock()
		e.closed = true
		e.mu.Unlock()
		close(e.stop)
		e.running.Wait()
		close(e.retire)
		e.poolDone.Wait()
		if e.pool != nil {
			close(e.pool)
			for m := range e.pool {
				_ = m.Close(ctx)
			}
		}
		err = e.runtime.Close(ctx)
	})
	return err
}

// fillPool keeps the pool full. It runs on its own goroutine so that
// restoring instances overlaps with executions instead of preceding them.
func (e *Engine) fillPool() {
	defer e.poolDone.Done()
	ctx := context.Background()
	for {
		for len(e.pool) < cap(e.pool) {
			m, err := e.snap.restore(ctx, e.runtime, e.compiled)
			if err != nil {
				e.log.Error("guest: preparing an instance failed", "err", err)
				break
			}
			select {
			case e.pool <- m:
			case <-e.stop:
				_ = m.Close(ctx)
				return
			}
		}
		select {
		case <-e.refill:
		case <-e.stop:
			return
		}
	}
}

// retireLoop closes used instances. Unmapping an instance's memory costs
// tens of microseconds; doing it here keeps that off the request path.
func (e *Engine) retireLoop() {
	defer e.poolDone.Done()
	ctx := context.Background()
	for m := range e.retire {
		_ = m.Close(ctx)
	}
}

// discard retires a used instance; it is never run again.
func (e *Engine) discard(m api.Module) {
	select {
	case e.retire <- m:
	default:
		_ = m.Close(context.Background())
	}
}

// instance returns a fresh restored instance, from the pool when one is
// ready.
func (e *Engine) instance(ctx context.Context) (api.Module, error) {
	if e.pool != nil {
		select {
		case m := <-e.pool:
			select {
			case e.refill <- struct{}{}:
			default:
			}
			return m, nil
		default:
			select {
			case e.refill <- struct{}{}:
			default:
			}
		}
	}
	return e.snap.restore(ctx, e.runtime, e.compiled)
}

// Run executes one request in a fresh sandbox. It always returns a Result;
// failures are in Result.Err.
func (e *Engine) Run(ctx context.Context, req Request) *Result {
	start := time.Now()
	res := &Result{ExecutionID: req.ExecutionID, StartedAt: start, Logs: []LogEntry{}, Calls: nil}
	if res.ExecutionID == "" {
		res.ExecutionID = NewExecutionID()
	}
	finish := func(err *fault.Error) *Result {
		res.Err = err
		res.OK = err == nil
		res.Duration = time.Since(start)
		return res
	}

	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return finish(fault.New(fault.Unavailable, "the sandbox engine is shut down"))
	}
	e.running.Add(1)
	e.mu.Unlock()
	defer e.running.Done()

	limits := req.Limits.withDefaults(e.defaults).capped(e.max)
	if len(req.Code) > limits.CodeBytes {
		return finish(fault.Limitf(fault.LimitCodeSize, "code is %d bytes; the limit is %d", len(req.Code), limits.CodeBytes))
	}
	cfg, err := encodeConfig(req, limits)
	if err != nil {
		return finish(err)
	}

	mod, ierr := e.instance(ctx)
	if ierr != nil {
		return finish(fault.Wrap(fault.SandboxError, ierr, "preparing a sandbox"))
	}
	// Discarded on every path: an instance is never reused.
	defer e.discard(mod)

	x := newExecution(ctx, e, req, limits, res, start)
	defer x.shutdown()
	doc, rerr := x.run(mod, cfg, rand.Int64())
	res.Calls = x.traceCalls()
	res.Logs, res.LogsTruncated = x.takeLogs()
	if rerr != nil {
		return finish(rerr)
	}
	if len(doc.Value) > limits.ResultBytes {
		return finish(fault.Limitf(fault.LimitResultBytes, "result is %d bytes; the limit is %d", len(doc.Value), limits.ResultBytes))
	}
	res.Value = doc.Value
	return finish(doc.Error)
}
