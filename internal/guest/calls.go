package guest

import (
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/trace"
)

// Tool calls: the guest starts them without blocking; the host records
// each in the trace, applies the per-call limits, and serves it in place,
// at the guest's next wait, or on a goroutine of its own.

// Built-ins the guest reaches by negative tool index.
const (
	builtinSleep    = -1
	builtinSearch   = -2
	builtinList     = -3
	builtinDescribe = -4
)

var builtinNames = map[int32]string{builtinSearch: "tools.search", builtinList: "tools.list", builtinDescribe: "tools.describe"}

// resolve answers the guest's question about a name its tool list lacks
// (see Resolver): the new tool's index, 1 for a server with tools to
// resolve, or -1.
func (x *execution) resolve(server, tool string) int32 {
	r, ok := x.req.Host.(Resolver)
	if !ok {
		return -1
	}
	w := time.Now()
	t, found := r.Resolve(x.ctx, server, tool)
	x.waited += time.Since(w)
	x.checkIn() // the host may have taken a while: past the deadline, stop here
	switch {
	case !found:
		return -1
	case tool == "":
		return 1
	}
	t.Server, t.Name = server, tool
	if !x.ownTools {
		// The table shares its array with the caller's slice: grow a copy.
		x.req.Tools, x.ownTools = slices.Clip(x.req.Tools), true
	}
	x.req.Tools = append(x.req.Tools, t)
	return int32(len(x.req.Tools) - 1)
}

// startCall begins one call and returns its id. It never blocks: refusals
// complete at once and are collected through next like any answer.
func (x *execution) startCall(index int32, args []byte, line, col int) int32 {
	x.nextID++
	id := x.nextID
	if index == builtinSleep {
		return x.startTimer(id, args)
	}
	var server, tool string
	kind := trace.KindMCP
	switch {
	case index >= 0 && int(index) < len(x.req.Tools):
		server, tool = x.req.Tools[index].Server, x.req.Tools[index].Name
	case builtinNames[index] != "":
		tool, kind = builtinNames[index], trace.KindBuiltin
	default:
		// Only a guest whose internals were tampered with asks for a tool
		// that is not in its table: refuse the call like any other.
		e := fault.New(fault.ToolNotFound, "the sandbox asked for tool number %d, which this execution does not have", index)
		x.inflight++
		x.ready = append(x.ready, completion{id: id, data: errorJSON(e), fault: e})
		return id
	}
	full := server + ":" + tool
	x.inflight++

	// Every attempt counts against tool_calls, refused ones included; past
	// the limit a call fails at once and only adds to one summary record,
	// so a loop of refusals cannot flood the trace.
	if len(x.calls) >= x.limits.ToolCalls {
		e := fault.Limitf(fault.LimitToolCalls, "more than %d tool calls in one execution", x.limits.ToolCalls).WithTool(full)
		x.countOver()
		x.ready = append(x.ready, completion{id: id, data: errorJSON(e), fault: e})
		return id
	}
	rec := trace.Call{
		ExecutionID: x.req.ExecutionID,
		CallID:      len(x.calls) + 1,
		Server:      server,
		Tool:        tool,
		Kind:        kind,
		StartedAt:   time.Now(),
		ArgsBytes:   len(args),
		ArgsHash:    trace.Hash(args),
	}
	x.mu.Lock()
	x.calls = append(x.calls, rec)
	idx := len(x.calls) - 1
	x.mu.Unlock()
	if x.req.OnCallStart != nil {
		x.req.OnCallStart(rec)
	}

	refuse := func(e *fault.Error) int32 {
		x.finishRecord(idx, nil, e)
		x.ready = append(x.ready, completion{id: id, ok: false, data: errorJSON(e), fault: e})
		return id
	}
	switch {
	case x.inflight > x.limits.InFlight:
		return refuse(fault.Limitf(fault.LimitInFlight, "more than %d tool calls in flight", x.limits.InFlight).WithTool(full))
	case len(args) > x.limits.ToolArgsBytes:
		return refuse(fault.Limitf(fault.LimitArgsBytes, "arguments are %d bytes; the limit is %d", len(args), x.limits.ToolArgsBytes).WithTool(full))
	case len(args) > 2*MaxJSONDepth && jsonDepth(args) > MaxJSONDepth:
		return refuse(fault.Limitf(fault.LimitJSONDepth, "arguments nest %d levels deep; the limit is %d", jsonDepth(args), MaxJSONDepth).WithTool(full))
	case x.req.Host == nil:
		return refuse(fault.New(fault.ToolNotFound, "no tool host serves %q", full).WithTool(full))
	}

	call := Call{ID: rec.CallID, Server: server, Tool: tool, Args: append(json.RawMessage(nil), args...), Line: line, Column: col}
	if kind == trace.KindMCP && x.req.Park != nil {
		switch g := x.req.Park(call); {
		case g.Park:
			x.park(id, idx, call)
			return id
		case g.Approval != nil:
			// Approved ahead of time (a grant): its record says by whom.
			x.mu.Lock()
			x.calls[idx].Approval = g.Approval
			x.mu.Unlock()
		}
	}
	held := x.holds(call)
	if ih, ok := x.req.Host.(ImmediateHost); ok && !held {
		if data, handled, err := ih.CallImmediate(call); handled {
			x.ready = append(x.ready, x.complete(id, idx, full, data, err))
			return id
		}
	}
	x.pending = append(x.pending, pendingCall{id: id, idx: idx, full: full, call: call, held: held})
	return id
}

