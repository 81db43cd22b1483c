package guest

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/tetratelabs/wazero/sys"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/trace"
)

// NewExecutionID returns a random, URL-safe execution id.
func NewExecutionID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "ex_" + hex.EncodeToString(b[:])
}

// completion is a finished call, waiting for the guest to collect it.
type completion struct {
	id    int32
	ok    bool
	timer bool
	data  []byte
	fault *fault.Error // what data encodes when !ok, kept to check the script's failure against
}

// execution is the host-side state of one run. The guest's host calls all
// happen on the goroutine running pml_run; only tool goroutines send on done.
type execution struct {
	engine   *Engine
	req      *Request
	limits   Limits
	start    time.Time
	deadline time.Time
	parent   context.Context // the caller's
	ctx      context.Context // cancelled when the run ends or the deadline passes
	cancel   context.CancelFunc

	nextID   int32
	inflight int // tool calls started and not yet collected
	timers   int // timers started and not yet collected
	timersN  int // timers ever started
	ready    []completion
	done     chan completion
	pending  []pendingCall // started by the guest, not yet running (see startPending)
	parked   []ParkedCall  // waiting for a decision (Request.Park)
	wg       sync.WaitGroup

	mu    sync.Mutex // guards calls: tool goroutines finish their records
	calls []trace.Call
	// over summarises the calls refused past the tool_calls limit, which
	// get no record of their own (nil until the first).
	over *trace.Call

	// delivered holds every error the guest was handed, by id, so a
	// failure the script reports as a host error can be checked against
	// the original (see verifyFailure). Guest goroutine only.
	delivered map[int32]*fault.Error
	// abortErr, when set, is why the host trapped a misbehaving guest.
	abortErr *fault.Error

	logs          []LogEntry
	logBytes      int
	logsTruncated bool

	expired   atomic.Bool   // the deadline passed or the caller gave up
	unwatch   func() bool   // stops the watch that sets expired
	stopping  bool          // the guest was trapped; nothing of it may run again
	trapped   bool          // a call into the guest trapped: its instance is never reused
	suspended bool          // the run stopped as a Suspension
	used      time.Duration // running time before this step (a resumed run)
	suspends  int           // times the run was suspended before
	lastYield time.Time     // when the run last gave up its thread (maybeYield)
	waited    time.Duration // time the run's goroutine waited on the host (Result.CPUTime)
	ownTools  bool          // req.Tools has an array of its own (resolve grew it)
}

func newExecution(parent context.Context, e *Engine, req Request, limits Limits, res *Result, start time.Time) *execution {
	deadline := start.Add(limits.Timeout)
	if d, ok := parent.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	ctx, cancel := context.WithDeadline(parent, deadline)
	x := &execution{
		parent:   parent,
		engine:   e,
		req:      &req,
		limits:   limits,
		start:    start,
		deadline: deadline,
		ctx:      ctx,
		cancel:   cancel,
		done:     make(chan completion, 16),
	}
	x.req.ExecutionID = res.ExecutionID
	// Every host call checks whether the run must stop; an atomic flag set
	// when the context ends makes that check a single load.
	x.unwatch = context.AfterFunc(ctx, func() { x.expired.Store(true) })
	return x
}

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
	mod, alloc := in.mod, in.alloc
	// QuickJS's parsers need a NUL after the text, so every buffer gets one.
	put := func(b []byte) (uint32, error) {
		r, err := alloc.Call(ctx, uint64(len(b)+1))
		if err != nil {
			return 0, err
		}
		p := uint32(r[0])
		if p == 0 || !mod.Memory().Write(p, b) || !mod.Memory().WriteByte(p+uint32(len(b)), 0) {
			return 0, errors.New("guest allocation failed")
		}
		return p, nil
	}
	cfgPtr, err := put(cfg)
	if err != nil {
		return nil, fault.Wrap(fault.SandboxError, err, "loading the configuration")
	}
	codePtr, err := put([]byte(x.req.Code))
	if err != nil {
		return nil, fault.Wrap(fault.SandboxError, err, "loading the code")
	}
	ret, err := in.run.Call(ctx,
		uint64(cfgPtr), uint64(len(cfg)), uint64(codePtr), uint64(len(x.req.Code)),
		uint64(seed), uint64(x.limits.MemoryBytes), uint64(x.limits.StackBytes), x.engine.runFlags)
	if err != nil {
		return nil, x.trapError(err)
	}
	return x.drive(ctx, in, int64(ret[0]))
}

