package guest

import (
	"context"
	"errors"
	"runtime"
	"time"
)

// Check-ins: every contact of the guest with the host (an import, and the
// periodic pml.poll) is where a run past its deadline is trapped, and where
// a long computation lets other goroutines have its thread.

// shortenDeadline moves a resumed run's deadline back by the running time
// it had already used: waiting while suspended is free, running is not.
func (x *execution) shortenDeadline() {
	d := x.start.Add(x.limits.Timeout - x.used)
	if d.Before(x.deadline) {
		x.deadline = d
		x.unwatch()
		x.cancel()
		x.ctx, x.cancel = context.WithDeadline(x.parent, d)
		x.unwatch = context.AfterFunc(x.ctx, func() { x.expired.Store(true) })
	}
}

// interrupted reports whether the run must stop now.
func (x *execution) interrupted() bool {
	return x.interruptedAt(time.Now())
}

func (x *execution) interruptedAt(now time.Time) bool {
	return !now.Before(x.deadline) || x.ctx.Err() != nil
}

// errStop is the panic that ends a run at the guest's next contact with the
// host. wazero turns it into a trap that unwinds the guest without running
// any more of its code: unlike a JS exception, nothing in the script can
// catch it, and it needs no guest memory (a script at its heap limit would
// otherwise get a catchable out-of-memory error in its place).
var errStop = errors.New("guest: the run must stop")

// checkIn traps the guest when the run must stop.
func (x *execution) checkIn() {
	if x.stopping || x.expired.Load() {
		x.stopping = true
		panic(errStop)
	}
}

// checkInAt is checkIn with the clock read, for the periodic check-ins
// (pml.poll), which also catch a deadline whose watch has not fired yet.
func (x *execution) checkInAt(now time.Time) {
	if !x.stopping && !x.expired.Load() && !x.interruptedAt(now) {
		return
	}
	x.stopping = true
	panic(errStop)
}

// yieldEvery is how long a run computes before it lets other goroutines
// have its thread. Go preempts a goroutine running Go code at any
// instruction, but one inside compiled wasm only at its next host call, and
// the runtime asks for that only every 10 ms: with every CPU running a
// busy script, a request handler or a garbage collection phase would wait
// that long per step. Yielding at check-ins keeps them moving.
const yieldEvery = time.Millisecond

// maybeYield is called at check-ins.
func (x *execution) maybeYield(now time.Time) {
	if now.Sub(x.lastYield) >= yieldEvery {
		x.lastYield = now
		runtime.Gosched()
	}
}
