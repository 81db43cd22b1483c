package guest

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/trace"
)

// The state of one run. An execution is created per Run (or Resume) and
// lives on the goroutine that calls into the guest; its concerns are split
// by file: stepping the guest (step.go), the calls it starts (calls.go) and
// its timers (timers.go), its console (logs.go), the check-ins that bound
// its time (checkin.go), and what its failures become (failure.go).

// completion is a finished call, waiting for the guest to collect it.
type completion struct {
	id    int32
	ok    bool
	timer bool
	data  []byte
	fault *fault.Error // what data encodes when !ok, kept to check the script's failure against
	// park, when set, is a call that parked on its tool's question (Asked)
	// instead of completing: nothing is delivered.
	park *ParkedCall
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
	// running are the calls served on goroutines of their own whose
	// answers the guest has not collected, and timerDue when each timer
	// the script waits for fires: what a checkpoint records in flight
	// (checkpoint.go). Guest goroutine only.
	running  map[int32]pendingCall
	timerDue map[int32]time.Time
	// in is the instance the run steps (set by drive), for checkpoints.
	in             *instance
	stacks         stackRelease // lets in's call stacks go in a long wait
	lastCheckpoint time.Time
	checkpoints    int

	mu    sync.Mutex // guards calls: tool goroutines finish their records
	calls []trace.Call
	// over summarises the calls refused past the tool_calls limit, which
	// get no record of their own (nil until the first).
	over *trace.Call

	// delivered holds every error the guest was handed, by id, so a
	// failure the script reports as a host error can be checked against
	// the original (see verifyFailure). Guest goroutine only.
	delivered map[int32]*fault.Error
	// stopErr, when set, is why the host trapped the guest (see stop).
	stopErr *fault.Error

	logs          []trace.LogEntry
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
	checkIns  int           // pml.poll calls so far (tests count them)
	waited    time.Duration // time the run's goroutine waited on the host (Result.CPUTime)
	ownTools  bool          // req.Tools has an array of its own (resolve grew it)
	restored  *restored     // a session's state the run started from (groups.go)
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
		// The first checkpoint for the interval is due one interval in.
		lastCheckpoint: start,
	}
	x.req.ExecutionID = res.ExecutionID
	// Every host call checks whether the run must stop; an atomic flag set
	// when the context ends makes that check a single load.
	x.unwatch = context.AfterFunc(ctx, func() { x.expired.Store(true) })
	return x
}

// shutdown cancels whatever is still running and waits for it.
func (x *execution) shutdown() {
	x.unwatch()
	x.cancel()
	x.wg.Wait()
}

// guestInFlight is the cap on calls in flight the guest's snapshot holds
// before any configuration (glue.c's inflight_cap); maxTimers is the
// prelude's own default likewise.
const guestInFlight = 16

// encodeConfig prepares what the guest's pml_run reads: the JSON document
// setup() reads and, after a NUL, the run's tools as JSON, [server, name,
// server, name, …] (a flat list of strings is the cheapest JSON for the
// guest to read), which the guest parses only when the script first reads
// `mcp`. A request that asks nothing but the snapshot's defaults (no
// input, globals, session or resolving host; the default caps) has an
// empty document: the guest then skips parsing it and the prelude's setup.
// JSON never holds a raw NUL, so the first one ends the document.
func encodeConfig(req Request, limits Limits) ([]byte, *fault.Error) {
	var b []byte
	if _, resolves := req.Host.(Resolver); resolves || len(req.Args) > 0 ||
		len(req.Globals) > 0 || req.Session || limits.InFlight != guestInFlight {
		var ferr *fault.Error
		if b, ferr = encodeSetup(req, limits); ferr != nil {
			return nil, ferr
		}
	}
	if len(req.Tools) == 0 {
		return b, nil
	}
	names := make([]string, 0, 2*len(req.Tools))
	for _, t := range req.Tools {
		names = append(names, t.Server, t.Name)
	}
	tools, err := json.Marshal(names)
	if err != nil {
		return nil, fault.Wrap(fault.InvalidRequest, err, "encoding the tool list")
	}
	b = append(b, 0)
	return append(b, tools...), nil
}

// encodeSetup is the document setup() reads (descriptions stay on the
// host, which serves tools.search and tools.describe).
func encodeSetup(req Request, limits Limits) ([]byte, *fault.Error) {
	doc := struct {
		// Resolve says the host resolves names the list lacks.
		Resolve  bool                       `json:"resolve,omitempty"`
		Args     json.RawMessage            `json:"args,omitempty"`
		InFlight int                        `json:"in_flight"`
		Timers   int                        `json:"max_timers"`
		Globals  map[string]json.RawMessage `json:"globals,omitempty"`
		// Session: keep the top-level bindings the script hands over.
		Session bool `json:"session,omitempty"`
	}{InFlight: limits.InFlight, Timers: maxTimers, Globals: req.Globals, Session: req.Session}
	_, doc.Resolve = req.Host.(Resolver)
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