// drive carries a started run on from the guest's last answer (ret, what
// pml_run or pml_resume returned): host-driven stepping. While the script
// waits for a call, drive waits for an answer and hands it in with
// pml_resume, until the guest returns its output document — or every call
// the script waits for is parked, and the run suspends (errSuspend).
func (x *execution) drive(ctx context.Context, in *instance, ret int64) (*outputDoc, *fault.Error) {
	mod := in.mod
	for ret == waiting {
		c, ferr := x.next()
		if ferr != nil {
			return nil, ferr
		}
		r, err := in.inbox.Call(ctx, uint64(len(c.data)))
		if err != nil {
			return nil, x.trapError(err)
		}
		if p := uint32(r[0]); p != 0 && !mod.Memory().Write(p, c.data) {
			return nil, fault.New(fault.SandboxError, "the sandbox's inbox is out of range")
		}
		rs, err := in.resume.Call(ctx, uint64(uint32(c.id)), boolArg(c.ok), uint64(len(c.data)))
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
	var doc outputDoc
	if err := json.Unmarshal(raw, &doc); err != nil {
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

// verifyFailure turns the guest's report of a failure into the error the
// caller sees. A report that names a host error (host_error: the id the
// host delivered it under) keeps that error's code only when every field
// the script could have changed is still what the host delivered;
// otherwise the failure is the script's own, SCRIPT_ERROR. So a script
// cannot dress its failure up as TIMEOUT or a retryable UNAVAILABLE.
// Reports without host_error come from the glue and the prelude's own
// code paths, which only produce SCRIPT_ERROR, the memory and stack
// limits, and the glue's fixed documents.
func (x *execution) verifyFailure(raw json.RawMessage) *fault.Error {
	var report map[string]json.RawMessage
	if err := json.Unmarshal(raw, &report); err != nil {
		return fault.Wrap(fault.SandboxError, err, "the sandbox reported an unreadable failure")
	}
	var stack string
	_ = json.Unmarshal(report["stack"], &stack)
	idRaw, claimed := report["host_error"]
	if !claimed {
		var e fault.Error
		if err := json.Unmarshal(raw, &e); err != nil || e.Code == "" {
			return fault.New(fault.SandboxError, "the sandbox reported a failure without a code")
		}
		return &e
	}
	var id int32
	orig := (*fault.Error)(nil)
	if json.Unmarshal(idRaw, &id) == nil {
		orig = x.delivered[id]
	}
	delete(report, "host_error")
	delete(report, "stack")
	if orig != nil && sameAsDelivered(report, orig) {
		e := *orig
		e.Stack = stack
		return &e
	}
	var msg string
	if json.Unmarshal(report["message"], &msg) != nil {
		msg = "(an error whose message is not a string)"
	}
	return &fault.Error{Code: fault.ScriptError, Message: "Error: " + msg, Stack: stack}
}

// sameAsDelivered reports whether the fields of a host error, as the
// script left them, are exactly what the prelude made of orig (hostError
// in prelude.js: the same defaults, tool and limit only when set).
func sameAsDelivered(report map[string]json.RawMessage, orig *fault.Error) bool {
	want := map[string]any{
		"code":      cmp.Or(string(orig.Code), "INTERNAL"),
		"message":   cmp.Or(orig.Message, string(orig.Code), "tool call failed"),
		"retryable": orig.Retryable,
	}
	if orig.Tool != "" {
		want["tool"] = orig.Tool
	}
	if orig.Limit != "" {
		want["limit"] = orig.Limit
	}
	if orig.Details != nil {
		want["details"] = orig.Details
	}
	return sameJSON(report, want)
}

// sameJSON compares two values by their JSON meaning.
func sameJSON(a, b any) bool {
	norm := func(v any) (any, bool) {
		j, err := json.Marshal(v)
		if err != nil {
			return nil, false
		}
		var out any
		return out, json.Unmarshal(j, &out) == nil
	}
	na, ok1 := norm(a)
	nb, ok2 := norm(b)
	return ok1 && ok2 && reflect.DeepEqual(na, nb)
}

// trapError classifies a failure of the guest itself (not of the script).
func (x *execution) trapError(err error) *fault.Error {
	var exit *sys.ExitError
	msg := err.Error()
	x.trapped = true
	switch {
	case x.abortErr != nil:
		return x.abortErr
	case x.interrupted():
		return x.timeoutError()
	case errors.As(err, &exit):
		return fault.New(fault.SandboxError, "the sandbox exited with code %d", exit.ExitCode())
	case strings.Contains(msg, "stack overflow") || strings.Contains(msg, "call stack exhausted"):
		return fault.Limitf(fault.LimitStack, "the sandbox's native stack was exhausted")
	default:
		return fault.Wrap(fault.SandboxError, err, "the sandbox trapped")
	}
}

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
// complete at once and are collected through waitAny like any answer.
func (x *execution) startCall(index int32, args []byte) int32 {
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
	case x.req.Host == nil:
		return refuse(fault.New(fault.ToolNotFound, "no tool host serves %q", full).WithTool(full))
	}

	call := Call{ID: rec.CallID, Server: server, Tool: tool, Args: append(json.RawMessage(nil), args...)}
	if kind == trace.KindMCP && x.req.Park != nil && x.req.Park(call) {
		x.park(id, idx, call)
		return id
	}
	if ih, ok := x.req.Host.(ImmediateHost); ok {
		if data, handled, err := ih.CallImmediate(call); handled {
			x.ready = append(x.ready, x.complete(id, idx, full, data, err))
			return id
		}
	}
	x.pending = append(x.pending, pendingCall{id: id, idx: idx, full: full, call: call})
	return id
}

// park keeps a call that waits for a decision: it does not run, and the
// script's promise for it stays pending.
func (x *execution) park(id int32, idx int, call Call) {
	x.parked = append(x.parked, ParkedCall{CallID: call.ID, Server: call.Server, Tool: call.Tool, Args: call.Args, GuestID: id})
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

// startTimer serves setTimeout: a sleep that is not a tool call.
func (x *execution) startTimer(id int32, args []byte) int32 {
	var a struct {
		MS float64 `json:"ms"`
	}
	x.timers++
	x.timersN++
	if x.timersN > maxTimers {
		x.ready = append(x.ready, completion{id: id, timer: true, data: errorJSON(fault.Limitf("timers", "more than %d timers in one execution", maxTimers))})
		return id
	}
	_ = json.Unmarshal(args, &a)
	d := time.Duration(a.MS * float64(time.Millisecond))
	x.wg.Add(1)
	go func() {
		defer x.wg.Done()
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-x.ctx.Done():
			return
		}
		select {
		case x.done <- completion{id: id, ok: true, timer: true, data: []byte("null")}:
		case <-x.ctx.Done():
		}
	}()
	return id
}

// next returns the next answer for the guest, waiting for one when none is
// ready. The run cannot go on when nothing is in flight (DEADLOCK) or its
// deadline has passed (TIMEOUT).
func (x *execution) next() (completion, *fault.Error) {
	x.startPending(true)
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
		select {
		case c = <-x.done:
		case <-x.ctx.Done():
			x.waited += time.Since(w)
			return c, x.timeoutError()
		}
		x.waited += time.Since(w)
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

// pendingCall is a call the guest started that no goroutine serves yet.
type pendingCall struct {
	id   int32
	idx  int // its trace record
	full string
	call Call
}

// startPending sets the calls the guest started to run. A call is not
// given its own goroutine when the guest starts it: when the guest then
// waits (atWait) with that one call and nothing else outstanding, which is
// every `await mcp.x.y()` in sequence, the call runs right here, on the
// goroutine that would otherwise only wait for it, saving two goroutine
// hand-offs per call. Otherwise (several calls, or the guest still
// computing at a check-in) each gets a goroutine, so calls overlap with
// each other and with the script.
func (x *execution) startPending(atWait bool) {
	if len(x.pending) == 0 {
		return
	}
	if atWait && len(x.pending) == 1 && x.inflight == 1 && x.timers == 0 && len(x.ready) == 0 {
		p := x.pending[0]
		x.pending = x.pending[:0]
		w := time.Now()
		data, err := x.req.Host.CallTool(x.ctx, p.call)
		x.waited += time.Since(w)
		x.ready = append(x.ready, x.complete(p.id, p.idx, p.full, data, err))
		return
	}
	for _, p := range x.pending {
		x.wg.Add(1)
		go func() {
			defer x.wg.Done()
			data, err := x.req.Host.CallTool(x.ctx, p.call)
			c := x.complete(p.id, p.idx, p.full, data, err)
			select {
			case x.done <- c:
			case <-x.ctx.Done():
			}
		}()
	}
	x.pending = x.pending[:0]
}

// timeoutError is the run's TIMEOUT, naming which deadline passed.
func (x *execution) timeoutError() *fault.Error {
	if d, ok := x.ctx.Deadline(); ok && d.Before(x.start.Add(x.limits.Timeout)) && x.ctx.Err() != nil {
		return fault.New(fault.Timeout, "the caller's deadline was reached")
	}
	return fault.New(fault.Timeout, "execution deadline of %s exceeded", x.limits.Timeout)
}

// log keeps one console line and reports whether the guest should keep
// sending. Every line costs its length plus LogEntryOverhead against
// log_bytes, and at most log_entries lines are kept, so neither long lines
// nor a flood of empty ones can grow the output past its bounds: once
// either is spent the rest is dropped, and one marker line names the limit.
func (x *execution) log(level int32, msg string) bool {
	if x.logsTruncated {
		return false
	}
	lv := "log"
	switch level {
	case 1:
		lv = "info"
	case 2:
		lv = "warn"
	case 3:
		lv = "error"
	}
	at := float64(time.Since(x.start).Microseconds()) / 1000
	if len(x.logs) >= x.limits.LogEntries {
		x.truncateLogs(at, fault.LimitLogEntries, x.limits.LogEntries, "lines")
		return false
	}
	if room := x.limits.LogBytes - x.logBytes - LogEntryOverhead; len(msg) > room {
		if room > 0 {
			x.keepLog(LogEntry{Level: lv, Message: truncateUTF8(msg, room), AtMS: at})
		}
		x.truncateLogs(at, fault.LimitLogBytes, x.limits.LogBytes, "bytes")
		return false
	}
	x.logBytes += len(msg) + LogEntryOverhead
	x.keepLog(LogEntry{Level: lv, Message: msg, AtMS: at})
	return true
}

// keepLog adds a line to the output and hands it to OnLog.
func (x *execution) keepLog(e LogEntry) {
	x.logs = append(x.logs, e)
	if x.req.OnLog != nil {
		x.req.OnLog(e)
	}
}

func (x *execution) truncateLogs(at float64, limit string, n int, unit string) {
	x.logBytes = x.limits.LogBytes
	x.logsTruncated = true
	x.keepLog(LogEntry{Level: "warn", AtMS: at,
		Message: fmt.Sprintf("[pml] console output reached the %s limit of %d %s; the rest was dropped", limit, n, unit)})
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func (x *execution) takeLogs() ([]LogEntry, bool) {
	if x.logs == nil {
		return []LogEntry{}, x.logsTruncated
	}
	return x.logs, x.logsTruncated
}

// traceCalls returns the call records once every call has ended: calls
// still running when the script finished are cancelled, and each closes its
// own record with the error its host returned.
func (x *execution) traceCalls() []trace.Call {
	x.unwatch()
	x.cancel()
	x.wg.Wait()
	x.mu.Lock()
	calls := slices.Clone(x.calls)
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

// shutdown cancels whatever is still running and waits for it.
func (x *execution) shutdown() {
	x.unwatch()
	x.cancel()
	x.wg.Wait()
}

// deliver remembers an error handed to the guest under id.
func (x *execution) deliver(id int32, e *fault.Error) {
	if x.delivered == nil {
		x.delivered = map[int32]*fault.Error{}
	}
	x.delivered[id] = e
}

// registerFault keeps an error the prelude raises on the host's behalf
// (pml.fault) and returns the id it is kept under. The document comes from
// the guest, so it is parsed as untrusted input.
func (x *execution) registerFault(doc []byte) int32 {
	x.nextID++
	id := x.nextID
	var e fault.Error
	if err := json.Unmarshal(doc, &e); err != nil || e.Code == "" {
		e = fault.Error{Code: fault.SandboxError, Message: "the sandbox raised an unreadable error"}
	}
	x.deliver(id, &e)
	return id
}

// abort ends the run of a guest that broke the host protocol (a pointer
// out of range, say): the run fails with SANDBOX_ERROR and the instance is
// discarded like any other.
func (x *execution) abort(format string, a ...any) {
	x.abortErr = fault.New(fault.SandboxError, "the sandbox misbehaved: "+format, a...)
	x.stopping = true
	panic(errStop)
}

func errorJSON(e *fault.Error) []byte {
	b, err := json.Marshal(e)
	if err != nil {
		return []byte(`{"code":"INTERNAL","message":"unencodable error"}`)
	}
	return b
}

// encodeConfig prepares the JSON document the guest's setup() reads.
func encodeConfig(req Request, limits Limits) ([]byte, *fault.Error) {
	doc := struct {
		// Tools are [server, name, server, name, …]: a flat list of
		// strings is the cheapest JSON for the guest to read, and building
		// the mcp object from it is per-run work (descriptions stay on the
		// host, which serves tools.search and tools.describe).
		Tools []string `json:"tools"`
		// Resolve says the host resolves names the list lacks.
		Resolve  bool                       `json:"resolve,omitempty"`
		Args     json.RawMessage            `json:"args,omitempty"`
		InFlight int                        `json:"in_flight"`
		Globals  map[string]json.RawMessage `json:"globals,omitempty"`
	}{InFlight: limits.InFlight, Globals: req.Globals}
	_, doc.Resolve = req.Host.(Resolver)
	doc.Tools = make([]string, 0, 2*len(req.Tools))
	for _, t := range req.Tools {
		doc.Tools = append(doc.Tools, t.Server, t.Name)
	}
	if len(req.Args) > 0 {
		if !json.Valid(req.Args) {
			return nil, fault.New(fault.InvalidRequest, "args is not valid JSON")
		}
		doc.Args = req.Args
	}
	for k, v := range req.Globals {
		if !json.Valid(v) {
			return nil, fault.New(fault.InvalidRequest, "global %q is not valid JSON", k)
		}
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, fault.Wrap(fault.InvalidRequest, err, "encoding the configuration")
	}
	return b, nil
}
