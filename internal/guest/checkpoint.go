package guest

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/pml-sandbox/pml/internal/fault"
)

// Checkpoints. A checkpoint is a Suspension taken while the run is live:
// at a wait point (the guest has just returned `waiting`, its wasm stack
// is empty), with every call the script started and has not yet been
// answered recorded as in flight (InFlight) — calls running on their
// goroutines, calls about to start, answers made but not yet handed in —
// and the timers it waits for, with what was left of their delay. Engine
// Resume continues from one in a fresh instance anywhere, as it continues
// a suspension: no replay. Its caller decides what becomes of each call in
// flight (Decision.Outcome answers it without calling anyone; undecided,
// it is made again through the host, which knows whether that is safe:
// internal/executor asks its journal of effects).
//
// A checkpoint is taken before any effect is sent (Request.IsEffect): an
// effect the script starts while it computes is held, invisibly to the
// script, until its next wait point, where the checkpoint is taken and
// then the effect sent. So every effect that ever left the host is in
// flight in, or answered before, the last checkpoint. Otherwise one is
// taken at a wait point at least every CheckpointEvery of running. A
// script that never waits cannot be checkpointed mid-loop: its calls are
// all reads (an effect makes it wait), and a crash restarts it from its
// last checkpoint.

// DefaultCheckpointEvery is how often a run that makes no effect is
// checkpointed at the latest (Request.CheckpointEvery).
const DefaultCheckpointEvery = 5 * time.Second

// InFlightCall is a call the script started and had not been answered
// when a checkpoint was taken.
type InFlightCall struct {
	// CallID is the call's number in the trace.
	CallID int             `json:"call_id"`
	Server string          `json:"server"`
	Tool   string          `json:"tool"`
	Args   json.RawMessage `json:"args"`
	// GuestID is the id the guest knows the call by.
	GuestID int32 `json:"guest_id"`
	// Question and Answer are those of a call sent again with the answer
	// to its tool's question (Call.Question, Call.Answer).
	Question json.RawMessage `json:"question,omitempty"`
	Answer   json.RawMessage `json:"answer,omitempty"`
	// Sending says the call is an effect held for this checkpoint: it is
	// sent right after the checkpoint is kept, and never before.
	Sending bool `json:"sending,omitempty"`
}

// PendingTimer is a timer the script waits for, at a checkpoint.
type PendingTimer struct {
	GuestID int32 `json:"guest_id"`
	// Left is what was left of its delay.
	Left time.Duration `json:"left"`
}

// ReadyAnswer is an answer the host had made without sending anything (a
// refusal, an answer of an ImmediateHost, a rejection) and not yet handed
// to the script, at a checkpoint: it is handed in after the continuation
// as it would have been.
type ReadyAnswer struct {
	GuestID int32           `json:"guest_id"`
	OK      bool            `json:"ok"`
	Timer   bool            `json:"timer,omitempty"`
	Data    json.RawMessage `json:"data"`
	Fault   *fault.Error    `json:"fault,omitempty"`
}

// Outcome answers a call in flight at a checkpoint without calling
// anyone (Decision.Outcome): its result, or its error.
type Outcome struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  *fault.Error    `json:"error,omitempty"`
}

// errCheckpointRefused is the error of effects whose checkpoint was not
// kept when the hook gave no fault of its own.
var errCheckpointRefused = errors.New("the run's checkpoint could not be kept")

// holds reports whether c, about to be served, must wait for a checkpoint.
func (x *execution) holds(c Call) bool {
	return x.req.Checkpoint != nil && x.req.IsEffect != nil && c.Server != "" && x.req.IsEffect(c)
}

// checkpointDue reports whether the run must be checkpointed at this wait
// point: an effect waits to be sent, or the interval has passed.
func (x *execution) checkpointDue() (held bool, due bool) {
	if x.req.Checkpoint == nil || x.in == nil {
		return false, false
	}
	for _, p := range x.pending {
		if p.held {
			held = true
			break
		}
	}
	every := x.req.CheckpointEvery
	if every <= 0 {
		every = DefaultCheckpointEvery
	}
	return held, held || time.Since(x.lastCheckpoint) >= every
}

