//go:build callgrind

package guest

import (
	"context"
	"os"
	"runtime"
	"strconv"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/pml-sandbox/pml/internal/testutil/callgrind"
)

// A profiling build counts one phase per process: the one
// PML_CALLGRIND_PHASE names (by number, see phase), with callgrind's
// collection off at start. Its instructions are counted on the thread that
// runs it: callgrind's collection state is per thread, so the benchmark
// locks its goroutine to one (the run's phases), and the retire loop
// brackets its reset within one call.
//
// PML_CALLGRIND_PHASE=all counts every phase in one run instead: with
// collection on from the start, each mark ends the phase before it in a
// dump named for it (callgrind.DumpStatsAt), all threads' instructions in
// it (the runs are one at a time, so little else runs meanwhile).
var (
	all      = os.Getenv("PML_CALLGRIND_PHASE") == "all"
	profiled = func() phase {
		n, _ := strconv.Atoi(os.Getenv("PML_CALLGRIND_PHASE"))
		return phase(n)
	}()
	// current is the run goroutine's phase: runs are profiled one at a time.
	current phase
)

// phaseNames name the phases in the dumps.
var phaseNames = [phaseCount]string{"none", "restore", "host set-up", "guest set-up", "compile", "run", "guest result", "host result", "reset"}

// mark enters phase p on the run's goroutine.
func mark(p phase) {
	if all {
		callgrind.DumpStatsAt(phaseNames[current])
		current = p
		return
	}
	if profiled == phaseNone {
		return
	}
	if (current == profiled) != (p == profiled) {
		callgrind.ToggleCollect()
	}
	current = p
}

// markReset brackets a reset on the retire loop's goroutine: true as it
// begins, false once it is done. The goroutine keeps its thread between
// the two, so both toggles reach the same thread's collection state.
func markReset(begin bool) {
	if all {
		if begin {
			callgrind.DumpStatsAt(phaseNames[phaseNone])
		} else {
			callgrind.DumpStatsAt(phaseNames[phaseReset])
		}
		return
	}
	if profiled != phaseReset {
		return
	}
	if begin {
		runtime.LockOSThread()
	}
	callgrind.ToggleCollect()
	if !begin {
		runtime.UnlockOSThread()
	}
}

// defineProfileImports adds pml.mark(phase), through which a guest built
// with PML_GUEST_PROFILE=1 marks its phases.
func defineProfileImports(b wazero.HostModuleBuilder) {
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(_ context.Context, _ api.Module, st []uint64) {
		mark(phase(int32(st[0])))
	}), []api.ValueType{api.ValueTypeI32}, nil).Export("mark")
}
