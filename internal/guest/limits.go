package guest

import "time"

// Deadline enforcement. The guest checks in with the host (pml.poll) from
// QuickJS's interrupt handler and from every loop's back edges, at most every
// pollBudget iterations (guest-runtime/loopcheck.awk), and every other host
// call is a check-in too. Once the deadline has passed, the next check-in
// traps: the run ends at once and nothing in the script can catch or delay
// it. Check-ins also let Go's scheduler and garbage collector in (see
// yieldEvery). wazero's WithCloseOnContextDone would stop runaway code as
// well, but makes CPU-bound JS several times slower and never lets the
// goroutine be preempted before the deadline, so it is off.

// DefaultLimits returns the limits that apply when neither the engine options
// nor the request say otherwise.
func DefaultLimits() Limits {
	return Limits{
		Timeout:        30 * time.Second,
		MemoryBytes:    64 << 20,
		StackBytes:     768 << 10,
		CodeBytes:      256 << 10, // execution.DefaultCodeBytes: internal/js/script's TestDefaultCodeBytes holds them equal
		ToolCalls:      1000,
		InFlight:       16,
		LogBytes:       1 << 20,
		LogEntries:     10_000,
		ResultBytes:    1 << 20,
		ToolArgsBytes:  1 << 20,
		ToolResultSize: 4 << 20,
	}
}

// DefaultMaxLimits returns the caps on what a request may ask for.
func DefaultMaxLimits() Limits {
	return Limits{
		Timeout:        15 * time.Minute,
		MemoryBytes:    512 << 20,
		StackBytes:     900 << 10, // the guest links a 1 MiB stack; keep room for C frames
		CodeBytes:      1 << 20,
		ToolCalls:      10000,
		InFlight:       64,
		LogBytes:       8 << 20,
		LogEntries:     100_000,
		ResultBytes:    6 << 20, // a synchronous Lambda response is at most 6 MB
		ToolArgsBytes:  6 << 20,
		ToolResultSize: 32 << 20,
	}
}

// LogEntryOverhead is what every console line costs against LogBytes on
// top of its text, so that a flood of empty lines is bounded like any other
// output (each entry is a Go struct and a JSON object downstream).
const LogEntryOverhead = 64

// maxTimers bounds setTimeout calls per execution, so a loop of timers
// cannot pile up host goroutines. The prelude throws LIMIT_EXCEEDED
// (timers) from the setTimeout that would cross it; the host refuses past
// it too, for a guest whose prelude did not.
const maxTimers = 10000

// MaxJSONDepth bounds how deeply the arrays and objects of what a script
// hands the host (its result, a tool call's arguments, an error it
// rethrows) may nest. Past it the value is the script's fault, LIMIT_EXCEEDED
// (json_depth), never the host's: Go's decoder stops at 10,000 levels (a
// deeper result was SANDBOX_ERROR), every front wraps the value a few levels
// deeper again, and decoders in other languages give up sooner (Python's
// near 1,000). Real data nests a few dozen levels at most.
const MaxJSONDepth = 1000

// jsonDepth returns how deeply b's arrays and objects nest (0 for a
// scalar), counting brackets outside strings. It does not validate b. A
// value nested d deep is at least 2d bytes long, so callers skip values
// shorter than that.
func jsonDepth(b []byte) int {
	depth, deepest := 0, 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		case '[', '{':
			depth++
			deepest = max(deepest, depth)
		case ']', '}':
			depth--
		}
	}
	return deepest
}

// withDefaults fills zero fields from d.
func (l Limits) withDefaults(d Limits) Limits {
	pick := func(v, dv int64) int64 {
		if v <= 0 {
			return dv
		}
		return v
	}
	return Limits{
		Timeout:        time.Duration(pick(int64(l.Timeout), int64(d.Timeout))),
		MemoryBytes:    pick(l.MemoryBytes, d.MemoryBytes),
		StackBytes:     pick(l.StackBytes, d.StackBytes),
		CodeBytes:      int(pick(int64(l.CodeBytes), int64(d.CodeBytes))),
		ToolCalls:      int(pick(int64(l.ToolCalls), int64(d.ToolCalls))),
		InFlight:       int(pick(int64(l.InFlight), int64(d.InFlight))),
		LogBytes:       int(pick(int64(l.LogBytes), int64(d.LogBytes))),
		LogEntries:     int(pick(int64(l.LogEntries), int64(d.LogEntries))),
		ResultBytes:    int(pick(int64(l.ResultBytes), int64(d.ResultBytes))),
		ToolArgsBytes:  int(pick(int64(l.ToolArgsBytes), int64(d.ToolArgsBytes))),
		ToolResultSize: int(pick(int64(l.ToolResultSize), int64(d.ToolResultSize))),
	}
}

// capped lowers every field of l to at most m's.
func (l Limits) capped(m Limits) Limits {
	lo := func(v, mv int64) int64 { return min(v, mv) }
	return Limits{
		Timeout:        time.Duration(lo(int64(l.Timeout), int64(m.Timeout))),
		MemoryBytes:    lo(l.MemoryBytes, m.MemoryBytes),
		StackBytes:     lo(l.StackBytes, m.StackBytes),
		CodeBytes:      int(lo(int64(l.CodeBytes), int64(m.CodeBytes))),
		ToolCalls:      int(lo(int64(l.ToolCalls), int64(m.ToolCalls))),
		InFlight:       int(lo(int64(l.InFlight), int64(m.InFlight))),
		LogBytes:       int(lo(int64(l.LogBytes), int64(m.LogBytes))),
		LogEntries:     int(lo(int64(l.LogEntries), int64(m.LogEntries))),
		ResultBytes:    int(lo(int64(l.ResultBytes), int64(m.ResultBytes))),
		ToolArgsBytes:  int(lo(int64(l.ToolArgsBytes), int64(m.ToolArgsBytes))),
		ToolResultSize: int(lo(int64(l.ToolResultSize), int64(m.ToolResultSize))),
	}
}

// memoryPages is the wasm memory cap for a JS heap limit: the heap plus the
// 1 MiB stack, static data and allocator slack.
func memoryPages(heap int64) uint32 {
	const page = 64 << 10
	return uint32((heap + heap/4 + 16<<20 + page - 1) / page)
}