// park keeps a call that waits for a decision: it does not run, and the
// script's promise for it stays pending.
func (x *execution) park(id int32, idx int, call Call) {
	x.parked = append(x.parked, ParkedCall{CallID: call.ID, Server: call.Server, Tool: call.Tool, Args: call.Args, GuestID: id,
		Line: call.Line, Column: call.Column})
	x.mu.Lock()
	x.calls[idx].Status = trace.StatusParked
	x.mu.Unlock()
}

// countOver adds one refused call to the summary record of calls past the
// tool_calls limit.
func (x *execution) countOver() {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.over == nil {
		x.over = &trace.Call{
			ExecutionID: x.req.ExecutionID,
			CallID:      x.limits.ToolCalls + 1,
			Server:      "*",
			Tool:        "*",
			Kind:        trace.KindBuiltin,
			StartedAt:   time.Now(),
			ErrorCode:   fault.LimitExceeded,
		}
	}
	x.over.Count++
}

// complete turns a host's answer into what the guest receives, and closes
// the call's trace record.
func (x *execution) complete(id int32, idx int, full string, data json.RawMessage, err error) completion {
	switch {
	case err != nil:
		fe := fault.As(err)
		if fe.Tool == "" {
			fe.Tool = full
		}
		x.finishRecord(idx, nil, fe)
		return completion{id: id, data: errorJSON(fe), fault: fe}
	case len(data) > x.limits.ToolResultSize:
		fe := fault.Limitf(fault.LimitResultBytes, "tool result is %d bytes; the limit is %d", len(data), x.limits.ToolResultSize).WithTool(full)
		x.finishRecord(idx, data, fe)
		return completion{id: id, data: errorJSON(fe), fault: fe}
	}
	if len(data) == 0 {
		data = json.RawMessage("null")
	}
	x.finishRecord(idx, data, nil)
	return completion{id: id, ok: true, data: data}
}

func (x *execution) finishRecord(idx int, result []byte, err *fault.Error) {
	hash := trace.Hash(result)
	x.mu.Lock()
	r := &x.calls[idx]
	r.DurationMS = float64(time.Since(r.StartedAt).Microseconds()) / 1000
	r.ResultBytes = len(result)
	r.ResultHash = hash
	r.OK = err == nil
	if err != nil {
		r.ErrorCode = err.Code
	}
	done := *r
	x.mu.Unlock()
	if x.req.OnCall != nil {
		x.req.OnCall(done)
	}
}

