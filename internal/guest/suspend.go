package guest

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"slices"
	"time"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/trace"
)

// Durable executions. A run whose every awaited call is parked (waiting
// for someone's decision, see Request.Park) stops and is handed back as a
// Suspension instead of holding a goroutine, an instance and a deadline
// while it waits. Between steps the guest's wasm stack is empty (host-driven
// stepping, glue.c), so the run's whole state is its linear memory plus the
// host's bookkeeping: a Suspension holds both, and Engine.Resume continues
// the very same continuation in a fresh instance, in this process or any
// other running the same guest build — no replay.

// ParkedCall is a call that waits for a decision.
type ParkedCall struct {
	// CallID is the call's number in the execution's trace (what callers
	// decide on).
	CallID int             `json:"call_id"`
	Server string          `json:"server"`
	Tool   string          `json:"tool"`
	Args   json.RawMessage `json:"args"`
	// GuestID is the id the guest knows the call by.
	GuestID int32 `json:"guest_id"`
	// Question is the host's record of what the call's tool asked, for a
	// call parked on a question (Asked); empty for one waiting for
	// approval.
	Question json.RawMessage `json:"question,omitempty"`
	// Line and Column are the call's site (Call.Line).
	Line   int `json:"line,omitempty"`
	Column int `json:"column,omitempty"`
}

// Decision is what was decided about a parked call.
type Decision struct {
	Approve bool   `json:"approve"`
	Reason  string `json:"reason,omitempty"` // why it was rejected, for the script's error
	// Answer is what was answered to a call parked on a question, handed
	// to the host with the call's retry (Call.Answer).
	Answer json.RawMessage `json:"answer,omitempty"`
	// Approval, on an approval, is who approved the call, for its trace
	// record.
	Approval *trace.Approval `json:"approval,omitempty"`
	// Outcome, on a decision about a call in flight at a checkpoint
	// (Suspension.InFlight), is handed to the script as the call's
	// answer: the call is not made again. Without it such a call is made
	// again through the host.
	Outcome *Outcome `json:"outcome,omitempty"`
}

// Suspension is a suspended run: everything Engine.Resume needs to
// continue it. It holds the script's memory, so user data: store it, never
// show it.
type Suspension struct {
	// GuestHash is the guest build the run ran on; another cannot resume it.
	GuestHash string `json:"guest_hash"`
	// Pages is the size of linear memory, in 64 KiB pages.
	Pages uint32 `json:"pages"`
	// Memory is what the run changed of the post-init snapshot: its dirty
	// pages, compressed (see image.go).
	Memory []byte `json:"memory"`
	// Parked are the calls that wait for a decision.
	Parked []ParkedCall `json:"parked"`
	// Tools is the tool table the guest indexes into (by position).
	Tools []Tool `json:"tools"`
	// The host's bookkeeping of the run so far.
	NextID        int32                  `json:"next_id"`
	Calls         []trace.Call           `json:"calls"`
	Over          *trace.Call            `json:"over,omitempty"`
	Logs          []trace.LogEntry       `json:"logs"`
	LogBytes      int                    `json:"log_bytes"`
	LogsTruncated bool                   `json:"logs_truncated,omitempty"`
	Delivered     map[int32]*fault.Error `json:"delivered,omitempty"`
	// Used is the running time spent so far: the deadline counts running
	// time only, so waiting while suspended is free.
	Used   time.Duration `json:"used"`
	Limits Limits        `json:"limits"`
	// Suspends counts the times this run has been suspended.
	Suspends int `json:"suspends"`
	// Session: the run is an execution of a session (Request.Session):
	// once it ends, its Result carries the sandbox's State.
	Session bool `json:"session,omitempty"`
	// Source is the script as its caller wrote it, kept by the host for
	// whoever decides the parked calls (the approval page shows it); the
	// engine never reads it.
	Source string `json:"source,omitempty"`
	// Live marks a checkpoint (checkpoint.go): a capture of a run that
	// went on. Its calls in flight, answers made and timers follow.
	Live     bool           `json:"live,omitempty"`
	InFlight []InFlightCall `json:"in_flight,omitempty"`
	Ready    []ReadyAnswer  `json:"ready,omitempty"`
	Timers   []PendingTimer `json:"timers,omitempty"`
	// TimersStarted counts the timers the run ever started (the bound).
	TimersStarted int `json:"timers_started,omitempty"`
}

// Pending lists the parked calls, for the caller to decide on.
func (s *Suspension) Pending() []ParkedCall { return s.Parked }

