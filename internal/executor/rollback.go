package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/compensate"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/journal"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/trace"
)

// Rollback. The compensations of an execution's applied effects (declared
// per tool by the deployment: catalog.Tool.Compensate) run newest first as
// an execution of the rollback's own: rollbackScript, a fixed script that
// takes the compensating calls as its args and calls each in try/catch,
// with the request's tools narrowed to exactly the compensating tools, the
// principal who asked, and RollbackOf naming the original. So a
// compensation is traced, journalled (an effect of its own, with its own
// key), gated (one that needs approval waits for a person, or runs with
// allow_destructive where the policy lets the asker give it) and bounded
// like any call, and every one is attempted whatever became of the others.
//
// Each effect to compensate is claimed first on the original's journal
// (journal.Store.SetCompensation, conditional: of two rollbacks one
// claims), naming the call of the rollback that undoes it. When the
// rollback ends — here, or in whichever process resumes it after a
// person decided, or cancels it — every claim is settled from the
// rollback's own journal (finishRollback): compensated, failed, unknown.
// A claim whose rollback was lost (it expired waiting, or its process
// died) is settled the same way by the next rollback. A compensated
// effect is never undone twice.

// rollbackScript is what every rollback runs. The calls are its args,
// never spliced into code; they run one after another, so that call i+1
// of the run is the i-th compensation (what its claim names), and each in
// try/catch, so that one that fails leaves the others attempted.
const rollbackScript = `const out = [];
for (const c of args.calls) {
  try {
    await mcp[c.server][c.tool](c.args);
    out.push({ok: true});
  } catch (e) {
    out.push({ok: false, code: String((e && e.code) || "SCRIPT_ERROR"), message: String((e && e.message) || e).slice(0, 2000)});
  }
}
return out;`

// maxRollbackArgs bounds the compensating calls' arguments one rollback
// carries: the rest are skipped, for the next rollback to take.
const maxRollbackArgs = 1 << 20

// rollbackMargin is how long past the service's longest run a rollback
// that left no suspended record is still taken to be running.
const rollbackMargin = time.Minute

// TraceReader reads stored executions (an unknown id is an error whose
// fault code is NOT_FOUND): a rollback tells a known execution that made
// no effect from an unknown id, and an ended one from one still running.
type TraceReader interface {
	GetExecution(ctx context.Context, id string) (trace.Execution, []trace.Call, error)
}

// Rollback implements execution.Executor.
func (s *Service) Rollback(ctx context.Context, rr execution.RollbackRequest) (*execution.Rollback, *fault.Error) {
	id := rr.ExecutionID
	if s.journal == nil {
		return nil, fault.New(fault.NotFound, "no execution %q: this service keeps no journal of effects, so nothing an execution did can be undone here", id)
	}
	if ferr := execution.CheckApproval(rr.Approval); ferr != nil {
		return nil, ferr
	}
	if rr.Approval == execution.ApprovalSuspend && s.store == nil {
		return nil, fault.New(fault.InvalidRequest, `approval "suspend" is not available here: this service keeps no suspended executions`)
	}
	entries, ferr := s.readJournal(ctx, id)
	if ferr != nil {
		return nil, ferr
	}
	orig, ferr := s.original(ctx, id, entries)
	if ferr != nil {
		return nil, ferr
	}
	// Who may first: nothing about another's execution is told to someone
	// who may not roll it back.
	if !orig.known || !s.policy.MayReject(approval.Decider{Principal: rr.Principal, Channel: rr.Channel}, orig.owner) {
		return nil, fault.New(fault.NotFound, "no execution %q", id)
	}
	if rr.DryRun {
		// What would run, whatever the execution is doing now: the page
		// shows it beside a waiting execution's pending calls. Nothing
		// is refused, settled or recorded.
		out := s.planRollback(ctx, entries).answer(id, true)
		out.Owner = orig.owner
		return out, nil
	}
	if orig.busy != nil {
		return nil, orig.busy
	}
	if entries, ferr = s.settleLost(ctx, id, entries); ferr != nil {
		return nil, ferr
	}
	plan := s.planRollback(ctx, entries)
	if ferr := plan.refusal(id); ferr != nil {
		return nil, ferr
	}
	s.recordSkips(ctx, id, plan)
	if len(plan.run) == 0 {
		out := s.rollbackAnswer(ctx, id, "", nil, plan)
		out.Owner = orig.owner
		return out, nil
	}
	rbID := trace.NewExecutionID()
	if ferr := s.claim(ctx, id, rbID, plan); ferr != nil {
		return nil, ferr
	}
	resp := s.Execute(ctx, s.rollbackRequest(rr, rbID, plan))
	if !resp.Suspended() {
		s.finishRollback(ctx, id, rbID, resp)
	}
	out := s.rollbackAnswer(ctx, id, rbID, resp, plan)
	out.Owner = orig.owner
	return out, nil
}

