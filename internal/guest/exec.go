package guest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tetratelabs/wazero/api"
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
}

// execution is the host-side state of one run. The guest's host calls all
// happen on the goroutine running pml_run; only tool goroutines send on done.
type execution struct {
	engine   *Engine
	req      *Request
	limits   Limits
	start    time.Time
	deadline time.Time
	ctx      context.Context // cancelled when the run ends or the deadline passes
	cancel   context.CancelFunc

	nextID   int32
	inflight int // tool calls started and not yet collected
	timers   int // timers started and not yet collected
	timersN  int // timers ever started
	ready    []completion
	done     chan completion
	taken    completion // the answer wait_any announced, for take_result to copy
	wg       sync.WaitGroup

	mu    sync.Mutex // guards calls: tool goroutines finish their records
	calls []trace.Call

	logs          []LogEntry
	logBytes      int
	logsTruncated bool
}

func newExecution(parent context.Context, e *Engine, req Request, limits Limits, res *Result, start time.Time) *execution {
	deadline := start.Add(limits.Timeout)
	if d, ok := parent.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	ctx, cancel := context.WithDeadline(parent, deadline)
	x := &execution{
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
	return x
}

// outputDoc is what pml_run returns.
type outputDoc struct {
	OK    bool            `json:"ok"`
	Value json.RawMessage `json:"value"`
	Error *fault.Error    `json:"error"`
}

// run calls pml_run on a fresh instance and decodes its answer.
func (x *execution) run(mod api.Module, cfg []byte, seed int64) (*outputDoc, *fault.Error) {
	ctx := context.WithValue(x.ctx, execKey{}, x)
	alloc := mod.ExportedFunction("pml_alloc")
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
	ret, err := mod.ExportedFunction("pml_run").Call(ctx,
		uint64(cfgPtr), uint64(len(cfg)), uint64(codePtr), uint64(len(x.req.Code)),
		uint64(seed), uint64(x.limits.MemoryBytes), uint64(x.limits.StackBytes), x.engine.runFlags)
	if err != nil {
		return nil, x.trapError(err)
	}
	ptr, n := uint32(ret[0]>>32), uint32(ret[0])
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
	if !doc.OK && doc.Error == nil {
		doc.Error = fault.New(fault.SandboxError, "the sandbox failed without an error")
	}
	if doc.Error != nil && doc.Error.Code == fault.Timeout {
		doc.Error.Message = fmt.Sprintf("execution deadline of %s exceeded", x.limits.Timeout)
		if d, ok := x.ctx.Deadline(); ok && d.Before(x.start.Add(x.limits.Timeout)) {
			doc.Error.Message = "the caller's deadline was reached"
		}
	}
	if doc.OK {
		doc.Value = append(json.RawMessage(nil), doc.Value...) // detach from guest memory
	}
	return &doc, nil
}

// trapError classifies a failure of the guest itself (not of the script).
func (x *execution) trapError(err error) *fault.Error {
	var exit *sys.ExitError
	msg := err.Error()
	switch {
	case x.interrupted():
		return fault.New(fault.Timeout, "execution deadline of %s exceeded", x.limits.Timeout)
	case errors.As(err, &exit):
		return fault.New(fault.SandboxError, "the sandbox exited with code %d", exit.ExitCode())
	case strings.Contains(msg, "stack overflow") || strings.Contains(msg, "call stack exhausted"):
		return fault.Limitf(fault.LimitStack, "the sandbox's native stack was exhausted")
	default:
		return fault.Wrap(fault.SandboxError, err, "the sandbox trapped")
	}
}

// interrupted reports whether the run must stop now.
func (x *execution) interrupted() bool {
	return !time.Now().Before(x.deadline) || x.ctx.Err() != nil
}

// Built-ins the guest reaches by negative tool index.
const (
	builtinSleep    = -1
	builtinSearch   = -2
	builtinList     = -3
	builtinDescribe = -4
)

var builtinNames = map[int32]string{builtinSearch: "tools.search", builtinList: "tools.list", builtinDescribe: "tools.describe"}

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
		panic(fmt.Sprintf("pml.start_call: no tool %d", index))
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
	full := server + ":" + tool
	x.mu.Lock()
	x.calls = append(x.calls, rec)
	idx := len(x.calls) - 1
	x.mu.Unlock()
	x.inflight++

	refuse := func(e *fault.Error) int32 {
		x.finishRecord(idx, nil, e)
		x.ready = append(x.ready, completion{id: id, ok: false, data: errorJSON(e)})
		return id
	}
	switch {
	case len(x.calls) > x.limits.ToolCalls:
		return refuse(fault.Limitf(fault.LimitToolCalls, "more than %d tool calls in one execution", x.limits.ToolCalls).WithTool(full))
	case x.inflight > x.limits.InFlight:
		return refuse(fault.Limitf(fault.LimitInFlight, "more than %d tool calls in flight", x.limits.InFlight).WithTool(full))
	case len(args) > x.limits.ToolArgsBytes:
		return refuse(fault.Limitf(fault.LimitArgsBytes, "arguments are %d bytes; the limit is %d", len(args), x.limits.ToolArgsBytes).WithTool(full))
	case x.req.Host == nil:
		return refuse(fault.New(fault.ToolNotFound, "no tool host serves %q", full).WithTool(full))
	}

	call := Call{ID: rec.CallID, Server: server, Tool: tool, Args: append(json.RawMessage(nil), args...)}
	if ih, ok := x.req.Host.(ImmediateHost); ok {
		if data, handled, err := ih.CallImmediate(call); handled {
			x.ready = append(x.ready, x.complete(id, idx, full, data, err))
			return id
		}
	}
	x.wg.Add(1)
	go func() {
		defer x.wg.Done()
		data, err := x.req.Host.CallTool(x.ctx, call)
		c := x.complete(id, idx, full, data, err)
		select {
		case x.done <- c:
		case <-x.ctx.Done():
		}
	}()
	return id
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
		return completion{id: id, data: errorJSON(fe)}
	case len(data) > x.limits.ToolResultSize:
		fe := fault.Limitf(fault.LimitResultBytes, "tool result is %d bytes; the limit is %d", len(data), x.limits.ToolResultSize).WithTool(full)
		x.finishRecord(idx, data, fe)
		return completion{id: id, data: errorJSON(fe)}
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

// waitAny blocks until a call or timer finishes. It returns id 0 when
// nothing is in flight (the script is deadlocked) and -1 when the run must
// stop.
func (x *execution) waitAny() (id int32, n int, ok bool) {
	var c completion
	if len(x.ready) > 0 {
		c = x.ready[0]
		x.ready = x.ready[1:]
	} else {
		if x.inflight == 0 && x.timers == 0 {
			return 0, 0, false
		}
		select {
		case c = <-x.done:
		case <-x.ctx.Done():
			return -1, 0, false
		}
	}
	if c.timer {
		x.timers--
	} else {
		x.inflight--
	}
	x.taken = c
	return c.id, len(c.data), c.ok
}

func (x *execution) takeResult(id int32) []byte {
	if x.taken.id != id {
		return nil // not the call just announced: a confused guest gets nothing
	}
	d := x.taken.data
	x.taken = completion{}
	return d
}

// log keeps one console line and reports whether the guest should keep
// sending: once the log budget is spent the rest is dropped, and one marker
// line names the limit.
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
	if room := x.limits.LogBytes - x.logBytes; len(msg) > room {
		if room > 0 {
			x.logs = append(x.logs, LogEntry{Level: lv, Message: msg[:room], AtMS: at})
		}
		x.logBytes = x.limits.LogBytes
		x.logsTruncated = true
		x.logs = append(x.logs, LogEntry{Level: "warn", AtMS: at,
			Message: fmt.Sprintf("[pml] console output reached the %s limit of %d bytes; the rest was dropped", fault.LimitLogBytes, x.limits.LogBytes)})
		return false
	}
	x.logBytes += len(msg)
	x.logs = append(x.logs, LogEntry{Level: lv, Message: msg, AtMS: at})
	return true
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
	x.cancel()
	x.wg.Wait()
	x.mu.Lock()
	defer x.mu.Unlock()
	return slices.Clone(x.calls)
}

// shutdown cancels whatever is still running and waits for it.
func (x *execution) shutdown() {
	x.cancel()
	x.wg.Wait()
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
	type toolDoc struct {
		Server      string `json:"server"`
		Name        string `json:"name"`
		Description string `json:"description,omitempty"`
	}
	doc := struct {
		Tools    []toolDoc                  `json:"tools"`
		Args     json.RawMessage            `json:"args,omitempty"`
		InFlight int                        `json:"in_flight"`
		Globals  map[string]json.RawMessage `json:"globals,omitempty"`
	}{InFlight: limits.InFlight, Globals: req.Globals}
	for _, t := range req.Tools {
		doc.Tools = append(doc.Tools, toolDoc{Server: t.Server, Name: t.Name, Description: t.Description})
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
