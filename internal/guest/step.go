package guest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pml-sandbox/pml/internal/fault"
)

// Host-driven stepping: the guest never blocks inside an import. pml_run
// and pml_resume return as soon as the script waits for the host; the host
// waits for the next answer and hands it in, until the guest returns its
// output document.

// outputDoc is what pml_run returns.
type outputDoc struct {
	OK    bool            `json:"ok"`
	Value json.RawMessage `json:"value"`
	Error *fault.Error    `json:"-"`
	// RawError is the failure as the guest reported it, checked by
	// verifyFailure before it becomes Error.
	RawError json.RawMessage `json:"error"`
}

// run calls pml_run on a fresh instance and decodes its answer.
func (x *execution) run(in *instance, cfg []byte, seed int64) (*outputDoc, *fault.Error) {
	ctx := context.WithValue(x.ctx, execKey{}, x)
	var cfgPtr uint32
	if len(cfg) > 0 { // none: the snapshot's defaults (see encodeConfig)
		var ferr *fault.Error
		if cfgPtr, ferr = x.put(ctx, in, cfg, "loading the configuration"); ferr != nil {
			return nil, ferr
		}
	}
	codePtr, ferr := x.put(ctx, in, []byte(x.req.Code), "loading the code")
	if ferr != nil {
		return nil, ferr
	}
	flags := x.engine.runFlags
	if x.req.ArgsDeclared {
		flags |= flagNoArgsParam
	}
	if x.req.Session {
		flags |= flagSession
	}
	ret, err := in.fn(exRun).Call(ctx,
		uint64(cfgPtr), uint64(len(cfg)), uint64(codePtr), uint64(len(x.req.Code)),
		uint64(seed), uint64(x.limits.MemoryBytes), uint64(x.limits.StackBytes), flags)
	mark(phaseHostResult)
	if err != nil {
		return nil, x.trapError(err)
	}
	if x.req.Session {
		// The realm lives on into the session's next execution: what it
		// no longer needs goes back to its heap (a fresh sandbox's is
		// thrown away whole).
		if err := x.release(ctx, in, cfgPtr, codePtr); err != nil {
			return nil, err
		}
	}
	return x.drive(ctx, in, int64(ret[0]))
}

// put copies b into a new buffer of the guest's, followed by a NUL
// (QuickJS's parsers need one after the text), and returns its address.
// The guest's allocator checks in on its loops, so a deadline that passed
// before the script began (a loaded machine, a short timeout) ends the run
// here, and that is the run's TIMEOUT (or the caller's cause), not a
// SANDBOX_ERROR.
func (x *execution) put(ctx context.Context, in *instance, b []byte, what string) (uint32, *fault.Error) {
	r, err := in.fn(exAlloc).Call(ctx, uint64(len(b)+1))
	if err != nil {
		if x.stopping || x.stopErr != nil || x.interrupted() {
			return 0, x.trapError(err)
		}
		return 0, fault.Wrap(fault.SandboxError, err, what)
	}
	p := uint32(r[0])
	if p == 0 || !in.mod.Memory().Write(p, b) || !in.mod.Memory().WriteByte(p+uint32(len(b)), 0) {
		return 0, fault.New(fault.SandboxError, "%s: guest allocation failed", what)
	}
	return p, nil
}

// pml_run's flags (glue.c): bit 0 is the engine's own (deadline polling
// off).
const (
	flagNoArgsParam = 2 // the code declares its own `args`
	flagSession     = 4 // an execution of a session
)

// release frees guest buffers the run is done with (a session's: see run).
func (x *execution) release(ctx context.Context, in *instance, ptrs ...uint32) *fault.Error {
	for _, p := range ptrs {
		if _, err := in.fn(exFree).Call(ctx, uint64(p)); err != nil {
			return x.trapError(err)
		}
	}
	return nil
}

