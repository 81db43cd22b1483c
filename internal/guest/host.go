package guest

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/tetratelabs/wazero/api"
)

var (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64
)

// WASI errno values the stubs return.
const (
	errnoSuccess = 0
	errnoBadf    = 8
	errnoInval   = 28
)

// instantiateHostModules defines the two modules the guest imports: "pml",
// its door to tools and the console, and a minimal
// "wasi_snapshot_preview1" holding only what wasi-libc links for QuickJS: a
// clock, and file-descriptor calls that write nowhere. There is deliberately
// no file system, environment, argv, random source or socket.
func (e *Engine) instantiateHostModules(ctx context.Context) error {
	pml := e.runtime.NewHostModuleBuilder("pml")
	fn := func(name string, f api.GoModuleFunc, params, results []api.ValueType) {
		pml.NewFunctionBuilder().WithGoModuleFunction(f, params, results).Export(name)
	}
	fn("start_call", hostStartCall, []api.ValueType{i32, i32, i32, i32, i32}, []api.ValueType{i32})
	fn("log", hostLog, []api.ValueType{i32, i32, i32}, []api.ValueType{i32})
	fn("fault", hostFault, []api.ValueType{i32, i32}, []api.ValueType{i32})
	fn("poll", hostPoll, nil, []api.ValueType{i32})
	fn("resolve", hostResolve, []api.ValueType{i32, i32, i32, i32}, []api.ValueType{i32})
	fn("out_of_memory", hostOutOfMemory, []api.ValueType{i32}, nil)
	defineProfileImports(pml)
	if _, err := pml.Instantiate(ctx); err != nil {
		return fmt.Errorf("guest: host module pml: %w", err)
	}

	wasi := e.runtime.NewHostModuleBuilder("wasi_snapshot_preview1")
	wfn := func(name string, f api.GoModuleFunc, params, results []api.ValueType) {
		wasi.NewFunctionBuilder().WithGoModuleFunction(f, params, results).Export(name)
	}
	wfn("clock_time_get", wasiClockTimeGet, []api.ValueType{i32, i64, i32}, []api.ValueType{i32})
	wfn("fd_write", wasiFdWrite, []api.ValueType{i32, i32, i32, i32}, []api.ValueType{i32})
	wfn("fd_close", func(_ context.Context, _ api.Module, st []uint64) { st[0] = errnoBadf }, []api.ValueType{i32}, []api.ValueType{i32})
	wfn("fd_seek", func(_ context.Context, _ api.Module, st []uint64) { st[0] = errnoBadf }, []api.ValueType{i32, i64, i32, i32}, []api.ValueType{i32})
	if _, err := wasi.Instantiate(ctx); err != nil {
		return fmt.Errorf("guest: host module wasi: %w", err)
	}
	return nil
}

type execKey struct{}

// execFrom returns the run a host call belongs to, and ends the run with a
// trap when it must stop: every contact with the host is a check-in, so a
// script past its deadline never runs another instruction of its own.
// Outside a run (pml_init, before the snapshot) there is no execution.
func execFrom(ctx context.Context) *execution {
	x, _ := ctx.Value(execKey{}).(*execution)
	if x != nil {
		x.checkIn()
	}
	return x
}

// readString copies a guest string out of linear memory.
func readString(m api.Module, ptr, n uint32) (string, bool) {
	b, ok := m.Memory().Read(ptr, n)
	if !ok {
		return "", false
	}
	return string(b), true
}

// inRun is execFrom for the imports that only make sense inside a run.
func inRun(ctx context.Context) *execution {
	x := execFrom(ctx)
	if x == nil {
		panic(errStop) // a guest calling out before any run started
	}
	return x
}

func hostStartCall(ctx context.Context, m api.Module, st []uint64) {
	x := inRun(ctx)
	args, ok := m.Memory().Read(uint32(st[1]), uint32(st[2]))
	if !ok {
		x.abort("start_call with arguments out of range")
	}
	line, col := userSite(int32(st[3]), int32(st[4]))
	st[0] = uint64(uint32(x.startCall(int32(st[0]), args, line, col)))
}

// wrapCols is how many columns the guest's wrapper takes before the
// script's first line (glue.c's heads, prelude.js's WRAP_COLS).
const wrapCols = 24

