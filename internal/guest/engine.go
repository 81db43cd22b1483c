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
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/trace"
)

// Options configure an Engine. The zero value is usable.
type Options struct {
	// CacheDir, when set, keeps wazero's compiled machine code on disk so a
	// new process skips the ~0.4 s compile.
	CacheDir string
	// Prepared is how many instances are kept ready (default 2), counting
	// the ones in use that will come back reset. Negative disables the
	// pool: every execution instantiates inline and nothing is reused.
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
	// imageLoaded: the snapshot came from the cache directory.
	imageLoaded bool
	runFlags    uint64 // pml_run flags; bit 0 disables deadline polling (benchmarks only)

	pool     chan *instance
	refill   chan struct{}
	retire   chan retiring // used instances, reset or closed off the request path
	stop     chan struct{}
	poolDone sync.WaitGroup

	prepared int          // instances to keep ready, counting those in use
	inUse    atomic.Int64 // instances handed to runs and not yet retired
	// returning counts instances queued for the retire loop or being reset
	// by it: a run that finds the pool empty waits for one of those (a
	// reset takes tens of microseconds) before it instantiates anew (about
	// a millisecond).
	returning atomic.Int64
	stats     struct{ created, reused, closed atomic.Int64 }
	// diffScratch keeps the diff buffers (*diffScratch) of one
	// suspension or resume for the next.
	diffScratch sync.Pool
	// pageSeed hashes the pages of a restored session's state (groups.go).
	pageSeed uint64

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
	sum := wasmSum(wasm)
	e := &Engine{
		defaults: opts.Limits.withDefaults(DefaultLimits()),
		max:      opts.MaxLimits.withDefaults(DefaultMaxLimits()),
		log:      logger,
		wasmHash: hex.EncodeToString(sum[:8]),
		stop:     make(chan struct{}),
	}
	e.diffScratch.New = func() any { return new(diffScratch) }
	e.pageSeed = rand.Uint64()
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
	if err := checkExports(compiled); err != nil {
		_ = e.runtime.Close(ctx)
		return nil, err
	}
	e.compiled = compiled
	if e.snap, err = e.openSnapshot(ctx, opts.CacheDir, sum); err != nil {
		_ = e.runtime.Close(ctx)
		return nil, err
	}

	e.retire = make(chan retiring, 64)
	e.poolDone.Add(1)
	go e.retireLoop()

	prepared := opts.Prepared
	if prepared == 0 {
		prepared = 2
	}
	if prepared > 0 {
		// Reset instances wait in the pool up to maxPooled: an idle one
		// over the copy-on-write image holds no private pages, so keeping
		// more than are prepared costs little and saves instantiating
		// after bursts of concurrent runs.
		e.prepared = prepared
		e.pool = make(chan *instance, max(prepared, maxPooled))
		e.refill = make(chan struct{}, 1)
		e.poolDone.Add(1)
		go e.fillPool()
	}
	return e, nil
}

// WasmHash identifies the guest binary (first 8 bytes of its sha256, hex).
func (e *Engine) WasmHash() string { return e.wasmHash }

// openSnapshot loads the post-init image an earlier process kept in the
// cache directory (imagefile.go), or runs the guest's initialisation and
// keeps its image there for the next one. A missing, unreadable or stale
// file only costs the initialisation.
func (e *Engine) openSnapshot(ctx context.Context, cacheDir string, sum [32]byte) (*snapshot, error) {
	path := ""
	if cacheDir != "" {
		path = imagePath(cacheDir, sum)
	}
	if path != "" {
		s, err := loadImageFile(path, sum, memoryPages(e.max.MemoryBytes))
		if err == nil {
			e.imageLoaded = true
			return s, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			e.log.Warn("guest: the cached post-init image is not used", "err", err)
		}
	}
	s, err := takeSnapshot(ctx, e.runtime, e.compiled)
	if err != nil || path == "" || s.img == nil {
		return s, err
	}
	if err := saveImageFile(path, s, sum); err != nil {
		e.log.Warn("guest: keeping the post-init image failed", "err", err)
	}
	return s, nil
}

// ImageLoaded reports whether the post-init image came from the cache
// directory, and the guest's initialisation did not run in this process.
func (e *Engine) ImageLoaded() bool { return e.imageLoaded }

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
			for in := range e.pool {
				in.close(ctx)
			}
		}
		err = e.runtime.Close(ctx)
		e.snap.close()
	})
	return err
}