// drive carries a started run on from the guest's last answer (ret, what
// pml_run or pml_resume returned): host-driven stepping. While the script
// waits for a call, drive waits for an answer and hands it in with
// pml_resume, until the guest returns its output document — or every call
// the script waits for is parked, and the run suspends (errSuspend).
func (x *execution) drive(ctx context.Context, in *instance, ret int64) (*outputDoc, *fault.Error) {
	mod := in.mod
	x.in = in
	for ret == waiting {
		c, ferr := x.next(in)
		if ferr != nil {
			return nil, ferr
		}
		// Most answers fit the guest's static inbox, written without a
		// call; a longer one gets a buffer the guest allocates.
		p := x.engine.snap.inbox
		if len(c.data) >= inboxSize {
			r, err := in.fn(exInbox).Call(ctx, uint64(len(c.data)))
			if err != nil {
				return nil, x.trapError(err)
			}
			p = uint32(r[0])
		}
		if p != 0 && !mod.Memory().Write(p, c.data) {
			return nil, fault.New(fault.SandboxError, "the sandbox's inbox is out of range")
		}
		rs, err := in.fn(exResume).Call(ctx, uint64(uint32(c.id)), boolArg(c.ok), uint64(len(c.data)))
		if err != nil {
			return nil, x.trapError(err)
		}
		ret = int64(rs[0])
	}
	ptr, n := uint32(uint64(ret)>>32), uint32(ret)
	if ptr == 0 {
		return nil, fault.Limitf(fault.LimitMemory, "the sandbox ran out of memory producing its result")
	}
	raw, ok := mod.Memory().Read(ptr, n)
	if !ok {
		return nil, fault.New(fault.SandboxError, "the sandbox returned an out-of-range result")
	}
	if ferr := checkOutputDepth(raw); ferr != nil {
		return nil, ferr
	}
	var doc outputDoc
	err := json.Unmarshal(raw, &doc)
	if x.req.Session {
		if ferr := x.release(ctx, in, ptr); ferr != nil {
			return nil, ferr
		}
	}
	if err != nil {
		return nil, fault.Wrap(fault.SandboxError, err, "the sandbox returned malformed output")
	}
	if len(doc.RawError) > 0 && string(doc.RawError) != "null" {
		doc.Error = x.verifyFailure(doc.RawError)
	}
	if !doc.OK && doc.Error == nil {
		doc.Error = fault.New(fault.SandboxError, "the sandbox failed without an error")
	}
	if doc.OK {
		doc.Value = append(json.RawMessage(nil), doc.Value...) // detach from guest memory
	}
	return &doc, nil
}

// checkOutputDepth refuses an output document whose value nests deeper
// than MaxJSONDepth: the script's result, or (in a failure report) the
// details of a host error the script replaced. The prelude writes the
// document as {"ok":true,"value":V} or {"ok":false,"error":{…}}: one level
// around a result, two around an error's details.
func checkOutputDepth(raw []byte) *fault.Error {
	if len(raw) <= 2*MaxJSONDepth {
		return nil
	}
	d := jsonDepth(raw)
	switch {
	case bytes.HasPrefix(raw, []byte(`{"ok":true,`)) && d-1 > MaxJSONDepth:
		return fault.Limitf(fault.LimitJSONDepth, "the result nests %d levels deep; the limit is %d", d-1, MaxJSONDepth)
	case d-2 > MaxJSONDepth:
		return fault.Limitf(fault.LimitJSONDepth, "the script's error nests %d levels deep (the limit is %d), so it cannot be reported", d-2, MaxJSONDepth)
	}
	return nil
}

// errSuspend ends a run's stepping when everything it waits for is parked;
// the engine turns the run into a Suspension.
var errSuspend = &fault.Error{Code: "SUSPENDED", Message: "every call the script waits for awaits a decision"}

// waiting is what pml_run and pml_resume return while the script waits for
// a call (glue.c's PML_WAITING).
const waiting = -1