// readJournal is id's journal, or a retryable UNAVAILABLE.
func (s *Service) readJournal(ctx context.Context, id string) ([]journal.Entry, *fault.Error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), journalTimeout)
	defer cancel()
	entries, err := s.journal.List(rctx, id)
	if err != nil {
		fe := fault.Wrap(fault.Unavailable, err, "the journal of effects could not be read")
		fe.Retryable = true
		return nil, fe
	}
	return entries, nil
}

// origin is what a rollback knows of the execution it is asked to roll
// back: whether it exists, whose it is, and why it cannot be rolled back
// now (busy: it runs, or waits for decisions).
type origin struct {
	known bool
	owner string
	busy  *fault.Error
}

// original finds id in the journal, the store of suspended executions and
// the traces: a known id is never answered as an unknown one, and one
// that has not ended is not rolled back under its feet.
func (s *Service) original(ctx context.Context, id string, entries []journal.Entry) (origin, *fault.Error) {
	var o origin
	if len(entries) > 0 {
		o.known, o.owner = true, entries[0].Principal
	}
	ended := false
	if s.store != nil {
		rec, err := s.store.Load(ctx, id)
		var ee *suspend.ExpiredError
		switch {
		case err == nil:
			o.known, o.owner = true, rec.Principal
			switch rec.State {
			case suspend.Suspended:
				o.busy = fault.New(fault.Conflict, "execution %s waits for decisions on its pending calls: cancel it first (DELETE /executions/%s, "+
					"cancel_execution, pml status --cancel), or reject and roll back on its approval page", id, id)
			case suspend.Resuming:
				o.busy = fault.New(fault.Conflict, "execution %s is running (a decision resumed it): roll it back once it has ended", id)
			default:
				ended = true
			}
		case errors.As(err, &ee):
			o.known, o.owner, ended = true, ee.Principal, true
		case errors.Is(err, suspend.ErrNotFound):
		default:
			fe := fault.Wrap(fault.Unavailable, err, "the store of suspended executions could not be read")
			fe.Retryable = true
			return o, fe
		}
	}
	if s.traces != nil && !ended && o.busy == nil {
		ex, _, err := s.traces.GetExecution(ctx, id)
		switch {
		case err == nil:
			if !o.known {
				o.owner = ex.Principal
			}
			o.known, ended = true, ex.Status != "" && ex.Status != trace.StatusSuspended
		case fault.CodeOf(err) != fault.NotFound:
			s.log.WarnContext(ctx, "the trace of an execution to roll back could not be read", "execution_id", id, "err", err)
		}
	}
	if o.known && o.busy == nil && !ended && len(entries) > 0 && !journal.Quiet(entries, time.Now()) {
		o.busy = fault.New(fault.Conflict, "execution %s may still be running (its trace is not written, and its last effect was less than %s ago): "+
			"roll it back once it has ended", id, journal.LostAfter)
	}
	return o, nil
}

// rollbackRequest is the rollback's own execution: the fixed script, the
// compensating calls as its args, its tools exactly the compensating
// tools, for the principal who asked.
func (s *Service) rollbackRequest(rr execution.RollbackRequest, rbID string, plan *rollbackPlan) execution.Request {
	type call struct {
		Server string          `json:"server"`
		Tool   string          `json:"tool"`
		Args   json.RawMessage `json:"args"`
	}
	calls := make([]call, 0, len(plan.run))
	var tools []string
	for _, i := range plan.run {
		c := plan.items[i].call
		calls = append(calls, call{Server: c.Server, Tool: c.Tool, Args: c.Args})
		if name := c.Server + ":" + c.Tool; !slices.Contains(tools, name) {
			tools = append(tools, name)
		}
	}
	args, _ := json.Marshal(map[string]any{"calls": calls})
	approvalMode := rr.Approval
	if approvalMode == "" && s.store != nil {
		// A compensation that needs a person waits for one: undoing is
		// deliberate, and a refusal would leave the effect in place.
		approvalMode = execution.ApprovalSuspend
	}
	source := rr.Source
	if source == "" {
		source = execution.SourceHTTP
	}
	req := execution.Request{Code: rollbackScript, Lang: execution.LangJS, Args: args, AllowDestructive: rr.AllowDestructive,
		Approval: approvalMode, CallDetail: execution.CallDetailSummary, ExecutionID: rbID, Principal: rr.Principal, Source: source,
		TraceHeader: rr.TraceHeader, RollbackOf: rr.ExecutionID}
	_ = req.SetTools(tools)
	return req
}