// fillPool keeps the pool full. It runs on its own goroutine so that
// restoring instances overlaps with executions instead of preceding them.
func (e *Engine) fillPool() {
	defer e.poolDone.Done()
	ctx := context.Background()
	for {
		// Instances in use come back reset (most of them): count them as
		// ready, or every run would also pay for a new one.
		for len(e.pool)+int(e.inUse.Load()) < e.prepared {
			in, err := e.newInstance(ctx)
			if err != nil {
				e.log.Error("guest: preparing an instance failed", "err", err)
				break
			}
			select {
			case e.pool <- in:
			case <-e.stop:
				e.closeInstance(ctx, in)
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

// retiring is a used instance on its way back to the pool or out.
type retiring struct {
	in *instance
	// reusable: the run ended without a trap, so the instance may be reset
	// (snapshot.reset checks the rest).
	reusable bool
}

// retireLoop takes used instances off the request path: one the snapshot
// can reset goes back to the pool as good as new (resetting is a madvise,
// much cheaper than a new instance); any other is closed (unmapping costs
// tens of microseconds).
func (e *Engine) retireLoop() {
	defer e.poolDone.Done()
	ctx := context.Background()
	for r := range e.retire {
		e.inUse.Add(-1)
		markReset(true)
		ok := r.reusable && e.pool != nil && e.snap.reset(r.in)
		markReset(false)
		if ok {
			select {
			case e.pool <- r.in:
				e.stats.reused.Add(1)
				e.returning.Add(-1)
				continue
			default: // the pool is full
			}
		}
		e.returning.Add(-1)
		e.closeInstance(ctx, r.in)
		e.wakeFiller()
	}
}

// release hands a used instance to the retire loop.
func (e *Engine) release(in *instance, reusable bool) {
	e.returning.Add(1)
	select {
	case e.retire <- retiring{in, reusable}:
	default:
		e.returning.Add(-1)
		e.inUse.Add(-1)
		e.closeInstance(context.Background(), in)
		e.wakeFiller()
	}
}

// wakeFiller asks fillPool to look at the pool again.
func (e *Engine) wakeFiller() {
	if e.refill == nil {
		return
	}
	select {
	case e.refill <- struct{}{}:
	default:
	}
}

// returnWait bounds how long a run waits for an instance the retire loop
// is resetting before it instantiates one itself.
const returnWait = time.Millisecond

// maxPooled bounds the reset instances kept for reuse.
const maxPooled = 16

func (e *Engine) newInstance(ctx context.Context) (*instance, error) {
	in, err := e.snap.restore(ctx, e.runtime, e.compiled)
	if err == nil {
		e.stats.created.Add(1)
	}
	return in, err
}

func (e *Engine) closeInstance(ctx context.Context, in *instance) {
	in.close(ctx)
	e.stats.closed.Add(1)
}

// InstanceStats counts the engine's sandbox instances: created new, reset
// and reused, and closed. Tests and benchmarks read it.
type InstanceStats struct{ Created, Reused, Closed int64 }

// CopyOnWrite reports whether instances map the post-init image
// copy-on-write, and so are reset and reused rather than made anew (Linux).
func (e *Engine) CopyOnWrite() bool { return e.snap.img != nil }

// Stats returns the instance counts so far.
func (e *Engine) Stats() InstanceStats {
	return InstanceStats{Created: e.stats.created.Load(), Reused: e.stats.reused.Load(), Closed: e.stats.closed.Load()}
}

// instance returns an instance in the post-init state, from the pool when
// one is ready. It counts as in use until release.
func (e *Engine) instance(ctx context.Context) (*instance, error) {
	e.inUse.Add(1)
	if e.pool != nil {
		select {
		case in := <-e.pool:
			e.wakeFiller()
			return in, nil
		default:
			e.wakeFiller()
		}
		if e.returning.Load() > 0 {
			// Back-to-back runs outpace the retire loop now and then: an
			// instance it is resetting is a far shorter wait than a new one.
			t := time.NewTimer(returnWait)
			select {
			case in := <-e.pool:
				t.Stop()
				return in, nil
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
		}
	}
	in, err := e.newInstance(ctx)
	if err != nil {
		e.inUse.Add(-1)
	}
	return in, err
}

// shutDown answers a run that arrives after Close (a new error each time:
// callers may add to the one they get).
func shutDown() *fault.Error {
	return fault.New(fault.Unavailable, "the sandbox engine is shut down")
}

// enter counts a run as running (Close waits for it), or reports false
// once the engine is shut down; a run that entered calls running.Done.
func (e *Engine) enter() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	e.running.Add(1)
	return true
}

// Run executes one request in a fresh sandbox. It always returns a Result;
// failures are in Result.Err.
func (e *Engine) Run(ctx context.Context, req Request) *Result {
	mark(phaseHostSetup)
	defer mark(phaseNone)
	start := time.Now()
	res := &Result{ExecutionID: req.ExecutionID, StartedAt: start, Logs: []trace.LogEntry{}, Calls: nil}
	if res.ExecutionID == "" {
		res.ExecutionID = trace.NewExecutionID()
	}
	finish := func(err *fault.Error) *Result {
		res.Err = err
		res.OK = err == nil
		res.Duration = time.Since(start)
		return res
	}

	if !e.enter() {
		return finish(shutDown())
	}
	defer e.running.Done()

	limits := req.Limits.withDefaults(e.defaults).capped(e.max)
	if len(req.Code) > limits.CodeBytes {
		return finish(fault.Limitf(fault.LimitCodeSize, "code is %d bytes; the limit is %d", len(req.Code), limits.CodeBytes))
	}
	cfg, err := encodeConfig(req, limits)
	if err != nil {
		return finish(err)
	}
	if req.From != nil && (!req.Session || req.From.GuestHash != e.wasmHash) {
		if !req.Session {
			return finish(fault.New(fault.InvalidRequest, "a sandbox state to continue from is only for a session's execution"))
		}
		return finish(fault.New(fault.ResumeIncompatible, "the session's state was saved by guest build %s; this engine runs %s", req.From.GuestHash, e.wasmHash))
	}

	mark(phaseRestore)
	in, ierr := e.instance(ctx)
	mark(phaseHostSetup)
	if ierr != nil {
		return finish(fault.Wrap(fault.SandboxError, ierr, "preparing a sandbox"))
	}
	in.mem.bind(ctx) // growth, a session's restored memory included, is charged to the caller's MemoryBudget
	var prev *restored
	if req.From != nil {
		var err error
		if prev, err = e.restoreState(in, req.From.Memory); err != nil {
			e.release(in, false)
			return finish(fault.Wrap(fault.SandboxError, err, "restoring the session's sandbox"))
		}
	}
	x := newExecution(ctx, e, req, limits, res, start)
	x.restored = prev
	// Whatever happens, the instance leaves this run: reset for another
	// only if reusable.
	defer func() { e.release(in, x.reusable(res)) }()
	defer x.shutdown()
	in.runs++
	doc, rerr := x.run(in, cfg, rand.Int64())
	return e.finishRun(x, in, res, doc, rerr, finish)
}

// reusable reports whether the instance x ran on may be reset for another
// run (a run, or a resumed one, with result res): only if the guest was
// never trapped or stopped, and its native stack did not grow to the
// limit — a run that recursed that far grew wazero's call stack for the
// instance (Go memory, a few MB, which a reset does not give back), and a
// pool of such instances held tens of MB for as long as they were reused.
// A script that catches the overflow and goes on still leaves one behind:
// bounded by the pool's size.
func (x *execution) reusable(res *Result) bool {
	return !x.stopping && !x.trapped && (res.Err == nil || res.Err.Limit != fault.LimitStack)
}

// finishRun turns the end of a run's stepping into its Result: the output
// document, a failure, or a Suspension.
func (e *Engine) finishRun(x *execution, in *instance, res *Result, doc *outputDoc, rerr *fault.Error, finish func(*fault.Error) *Result) *Result {
	res.CPUTime = max(0, time.Since(res.StartedAt)-x.waited)
	res.checkpoints = x.checkpoints
	if rerr == errSuspend {
		s, err := x.suspension(in)
		res.Calls = x.traceCalls()
		res.Logs, res.LogsTruncated = x.takeLogs()
		if err != nil {
			return finish(err)
		}
		res.Suspended = s
		finish(nil)
		res.OK = false
		return res
	}
	res.Calls = x.traceCalls()
	res.Logs, res.LogsTruncated = x.takeLogs()
	res.Left = Left{Calls: x.inflight, Timers: x.timers}
	if rerr == nil && !time.Now().Before(x.deadline) {
		// The script ended past its deadline with no check-in between (its
		// thread descheduled on a loaded machine, after the last one): the
		// deadline is absolute, so this is its TIMEOUT, not its result.
		rerr = x.lateError()
	}
	if rerr != nil {
		return finish(rerr)
	}
	if len(doc.Value) > x.limits.ResultBytes {
		return finish(fault.Limitf(fault.LimitResultBytes, "result is %d bytes; the limit is %d", len(doc.Value), x.limits.ResultBytes))
	}
	res.Value = doc.Value
	if x.req.Session && doc.Error == nil {
		t := time.Now()
		st, ferr := e.sessionState(in, x.restored)
		res.SaveTime = time.Since(t)
		if ferr != nil {
			return finish(ferr)
		}
		res.State = st
	}
	return finish(doc.Error)
}
