package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/journal"
	"github.com/pml-sandbox/pml/internal/suspend"
)

// The end of a rollback: its claims settled from its own journal, and its
// answer.

// scriptOutcome is what rollbackScript returns of one compensating call.
type scriptOutcome struct {
	OK      bool   `json:"ok"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// outcomesOf reads rollbackScript's result from resp (none when it did
// not run to its end).
func outcomesOf(resp *execution.Response) []scriptOutcome {
	if resp == nil || !resp.OK {
		return nil
	}
	var out []scriptOutcome
	if json.Unmarshal(resp.Result, &out) != nil {
		return nil
	}
	return out
}

// finishRollback settles the claims rollback rbID holds on execution
// id's effects, now that the rollback ended (resp is its answer, nil when
// unknown): each from the rollback's own journal entry of its call.
func (s *Service) finishRollback(ctx context.Context, id, rbID string, resp *execution.Response) {
	var fallback *fault.Error
	if resp != nil && resp.Error != nil {
		fallback = resp.Error
	}
	if _, err := s.settleClaims(ctx, id, rbID, outcomesOf(resp), fallback); err != nil {
		s.log.ErrorContext(ctx, "rollback's compensations not recorded", "execution_id", id, "rollback_id", rbID, "err", err)
	}
}

// settleClaims settles every claim rollback rbID holds on id's effects,
// and reports how many it settled.
func (s *Service) settleClaims(ctx context.Context, id, rbID string, outcomes []scriptOutcome, fallback *fault.Error) (int, error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), journalTimeout)
	entries, err := s.journal.List(rctx, id)
	var calls []journal.Entry
	if err == nil {
		calls, err = s.journal.List(rctx, rbID)
	}
	cancel()
	if err != nil {
		return 0, err
	}
	byCall := make(map[int]journal.Entry, len(calls))
	for _, c := range calls {
		byCall[c.CallID] = c
	}
	n := 0
	for _, e := range entries {
		c := e.Compensation
		if c == nil || c.Status != execution.CompensationRunning || c.ExecutionID != rbID {
			continue
		}
		to := resolveClaim(*c, byCall, outcomes, fallback)
		if s.setCompensation(ctx, id, e.CallID, c, &to) == nil {
			n++
		}
	}
	return n, nil
}

// resolveClaim is what became of the compensation claim c names, from its
// rollback's journal (calls) and, for a call that never reached it, what
// the script said of it (outcomes) or why the rollback ended (fallback).
func resolveClaim(c journal.Compensation, calls map[int]journal.Entry, outcomes []scriptOutcome, fallback *fault.Error) journal.Compensation {
	out := c
	out.At, out.Error, out.Reason = time.Now().UTC(), nil, ""
	full := c.Server + ":" + c.Tool
	e, sent := calls[c.CallID]
	switch {
	case !sent:
		out.Status = execution.CompensationFailed
		switch i := c.CallID - 1; {
		case i < len(outcomes) && !outcomes[i].OK:
			out.Error = (&fault.Error{Code: fault.Code(outcomes[i].Code), Message: outcomes[i].Message}).WithTool(full)
		case fallback != nil:
			out.Error = fault.New(fallback.Code, "%s was never sent: the rollback ended first (%s)", full, fallback.Message).WithTool(full)
		default:
			out.Error = fault.New(fault.Cancelled, "%s was never sent: the rollback ended before it (cancelled, or expired waiting for a decision)", full).WithTool(full)
		}
	case e.Server != c.Server || e.Tool != c.Tool || e.ArgsDigest != c.ArgsDigest:
		// Not the call the claim names: never read as done.
		out.Status = execution.CompensationUnknown
		out.Error = fault.New(fault.Internal, "call %d of rollback %s is %s:%s, not this compensation (%s)", c.CallID, c.ExecutionID, e.Server, e.Tool, full)
	case e.Status == journal.Applied:
		out.Status = execution.CompensationDone
	case e.Status == journal.Failed || e.Status == journal.NotSent:
		out.Status, out.Error = execution.CompensationFailed, e.Error
	default:
		out.Status, out.Error = execution.CompensationUnknown, e.Error
		if out.Error == nil {
			out.Error = fault.New(fault.OutcomeUnknown, "%s was sent and no outcome was recorded", full).WithTool(full)
		}
	}
	return out
}

// settleLost settles the claims of rollbacks of id that were lost — they
// expired waiting for a decision, were cancelled before they recorded, or
// their process died — and answers CONFLICT while one is under way. It
// returns id's entries as they are now.
func (s *Service) settleLost(ctx context.Context, id string, entries []journal.Entry) ([]journal.Entry, *fault.Error) {
	seen := map[string]bool{}
	settled := 0
	for _, e := range entries {
		c := e.Compensation
		if c == nil || c.Status != execution.CompensationRunning || seen[c.ExecutionID] {
			continue
		}
		seen[c.ExecutionID] = true
		if s.rollbackUnderWay(ctx, c.ExecutionID, c.At) {
			return nil, &fault.Error{Code: fault.Conflict, Details: map[string]any{"rollback": execution.RollingBack, "rollback_execution_id": c.ExecutionID},
				Message: fmt.Sprintf("a rollback of execution %s is under way (execution %s): it may wait for a person's decision on its compensating calls", id, c.ExecutionID)}
		}
		n, err := s.settleClaims(ctx, id, c.ExecutionID, nil, nil)
		if err != nil {
			fe := fault.Wrap(fault.Unavailable, err, "the journal of effects could not be read")
			fe.Retryable = true
			return nil, fe
		}
		settled += n
	}
	if settled == 0 {
		return entries, nil
	}
	return s.readJournal(ctx, id)
}

// rollbackUnderWay reports whether rollback rbID, which claimed at at,
// may still record its compensations: it waits for decisions or runs
// from a resume, or it ran with no suspension and cannot have ended yet.
func (s *Service) rollbackUnderWay(ctx context.Context, rbID string, at time.Time) bool {
	if s.store != nil {
		rec, err := s.store.Load(ctx, rbID)
		switch {
		case err == nil:
			return rec.State == suspend.Suspended || rec.State == suspend.Resuming
		case errors.Is(err, suspend.ErrExpired):
			return false
		}
	}
	return time.Since(at) < s.maxTime+rollbackMargin
}

// rollbackAnswer is the answer of a rollback that ran rbID (resp its
// answer; none when nothing ran), read back from the journal.
func (s *Service) rollbackAnswer(ctx context.Context, id, rbID string, resp *execution.Response, plan *rollbackPlan) *execution.Rollback {
	entries, _ := s.readJournal(ctx, id)
	now := map[int]journal.Entry{}
	for _, e := range entries {
		now[e.CallID] = e
	}
	out := plan.answer(id, false)
	for i, it := range plan.items {
		if it.call == nil {
			continue
		}
		re := &out.Effects[i]
		c := now[it.e.CallID].Compensation
		switch {
		case c == nil || c.ExecutionID != rbID:
			re.Outcome, re.Error = execution.CompensationUnknown, fault.New(fault.Internal, "the journal no longer records this rollback's compensation")
		case c.Status == execution.CompensationRunning:
			re.Outcome = execution.OutcomePending
		default:
			re.Outcome, re.Error = c.Status, c.Error
		}
	}
	out.RollbackID = rbID
	if resp != nil {
		resp.RollbackOf = id
		out.Execution = resp
	}
	out.Status = execution.RollbackState(journal.Effects(entries, true))
	if out.Status == "" {
		out.Status = execution.NothingToRollBack
	}
	out.Message = rollbackMessage(id, out, resp)
	return out
}

// answer is the plan as a rollback's answer: what it would run (a dry
// run) or what it did without running anything.
func (p *rollbackPlan) answer(id string, dry bool) *execution.Rollback {
	out := &execution.Rollback{ExecutionID: id, DryRun: dry, Effects: make([]execution.RollbackEffect, len(p.items))}
	for i, it := range p.items {
		re := execution.RollbackEffect{CallID: it.e.CallID, Server: it.e.Server, Tool: it.e.Tool, Key: it.e.Key, Status: string(it.e.UserStatus(true)),
			Outcome: it.outcome, Reason: it.reason, Error: it.ferr, Compensation: it.call}
		if it.call != nil {
			re.Outcome = execution.OutcomePlanned
		}
		out.Effects[i] = re
	}
	if dry {
		entries := make([]journal.Entry, len(p.items))
		for i, it := range p.items {
			entries[i] = it.e
		}
		out.Status = execution.RollbackState(journal.Effects(entries, true))
		switch {
		case len(p.run) > 0:
			out.Status = execution.OutcomePlanned
		case out.Status == "":
			out.Status = execution.NothingToRollBack
		}
		out.Message = rollbackMessage(id, out, nil)
	}
	return out
}

// rollbackMessage says in a sentence what a rollback did.
func rollbackMessage(id string, rb *execution.Rollback, resp *execution.Response) string {
	counts := map[string]int{}
	applied := 0
	for _, e := range rb.Effects {
		counts[e.Outcome]++
		if e.Status == execution.EffectApplied {
			applied++
		}
	}
	if applied == 0 {
		return fmt.Sprintf("Nothing to do: execution %s has no applied effect (of %d effects), so there is nothing to undo.", id, len(rb.Effects))
	}
	var parts []string
	for _, o := range []string{execution.OutcomePlanned, execution.CompensationDone, execution.CompensationFailed, execution.CompensationUnknown,
		execution.OutcomePending, execution.CompensationSkipped} {
		if counts[o] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[o], o))
		}
	}
	msg := fmt.Sprintf("Execution %s: %s (of %d effects, %d applied).", id, strings.Join(parts, ", "), len(rb.Effects), applied)
	switch {
	case rb.DryRun:
		msg = "Dry run, nothing ran. " + msg
	case resp != nil && resp.Suspended():
		msg += fmt.Sprintf(" The rollback (execution %s) waits for a decision on %d compensating call(s) that need approval; its compensations are recorded once it ends.",
			rb.RollbackID, len(resp.Pending))
	}
	return msg
}