func boolArg(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// next returns the next answer for the guest, waiting for one when none is
// ready. The run cannot go on when nothing is in flight (DEADLOCK) or its
// deadline has passed (TIMEOUT).
func (x *execution) next(in *instance) (completion, *fault.Error) {
	for {
		c, ferr := x.nextAnswer(in)
		if ferr != nil || c.park == nil {
			return c, ferr
		}
		// A call that parked on its tool's question still counts as in
		// flight, as every parked call does; the guest hears nothing.
		x.parked = append(x.parked, *c.park)
	}
}

// nextAnswer is next's one step: the next completion, which may be a call
// that parked (completion.park) rather than an answer.
func (x *execution) nextAnswer(in *instance) (completion, *fault.Error) {
	// A wait point: the checkpoint due here is taken (and the effects
	// held for it released) before anything starts.
	x.checkpointAtWait()
	x.startPending(true, in)
	var c completion
	switch {
	case len(x.ready) > 0:
		c = x.ready[0]
		x.ready = x.ready[1:]
	case x.inflight == 0 && x.timers == 0:
		return c, fault.New(fault.Deadlock, "the script is waiting for a promise that nothing can settle (no tool call is in flight)")
	case x.inflight == len(x.parked) && x.timers == 0:
		// Every call the script waits for waits for a decision: nothing
		// can happen until one is made.
		return c, errSuspend
	default:
		w := time.Now()
		x.stacks.begin(in)
		select {
		case c = <-x.done:
		case <-x.ctx.Done():
			x.stacks.end()
			x.waited += time.Since(w)
			return c, x.timeoutError()
		}
		x.stacks.end()
		x.waited += time.Since(w)
	}
	if c.timer {
		delete(x.timerDue, c.id)
	} else {
		delete(x.running, c.id)
	}
	if c.park != nil {
		return c, nil
	}
	if c.timer {
		x.timers--
	} else {
		x.inflight--
	}
	if c.fault != nil {
		x.deliver(c.id, c.fault)
	}
	if x.expired.Load() || x.ctx.Err() != nil {
		return c, x.timeoutError() // an answer that came with the deadline is not delivered
	}
	return c, nil
}

// stacksReleasedAfter is how long a run waits for an answer before its
// instance's call stacks are released (stackRelease): growing
// them again costs the next step ~150 KB of allocation and ~30 µs, a few
// thousandths of a wait this long, while a wait on a person or a slow tool
// lasts far longer; a tool that answers sooner (an MCP server on the same
// network, under load too) leaves them, so the throughput paths grow
// nothing again.
const stacksReleasedAfter = 10 * time.Millisecond

// stackRelease lets a waiting instance's call stacks go when the wait
// outlasts stacksReleasedAfter (instance.releaseStacks): what a held run
// keeps is its memory, not the stacks its last step grew. One timer serves
// every wait of a run, reset for each: a call's wait is the common one,
// and it should cost no allocation.
type stackRelease struct {
	t     *time.Timer
	in    *instance // the waiting instance: written before state says so
	state atomic.Int32
	// mu is held while a release runs, so the wait's end can wait for it.
	mu sync.Mutex
}

// A stackRelease's states.
const (
	releaseIdle int32 = iota
	releaseWaiting
	releasing
)

// begin is called as a run starts to wait for an answer with its
// instance (nil: nothing to release).
func (r *stackRelease) begin(in *instance) {
	if in == nil {
		return
	}
	r.in = in
	r.state.Store(releaseWaiting)
	if r.t == nil {
		r.t = time.AfterFunc(stacksReleasedAfter, r.fire)
	} else {
		r.t.Reset(stacksReleasedAfter)
	}
}

// fire runs on the timer's goroutine. A timer from an earlier wait that
// fires late finds the run idle, or waiting again: either way a release
// is what a wait allows.
func (r *stackRelease) fire() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state.CompareAndSwap(releaseWaiting, releasing) {
		r.in.releaseStacks()
	}
}

// end is called when the wait is over, before the instance is used again:
// a release that has begun is over when it returns.
func (r *stackRelease) end() {
	if r.state.CompareAndSwap(releaseWaiting, releaseIdle) {
		r.t.Stop()
		return
	}
	if r.state.Load() == releaseIdle {
		return // begin had no instance
	}
	r.mu.Lock()
	r.state.Store(releaseIdle)
	r.mu.Unlock()
}

// lateError is the TIMEOUT of a run that ended past its deadline (x.ctx
// may already be cancelled by the run's end, so it is not consulted).
func (x *execution) lateError() *fault.Error {
	if d, ok := x.parent.Deadline(); ok && !d.After(x.deadline) {
		return fault.New(fault.Timeout, "the caller's deadline was reached")
	}
	return fault.New(fault.Timeout, "execution deadline of %s exceeded", x.limits.Timeout)
}

// timeoutError is the run's TIMEOUT, naming which deadline passed, or
// the fault the caller ended the run with (context.WithCancelCause with a
// *fault.Error: a cancellation is CANCELLED, not a timeout).
func (x *execution) timeoutError() *fault.Error {
	if fe := (*fault.Error)(nil); x.ctx.Err() != nil && errors.As(context.Cause(x.ctx), &fe) {
		return fe
	}
	if d, ok := x.ctx.Deadline(); ok && d.Before(x.start.Add(x.limits.Timeout)) && x.ctx.Err() != nil {
		return fault.New(fault.Timeout, "the caller's deadline was reached")
	}
	return fault.New(fault.Timeout, "execution deadline of %s exceeded", x.limits.Timeout)
}