// pendingCall is a call the guest started that no goroutine serves yet.
type pendingCall struct {
	id   int32
	idx  int // its trace record
	full string
	call Call
	// held: an effect that waits for the next checkpoint (checkpoint.go)
	// and is not started before it.
	held bool
}

// startPending sets the calls the guest started to run. A call is not
// given its own goroutine when the guest starts it: when the guest then
// waits (atWait) with that one call and nothing else outstanding, which is
// every `await mcp.x.y()` in sequence, the call runs right here, on the
// goroutine that would otherwise only wait for it, saving two goroutine
// hand-offs per call. Otherwise (several calls, or the guest still
// computing at a check-in) each gets a goroutine, so calls overlap with
// each other and with the script.
//
// waiting is the instance of a run waiting at atWait (nil otherwise): a
// call run here that lasts lets its call stacks go (stackRelease).
func (x *execution) startPending(atWait bool, waiting *instance) {
	if len(x.pending) == 0 {
		return
	}
	if atWait && len(x.pending) == 1 && x.inflight == 1 && x.timers == 0 && len(x.ready) == 0 {
		p := x.pending[0]
		x.pending = x.pending[:0]
		w := time.Now()
		x.stacks.begin(waiting)
		data, err := x.req.Host.CallTool(x.ctx, p.call)
		x.stacks.end()
		x.waited += time.Since(w)
		x.ready = append(x.ready, x.served(p, data, err))
		return
	}
	held := x.pending[:0]
	for _, p := range x.pending {
		if p.held {
			// Mid-computation (a check-in): it waits for the script's
			// next wait point and its checkpoint.
			held = append(held, p)
			continue
		}
		if x.running == nil {
			x.running = map[int32]pendingCall{}
		}
		x.running[p.id] = p
		x.wg.Add(1)
		go func() {
			defer x.wg.Done()
			data, err := x.req.Host.CallTool(x.ctx, p.call)
			c := x.served(p, data, err)
			select {
			case x.done <- c:
			case <-x.ctx.Done():
			}
		}()
	}
	x.pending = held
}

// served is the completion of a call its host answered: the answer, or
// the call parked on its tool's question (Asked), its record marked so.
func (x *execution) served(p pendingCall, data json.RawMessage, err error) completion {
	var asked *Asked
	if !errors.As(err, &asked) {
		return x.complete(p.id, p.idx, p.full, data, err)
	}
	x.mu.Lock()
	x.calls[p.idx].Status = trace.StatusParked
	x.mu.Unlock()
	return completion{id: p.id, park: &ParkedCall{CallID: p.call.ID, Server: p.call.Server, Tool: p.call.Tool,
		Args: p.call.Args, GuestID: p.id, Question: asked.Question, Line: p.call.Line, Column: p.call.Column}}
}

// traceCalls returns the call records once every call has ended: calls
// still running when the script finished are cancelled, and each closes its
// own record with the error its host returned.
func (x *execution) traceCalls() []trace.Call {
	x.unwatch()
	x.cancel()
	x.wg.Wait()
	x.mu.Lock()
	for _, p := range x.pending {
		// Started by the script and never sent: it ended first (an effect
		// held for a checkpoint at a wait point that never came).
		x.calls[p.idx].Status = trace.StatusNotRun
	}
	// Nothing writes the records after this (every call has ended, and
	// an execution is not reused): the caller takes them as they are.
	calls := slices.Clip(x.calls)
	over := x.over
	x.mu.Unlock()
	if !x.suspended {
		// The script ended with calls still parked: they never ran.
		for i := range calls {
			if calls[i].Status == trace.StatusParked {
				calls[i].Status = trace.StatusNotRun
			}
		}
	}
	if over != nil {
		calls = append(calls, *over)
		if x.req.OnCall != nil {
			x.req.OnCall(*over)
		}
	}
	return calls
}