// suspension captures the run, which has just stopped at errSuspend (its
// guest waiting, its wasm stack empty).
func (x *execution) suspension(in *instance) (*Suspension, *fault.Error) {
	s, ferr := x.capture(in, false)
	if ferr != nil {
		return nil, ferr
	}
	x.suspended = true
	s.Suspends++
	return s, nil
}

// capture is the run as it stands at a wait point (its guest waiting,
// its wasm stack empty): a suspension, or with live a checkpoint of a run
// that goes on, its calls in flight and timers included.
func (x *execution) capture(in *instance, live bool) (*Suspension, *fault.Error) {
	diff, wasmPages, ferr := x.engine.memoryDiff(in)
	if ferr != nil {
		return nil, ferr
	}
	x.mu.Lock()
	calls := slices.Clone(x.calls)
	var over *trace.Call
	if x.over != nil {
		o := *x.over
		over = &o
	}
	x.mu.Unlock()
	s := &Suspension{
		GuestHash:     x.engine.wasmHash,
		Pages:         wasmPages,
		Memory:        diff,
		Parked:        slices.Clone(x.parked),
		Tools:         x.req.Tools,
		NextID:        x.nextID,
		Calls:         calls,
		Over:          over,
		Logs:          slices.Clone(x.logs),
		LogBytes:      x.logBytes,
		LogsTruncated: x.logsTruncated,
		Delivered:     maps.Clone(x.delivered),
		Used:          x.used + time.Since(x.start),
		Limits:        x.limits,
		Suspends:      x.suspends,
		Session:       x.req.Session,
		TimersStarted: x.timersN,
	}
	if live {
		s.Live = true
		s.InFlight, s.Ready = x.inFlight()
		s.Timers = x.pendingTimers()
	}
	return s, nil
}

// memoryDiff is in's linear memory as what changed from the post-init
// snapshot, compressed (image.go), and its size in wasm pages.
func (e *Engine) memoryDiff(in *instance) ([]byte, uint32, *fault.Error) {
	buf, base, pages, wasmPages := e.changed(in)
	scratch := e.diffScratch.Get().(*diffScratch)
	diff, err := encodeDiff(buf, base, wasmPages, pages, scratch)
	e.diffScratch.Put(scratch)
	if err != nil {
		return nil, 0, fault.Wrap(fault.SandboxError, err, "saving the sandbox's memory")
	}
	return diff, wasmPages, nil
}

// sessionState is in's memory as a session keeps it (groups.go), reusing
// what prev (the state the execution started from, nil for none) held of
// the pages the execution did not change.
func (e *Engine) sessionState(in *instance, prev *restored) (*State, *fault.Error) {
	buf, base, pages, wasmPages := e.changed(in)
	scratch := e.diffScratch.Get().(*diffScratch)
	mem, err := encodeGroups(buf, base, wasmPages, pages, prev, e.pageSeed, scratch)
	e.diffScratch.Put(scratch)
	if err != nil {
		return nil, fault.Wrap(fault.SandboxError, err, "saving the session's sandbox")
	}
	return &State{GuestHash: e.wasmHash, Pages: wasmPages, Memory: mem}, nil
}

// changed is in's linear memory, the post-init memory, the pages (sorted)
// where they differ, and the memory's size in wasm pages.
func (e *Engine) changed(in *instance) (buf, base []byte, pages []int, wasmPages uint32) {
	mem := in.mod.Memory()
	size := mem.Size()
	buf, _ = mem.Read(0, size)
	base = e.snap.baseMemory()
	known := false
	if in.mem != nil {
		pages, known = in.mem.dirtyPages(int(size))
	}
	if known {
		// Written is not changed: a fresh instance's data segments, for
		// one, are written over the image with the same bytes.
		pages = slices.DeleteFunc(pages, func(p int) bool {
			off := p * pageSize
			return off+pageSize <= len(base) && bytes.Equal(buf[off:off+pageSize], base[off:off+pageSize])
		})
	} else {
		pages = changedPages(buf, base)
	}
	slices.Sort(pages)
	return buf, base, pages, size / 65536
}

// restoreMemory writes a saved memory diff into in, which holds the
// post-init snapshot.
func (e *Engine) restoreMemory(in *instance, diff []byte) error {
	_, err := e.restoreState(in, diff)
	return err
}

// restoreState writes a saved memory (a suspension's diff, or a session's
// grouped state) into in, which holds the post-init snapshot; for a
// grouped state it returns what saving the next needs.
func (e *Engine) restoreState(in *instance, diff []byte) (*restored, error) {
	scratch := e.diffScratch.Get().(*diffScratch)
	defer e.diffScratch.Put(scratch)
	if isGroups(diff) {
		return applyGroups(in.mod.Memory(), diff, e.pageSeed, scratch)
	}
	return nil, applyDiff(in.mod.Memory(), diff, scratch)
}