// userSite turns a call site as QuickJS reports it (1-based line and
// column, in characters, of the wrapped script) into the script's own
// coordinates; 0, 0 when unknown.
func userSite(line, col int32) (int, int) {
	if line == 1 {
		col -= wrapCols
	}
	if line < 1 || col < 1 {
		return 0, 0
	}
	return int(line), int(col)
}

func hostLog(ctx context.Context, m api.Module, st []uint64) {
	x := inRun(ctx)
	msg, ok := readString(m, uint32(st[1]), uint32(st[2]))
	if !ok {
		x.abort("log with a message out of range")
	}
	if x.log(int32(st[0]), msg) {
		st[0] = 1
	} else {
		st[0] = 0
	}
}

func hostFault(ctx context.Context, m api.Module, st []uint64) {
	x := inRun(ctx)
	doc, ok := m.Memory().Read(uint32(st[0]), uint32(st[1]))
	if !ok {
		x.abort("fault with a document out of range")
	}
	st[0] = uint64(uint32(x.registerFault(doc)))
}

func hostResolve(ctx context.Context, m api.Module, st []uint64) {
	x := inRun(ctx)
	sl, tl := uint32(st[1]), uint32(st[3])
	if sl > MaxResolveName || tl > MaxResolveName {
		st[0] = uint64(uint32(0xFFFFFFFF)) // -1: no such name
		return
	}
	server, ok1 := readString(m, uint32(st[0]), sl)
	tool, ok2 := readString(m, uint32(st[2]), tl)
	if !ok1 || !ok2 {
		x.abort("resolve with a name out of range")
	}
	st[0] = uint64(uint32(x.resolve(server, tool)))
}

// hostOutOfMemory ends the run: the guest's JS heap could not grow (see
// execution.outOfMemory). It never returns to the guest.
func hostOutOfMemory(ctx context.Context, _ api.Module, st []uint64) {
	inRun(ctx).outOfMemory(uint32(st[0]))
}

// pollBudget is how many loop iterations the guest runs between check-ins
// (guest-runtime/loopcheck.awk). The cheapest iteration is a few
// nanoseconds and a check-in ~50 ns, so this costs at most ~1% on the
// tightest loops while an iteration as slow as 100 ns still checks in every
// millisecond: often enough for a prompt stop, and for Go's scheduler and
// garbage collector, which can only stop a goroutine in Go code.
const pollBudget = 10_000

// hostPoll is the guest's check-in: it traps when the run must stop, and
// lets other goroutines run when this one has computed for a while.
func hostPoll(ctx context.Context, _ api.Module, st []uint64) {
	st[0] = pollBudget
	x, _ := ctx.Value(execKey{}).(*execution)
	if x == nil {
		return // pml_init, before the snapshot
	}
	if x.engine.runFlags&1 != 0 {
		st[0] = math.MaxInt32 // benchmarks measuring the cost of deadlines
	}
	x.checkIns++
	now := time.Now()
	x.checkInAt(now)
	// The script is still computing: calls it started meanwhile begin now
	// rather than when it next waits.
	x.startPending(false, nil)
	x.maybeYield(now)
}

func wasiClockTimeGet(_ context.Context, m api.Module, st []uint64) {
	var now int64
	switch uint32(st[0]) {
	case 0: // realtime
		now = time.Now().UnixNano()
	case 1, 2, 3: // monotonic, process and thread CPU time
		now = int64(time.Since(processStart)) + 1
	default:
		st[0] = errnoInval
		return
	}
	if !m.Memory().WriteUint64Le(uint32(st[2]), uint64(now)) {
		st[0] = errnoInval
		return
	}
	st[0] = errnoSuccess
}

// processStart anchors the guest's monotonic clock. It is set once and never
// written again.
var processStart = time.Now()

// wasiFdWrite accepts and discards output: QuickJS writes to stderr only on
// fatal errors, and the guest's console goes through pml.log instead.
func wasiFdWrite(_ context.Context, m api.Module, st []uint64) {
	mem := m.Memory()
	iovs, n, out := uint32(st[1]), uint32(st[2]), uint32(st[3])
	var total uint32
	for i := uint32(0); i < n; i++ {
		l, ok := mem.ReadUint32Le(iovs + i*8 + 4)
		if !ok {
			st[0] = errnoInval
			return
		}
		total += l
	}
	if !mem.WriteUint32Le(out, total) {
		st[0] = errnoInval
		return
	}
	st[0] = errnoSuccess
}
