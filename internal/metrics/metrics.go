// Package metrics counts what an operator of PML Sandbox watches:
// executions by outcome, their duration and CPU time, tool calls by server
// and outcome with their latency, limit hits by limit, suspensions and
// resumes, cold starts and compile-cache misses. The same events feed two
// publishers: Prometheus, scraped from `pml serve`'s /metrics (package
// prom, an Exporter), and CloudWatch's embedded metric format, log lines
// the Lambda functions write as they flush (CloudWatch turns them into
// metrics; no API call).
//
// Most events come from the trace records (Sink turns them into a
// Recorder's calls), so metrics count exactly what traces record; the
// rest (a refusal in front of the service, a cold start, the compile
// cache) are told by whoever sees them.
package metrics

import (
	"context"
	"net/http"
	"sync"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/trace"
)

// Recorder receives the events. Implementations are safe for concurrent
// use and do no I/O but in Flush.
type Recorder interface {
	// Run is one run of an execution as its record says: a finished
	// execution, or a run that suspended.
	Run(r Run)
	// Call is one tool call that ended.
	Call(c Call)
	// LimitHit counts a request refused in front of the service for want
	// of room (fault.LimitServerExecutions, fault.LimitServerMemory).
	LimitHit(limit string)
	// ColdStart counts a process that started (a Lambda container's
	// first invocation).
	ColdStart()
	// GuestCache counts how the guest's compiled code was obtained at
	// start: hit, or compiled (a miss).
	GuestCache(hit bool)
	// Flush publishes what is pending (EMF writes its lines), within
	// ctx.
	Flush(ctx context.Context) error
}

// Exporter is a Recorder that serves what it keeps over HTTP, for a
// scraper to pull (package prom: Prometheus's text format).
type Exporter interface {
	Recorder
	Handler() http.Handler
}

// Run is what a Recorder is told of one run of an execution.
type Run struct {
	// Finished is false for a run that suspended: the execution goes on
	// after a resume, and counts once, when it finishes.
	Finished bool
	// Outcome is "ok" or the error code of a finished execution.
	Outcome string
	// Limit is the limit a finished execution failed on ("timeout" for
	// its deadline), "" for none.
	Limit string
	// DurationMS and CPUMS are the execution's, over all its runs.
	DurationMS, CPUMS float64
	// Suspended and Resumed say whether the run ended in a suspension and
	// whether it began with a resume.
	Suspended, Resumed bool
}

// Call is what a Recorder is told of one tool call.
type Call struct {
	// Server is the call's server (a capability's namespace), or
	// BuiltinServer.
	Server string
	// Outcome is "ok" or the call's error code.
	Outcome    string
	DurationMS float64
	// Count is how many calls this one stands for (the calls refused
	// past tool_calls are one record).
	Count int
}

// BuiltinServer is the server label of the built-in tools (tools.search,
// tools.list, tools.describe) and of the calls refused past tool_calls.
const BuiltinServer = "_builtin"

// OutcomeOK is the outcome of what succeeded.
const OutcomeOK = "ok"

// LimitTimeout is the limit of an execution that ran out of time (TIMEOUT
// carries no limit name of its own).
const LimitTimeout = "timeout"

// RunOf reads a record as a Recorder's Run.
func RunOf(ex trace.Execution) Run {
	r := Run{DurationMS: ex.DurationMS, CPUMS: ex.CPUMS, Outcome: OutcomeOK}
	n := len(ex.Events)
	last := func(i int) string {
		if n-i < 0 {
			return ""
		}
		return ex.Events[n-i].Type
	}
	switch {
	case ex.Status == trace.StatusSuspended || last(1) == trace.EventSuspend:
		// A suspension after a resume is the resumed run's end.
		r.Suspended, r.Resumed = true, last(2) == trace.EventResume
		r.Outcome = ""
		return r
	case last(1) == trace.EventResume:
		r.Resumed = true
	}
	r.Finished = true
	if ex.Status == trace.StatusError {
		r.Outcome = string(ex.ErrorCode)
		if r.Outcome == "" {
			r.Outcome = string(fault.Internal)
		}
		r.Limit = ex.Limit
		if r.Limit == "" && ex.ErrorCode == fault.Timeout {
			r.Limit = LimitTimeout
		}
	}
	return r
}

// CallOf reads a call record as a Recorder's Call.
func CallOf(c trace.Call) Call {
	out := Call{Server: c.Server, Outcome: OutcomeOK, DurationMS: c.DurationMS, Count: max(1, c.Count)}
	if out.Server == "" || c.Kind == trace.KindBuiltin {
		out.Server = BuiltinServer
	}
	if !c.OK {
		out.Outcome = string(c.ErrorCode)
		if out.Outcome == "" {
			out.Outcome = string(fault.Internal)
		}
	}
	return out
}

// Sink feeds a Recorder from trace records: each execution's record is a
// Run, each call a Call as it ends (RecordCall: a durable execution's
// record carries its earlier runs' calls again, which are not counted
// twice). It is a trace.Sink and a trace.CallRecorder.
type Sink struct{ R Recorder }

// Record implements trace.Sink.
func (s Sink) Record(_ context.Context, ex trace.Execution, _ []trace.Call) { s.R.Run(RunOf(ex)) }

// RecordCall implements trace.CallRecorder.
func (s Sink) RecordCall(_ context.Context, c trace.Call) { s.R.Call(CallOf(c)) }

// Flush implements trace.Sink.
func (s Sink) Flush(ctx context.Context) error { return s.R.Flush(ctx) }

// maxLabelValues bounds the values a label takes in one process: servers
// are capability namespaces too, which users create, and outcomes and
// limits come from records; past the bound a value is counted as
// OtherValue, so a script cannot make the series grow without end.
const maxLabelValues = 100

// OtherValue stands for the label values past the bound.
const OtherValue = "_other"

// Bounded admits the first maxLabelValues values of a label; its zero
// value is ready. Every publisher bounds its labels with it.
type Bounded struct {
	mu   sync.Mutex
	seen map[string]bool
}

// Value is v while fewer than maxLabelValues values have been seen or v
// is one of them, else OtherValue.
func (b *Bounded) Value(v string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seen[v] {
		return v
	}
	if len(b.seen) >= maxLabelValues {
		return OtherValue
	}
	if b.seen == nil {
		b.seen = map[string]bool{}
	}
	b.seen[v] = true
	return v
}