// restore takes up a suspended run's bookkeeping.
func (x *execution) restore(s *Suspension) {
	x.nextID = s.NextID
	x.calls = slices.Clone(s.Calls)
	if s.Over != nil {
		o := *s.Over
		x.over = &o
	}
	x.logs = slices.Clone(s.Logs)
	x.logBytes, x.logsTruncated = s.LogBytes, s.LogsTruncated
	x.delivered = maps.Clone(s.Delivered)
	x.parked = slices.Clone(s.Parked)
	// The guest still counts its parked calls as in flight.
	x.inflight = len(s.Parked)
	x.used = s.Used
	x.suspends = s.Suspends
	x.timersN = s.TimersStarted
}

// decide applies decisions to the parked calls: an approved call runs now,
// a rejected one fails with REJECTED (a host error the script may catch),
// and one not decided stays parked.
func (x *execution) decide(decisions map[int]Decision) {
	kept := x.parked[:0]
	now := time.Now()
	for _, p := range x.parked {
		d, ok := decisions[p.CallID]
		if !ok || p.CallID < 1 || p.CallID > len(x.calls) {
			kept = append(kept, p)
			continue
		}
		idx, full := p.CallID-1, p.Server+":"+p.Tool
		x.mu.Lock()
		x.calls[idx].Status = ""
		x.calls[idx].StartedAt = now
		if d.Approve {
			x.calls[idx].Approval = d.Approval
		}
		x.mu.Unlock()
		if d.Approve {
			x.pending = append(x.pending, pendingCall{id: p.GuestID, idx: idx, full: full,
				call: Call{ID: p.CallID, Server: p.Server, Tool: p.Tool, Args: p.Args, Question: p.Question, Answer: d.Answer}})
			continue
		}
		msg := "the call was rejected"
		if d.Reason != "" {
			msg += ": " + d.Reason
		}
		x.ready = append(x.ready, x.complete(p.GuestID, idx, full, nil, fault.New(fault.Rejected, "%s", msg).WithTool(full)))
	}
	x.parked = kept
}

// Resume continues a suspended run: decisions (by trace call id) approve or
// reject its parked calls, and the script goes on from where it waited, in
// a fresh instance restored from s. It may suspend again. A session's run
// (Suspension.Session) ends with its State as Run's does, saved whole. req
// supplies the host side (Host, Park, OnCall, ExecutionID, Checkpoint);
// the code, tools and limits are the suspended run's own. A suspension
// from another guest build is refused with RESUME_INCOMPATIBLE.
//
// s may be a checkpoint (s.Live): its calls in flight are answered as
// decisions say (Decision.Outcome) or made again through the host, the
// answers it had made are handed in, and its timers run what was left of
// them. Its running time so far counts against its deadline, as a
// suspension's does.
func (e *Engine) Resume(ctx context.Context, s *Suspension, req Request, decisions map[int]Decision) *Result {
	start := time.Now()
	res := &Result{ExecutionID: req.ExecutionID, StartedAt: start, Logs: []trace.LogEntry{}}
	finish := func(err *fault.Error) *Result {
		res.Err = err
		res.OK = err == nil
		res.Duration = time.Since(start)
		return res
	}
	if s == nil {
		return finish(fault.New(fault.InvalidRequest, "nothing to resume"))
	}
	if s.GuestHash != e.wasmHash {
		return finish(fault.New(fault.ResumeIncompatible, "the execution was suspended on guest build %s; this engine runs %s", s.GuestHash, e.wasmHash))
	}
	if !e.enter() {
		return finish(shutDown())
	}
	defer e.running.Done()

	in, err := e.instance(ctx)
	if err != nil {
		return finish(fault.Wrap(fault.SandboxError, err, "preparing a sandbox"))
	}
	in.mem.bind(ctx) // growth, restoring the memory included, is charged to the caller's MemoryBudget
	if err := e.restoreMemory(in, s.Memory); err != nil {
		e.release(in, false)
		return finish(fault.Wrap(fault.SandboxError, err, "restoring the suspended execution"))
	}
	req.Tools = s.Tools
	req.Code = ""
	req.Session = s.Session
	x := newExecution(ctx, e, req, s.Limits, res, start)
	x.restore(s)
	x.shortenDeadline()
	defer func() { e.release(in, x.reusable(res)) }()
	defer x.shutdown()
	in.runs++
	x.decide(decisions)
	if s.Live {
		x.restoreLive(s, decisions)
	}
	doc, rerr := x.drive(context.WithValue(x.ctx, execKey{}, x), in, waiting)
	return e.finishRun(x, in, res, doc, rerr, finish)
}