// rollbackPlan is what a rollback does about each effect, newest first.
type rollbackPlan struct {
	items []planItem
	// run are the indexes of items whose compensation runs, in the order
	// it runs (call i+1 of the rollback is items[run[i]]).
	run []int
}

// planItem is one effect in a rollback's plan: its compensating call
// (when it runs), or the outcome it has without one.
type planItem struct {
	e       journal.Entry
	call    *execution.CompensationCall
	outcome string // "" when call runs
	reason  string
	ferr    *fault.Error
	// record: the skip is written on the entry (an applied effect).
	record bool
}

// planRollback decides, for each effect, newest first: compensate it
// (its compensation builds), or why not.
func (s *Service) planRollback(ctx context.Context, entries []journal.Entry) *rollbackPlan {
	tools := map[string]catalog.Tool{}
	for _, e := range s.catalog(ctx) {
		tools[e.tool.FullName()] = e.tool
	}
	sorted := slices.Clone(entries)
	slices.SortFunc(sorted, func(a, b journal.Entry) int { return b.CallID - a.CallID })
	plan := &rollbackPlan{}
	argBytes := 0
	for _, e := range sorted {
		it := planItem{e: e}
		if reason, outcome := settledAlready(e); outcome != "" {
			it.outcome, it.reason = outcome, reason
			if e.Compensation != nil {
				it.ferr = e.Compensation.Error
			}
		} else if call, why := buildCompensation(e, tools); call == nil {
			it.outcome, it.reason, it.record = execution.CompensationSkipped, why, true
		} else if argBytes+len(call.Args) > maxRollbackArgs {
			it.outcome, it.record = execution.CompensationSkipped, true
			it.reason = fmt.Sprintf("this rollback's compensating calls reached their bound of %d bytes of arguments: roll back again to compensate the rest", maxRollbackArgs)
		} else {
			argBytes += len(call.Args)
			it.call = call
			plan.run = append(plan.run, len(plan.items))
		}
		plan.items = append(plan.items, it)
	}
	return plan
}

// settledAlready is the outcome an effect has without a compensating
// call: not applied, compensated already, or compensated with no known
// outcome (never sent again: it may have happened).
func settledAlready(e journal.Entry) (reason, outcome string) {
	c := e.Compensation
	switch {
	case e.Status != journal.Applied:
		return fmt.Sprintf("not applied (%s): there is nothing to undo", e.UserStatus(true)), execution.CompensationSkipped
	case c == nil:
		return "", ""
	case c.Status == execution.CompensationDone:
		return fmt.Sprintf("compensated already, by call %d of rollback %s", c.CallID, c.ExecutionID), execution.CompensationDone
	case c.Status == execution.CompensationUnknown:
		return fmt.Sprintf("its compensation (call %d of rollback %s) has no recorded outcome: it may have happened, so it is not sent again; check with the server",
			c.CallID, c.ExecutionID), execution.CompensationUnknown
	case c.Status == execution.CompensationRunning:
		// Only a dry run meets one: a rollback settles or refuses first.
		return fmt.Sprintf("rollback %s is compensating it (call %d)", c.ExecutionID, c.CallID), execution.OutcomePending
	}
	return "", ""
}