// checkpointAtWait takes the checkpoint due at this wait point, if any.
// When it cannot be kept, the effects held for it fail with its error and
// are never sent; a checkpoint taken for the interval alone that fails is
// only logged (the run goes on, continued from an older one if it dies).
func (x *execution) checkpointAtWait() {
	held, due := x.checkpointDue()
	if !due {
		return
	}
	x.lastCheckpoint = time.Now()
	s, ferr := x.capture(x.in, true)
	var err error
	if ferr != nil {
		err = ferr
	} else {
		w := time.Now()
		err = x.req.Checkpoint(x.ctx, s)
		x.waited += time.Since(w)
	}
	if err == nil {
		x.checkpoints++
		for i := range x.pending {
			x.pending[i].held = false
		}
		return
	}
	if !held {
		x.engine.log.Warn("guest: a checkpoint was not kept", "execution_id", x.req.ExecutionID, "err", err)
		return
	}
	fe := checkpointFault(err)
	kept := x.pending[:0]
	for _, p := range x.pending {
		if !p.held {
			kept = append(kept, p)
			continue
		}
		e := *fe
		x.ready = append(x.ready, x.complete(p.id, p.idx, p.full, nil, e.WithTool(p.full)))
	}
	x.pending = kept
}

// checkpointFault is what a held effect fails with when its checkpoint
// was not kept: the hook's fault, or a retryable UNAVAILABLE.
func checkpointFault(err error) *fault.Error {
	var fe *fault.Error
	if errors.As(err, &fe) {
		return fe
	}
	fe = fault.Wrap(fault.Unavailable, err, "the call was not sent: "+errCheckpointRefused.Error()+", and an effect is never sent without one")
	fe.Retryable = true
	return fe
}

// inFlight lists the calls started and not answered, for a checkpoint:
// those about to start, those running, and the answers made and not yet
// handed in.
func (x *execution) inFlight() ([]InFlightCall, []ReadyAnswer) {
	var calls []InFlightCall
	add := func(p pendingCall, sending bool) {
		calls = append(calls, InFlightCall{CallID: p.call.ID, Server: p.call.Server, Tool: p.call.Tool, Args: p.call.Args, GuestID: p.id,
			Question: p.call.Question, Answer: p.call.Answer, Sending: sending})
	}
	for _, p := range x.pending {
		add(p, p.held)
	}
	for _, id := range slices.Sorted(maps.Keys(x.running)) {
		add(x.running[id], false)
	}
	var ready []ReadyAnswer
	for _, c := range x.ready {
		ready = append(ready, ReadyAnswer{GuestID: c.id, OK: c.ok, Timer: c.timer, Data: c.data, Fault: c.fault})
	}
	return calls, ready
}

// pendingTimers are the timers the script waits for, with what is left of
// each.
func (x *execution) pendingTimers() []PendingTimer {
	now := time.Now()
	var out []PendingTimer
	for _, id := range slices.Sorted(maps.Keys(x.timerDue)) {
		out = append(out, PendingTimer{GuestID: id, Left: max(0, x.timerDue[id].Sub(now))})
	}
	return out
}

// restoreLive takes up what a checkpoint had in flight: answered calls
// are handed in as decided (decisions[CallID].Outcome), the others made
// again, and the timers started with what was left of them.
func (x *execution) restoreLive(s *Suspension, decisions map[int]Decision) {
	now := time.Now()
	for _, r := range s.Ready {
		x.ready = append(x.ready, completion{id: r.GuestID, ok: r.OK, timer: r.Timer, data: r.Data, fault: r.Fault})
		if r.Timer {
			x.timers++
		} else {
			x.inflight++
		}
	}
	for _, c := range s.InFlight {
		x.inflight++
		idx, full := c.CallID-1, c.Server+":"+c.Tool
		if idx < 0 || idx >= len(x.calls) {
			// Only a damaged checkpoint names a call it has no record of.
			e := fault.New(fault.Internal, "the checkpoint names call %d, which it has no record of", c.CallID)
			x.ready = append(x.ready, completion{id: c.GuestID, data: errorJSON(e), fault: e})
			continue
		}
		x.mu.Lock()
		x.calls[idx].Status, x.calls[idx].StartedAt = "", now
		x.mu.Unlock()
		if d, ok := decisions[c.CallID]; ok && d.Outcome != nil {
			var err error
			if d.Outcome.Error != nil {
				err = d.Outcome.Error
			}
			x.ready = append(x.ready, x.complete(c.GuestID, idx, full, d.Outcome.Result, err))
			continue
		}
		x.pending = append(x.pending, pendingCall{id: c.GuestID, idx: idx, full: full,
			call: Call{ID: c.CallID, Server: c.Server, Tool: c.Tool, Args: c.Args, Question: c.Question, Answer: c.Answer}})
	}
	for _, t := range s.Timers {
		x.timers++
		x.runTimer(t.GuestID, t.Left)
	}
}

// Checkpoints counts the checkpoints a run kept (tests and benchmarks).
func (r *Result) Checkpoints() int { return r.checkpoints }