// buildCompensation is e's compensating call, or why there is none: no
// compensation declared for its tool now, its undo not offered now, or
// its template cannot be built from what the journal kept.
func buildCompensation(e journal.Entry, tools map[string]catalog.Tool) (*execution.CompensationCall, string) {
	full := e.Server + ":" + e.Tool
	t, ok := tools[full]
	switch {
	case !ok:
		return nil, full + " is not offered now (its server may be down), so its compensation is not known"
	case t.Compensate == nil:
		return nil, "no compensation is declared for " + full + " (compensate, in its server's configuration)"
	}
	tpl := t.Compensate
	if _, ok := tools[e.Server+":"+tpl.Tool]; !ok {
		return nil, "its compensation " + e.Server + ":" + tpl.Tool + " is not offered now (its server may be down)"
	}
	var args, result json.RawMessage
	if e.Args != nil {
		args = e.Args
	}
	if e.Result != nil || e.ResultBytes == 0 {
		result = e.Result
		if result == nil {
			result = json.RawMessage("null")
		}
	}
	built, err := tpl.Build(args, result)
	if err != nil {
		var nk *compensate.NotKeptError
		if errors.As(err, &nk) && nk.Root == compensate.RootArgs {
			return nil, fmt.Sprintf("args not kept: its compensation needs its arguments, and the journal kept only their digest (%d bytes, over %d)", e.ArgsBytes, journal.MaxArgsBytes)
		}
		if errors.As(err, &nk) {
			return nil, fmt.Sprintf("result not kept: its compensation needs its result, and the journal did not keep it (%d bytes, over %d)", e.ResultBytes, journal.MaxResultBytes)
		}
		return nil, err.Error()
	}
	return &execution.CompensationCall{Server: e.Server, Tool: tpl.Tool, Args: built}, ""
}

// refusal is the CONFLICT of a rollback with nothing to run because every
// applied effect was compensated already.
func (p *rollbackPlan) refusal(id string) *fault.Error {
	if len(p.run) > 0 {
		return nil
	}
	applied, done := 0, 0
	var by []string
	for _, it := range p.items {
		if it.e.Status != journal.Applied {
			continue
		}
		applied++
		if it.outcome == execution.CompensationDone {
			done++
			if rb := it.e.Compensation.ExecutionID; !slices.Contains(by, rb) {
				by = append(by, rb)
			}
		}
	}
	if applied == 0 || done < applied {
		return nil
	}
	return &fault.Error{Code: fault.Conflict, Details: map[string]any{"rollback": execution.RolledBack, "rolled_back_by": by},
		Message: fmt.Sprintf("execution %s was rolled back already: each of its %d applied effects was compensated (by %s)", id, applied, strings.Join(by, ", "))}
}

// recordSkips writes on each applied effect the plan skips why it was
// skipped, unless a rollback changed it since it was read.
func (s *Service) recordSkips(ctx context.Context, id string, plan *rollbackPlan) {
	now := time.Now().UTC()
	for _, it := range plan.items {
		if !it.record {
			continue
		}
		to := &journal.Compensation{Status: execution.CompensationSkipped, Reason: it.reason, At: now}
		s.setCompensation(ctx, id, it.e.CallID, it.e.Compensation, to)
	}
}

// setCompensation is journal.Store.SetCompensation within journalTimeout;
// a conflict means another rollback changed the entry first, and is
// theirs to tell.
func (s *Service) setCompensation(ctx context.Context, id string, callID int, from, to *journal.Compensation) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), journalTimeout)
	defer cancel()
	err := s.journal.SetCompensation(wctx, id, callID, from, to)
	if err != nil && !errors.Is(err, journal.ErrConflict) {
		s.log.ErrorContext(ctx, "compensation not journalled", "execution_id", id, "call_id", callID, "err", err)
	}
	return err
}

// claim claims the plan's effects for rollback rbID, in the order their
// compensations run: of two rollbacks at once, the first to claim the
// newest effect takes them all, and the other releases what it claimed
// and is refused CONFLICT.
func (s *Service) claim(ctx context.Context, id, rbID string, plan *rollbackPlan) *fault.Error {
	now := time.Now().UTC()
	for n, i := range plan.run {
		it := &plan.items[i]
		c := &journal.Compensation{Status: execution.CompensationRunning, ExecutionID: rbID, CallID: n + 1, Server: it.call.Server,
			Tool: it.call.Tool, ArgsDigest: journal.Digest(it.call.Args), At: now}
		err := s.setCompensation(ctx, id, it.e.CallID, it.e.Compensation, c)
		if err == nil {
			it.call.ExecutionID, it.call.CallID = rbID, n+1
			continue
		}
		for _, j := range plan.run[:n] {
			done := plan.items[j]
			claimed := &journal.Compensation{Status: execution.CompensationRunning, ExecutionID: rbID, CallID: done.call.CallID}
			_ = s.setCompensation(ctx, id, done.e.CallID, claimed, done.e.Compensation)
		}
		if errors.Is(err, journal.ErrConflict) {
			return fault.New(fault.Conflict, "another rollback of execution %s claimed its effects first: see its document", id)
		}
		fe := fault.Wrap(fault.Unavailable, err, "the journal of effects could not record the rollback, so nothing was compensated")
		fe.Retryable = true
		return fe
	}
	return nil
}
