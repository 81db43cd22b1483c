package execution

import (
	"bytes"
	"encoding/json"

	"github.com/pml-sandbox/pml/internal/fault"
)

// Undo. The deployment may declare, per tool, the call that undoes a call
// of it (a compensation: internal/compensate). A rollback runs the
// compensations of an execution's applied effects, newest first, as an
// execution of its own (docs/EFFECTS.md, "Undo"), and records on each
// effect's journal entry what became of its compensation.

// The statuses of an effect's compensation (EffectCompensation.Status),
// as its journal entry records them.
const (
	// CompensationRunning: a rollback claimed the effect and its
	// compensating call has no outcome yet (it runs, or waits for a
	// person's approval).
	CompensationRunning = "running"
	// CompensationDone: the compensating call was applied. A later
	// rollback never undoes the effect again.
	CompensationDone = "compensated"
	// CompensationFailed: the compensating call failed, was refused or
	// rejected, or was never sent; a later rollback tries again.
	CompensationFailed = "failed"
	// CompensationUnknown: the compensating call was sent and no outcome
	// was recorded; a later rollback does not send it again (it may have
	// happened): check with the server.
	CompensationUnknown = "unknown"
	// CompensationSkipped: the effect could not be compensated (no
	// compensation declared, its arguments or result not kept, a
	// reference that found nothing); Reason says why. A later rollback
	// tries again (the deployment may have declared one since).
	CompensationSkipped = "skipped"
)

// The rollback states of an execution (Response.Rollback, the "rollback"
// of GET /executions/{id}), read from its applied effects'
// compensations. An execution no rollback has touched has none.
const (
	// RollingBack: a compensation of the execution is running (or waits
	// for a person).
	RollingBack = "rolling_back"
	// RolledBack: every applied effect was compensated.
	RolledBack = "rolled_back"
	// PartiallyRolledBack: some applied effects were compensated and some
	// were not (failed, unknown, skipped).
	PartiallyRolledBack = "partially_rolled_back"
	// NotRolledBack: a rollback ran and compensated none of the applied
	// effects.
	NotRolledBack = "not_rolled_back"
	// NothingToRollBack is a rollback's answer (Rollback.Status) for an
	// execution with no applied effect: nothing ran, nothing was recorded.
	NothingToRollBack = "nothing_to_do"
)

// EffectCompensation is what became of an effect's compensation, as the
// execution's document lists it (Effect.Compensation).
type EffectCompensation struct {
	// Status is CompensationRunning, CompensationDone…
	Status string `json:"status"`
	// ExecutionID and CallID name the compensating call in the rollback's
	// execution; Tool is that call's "server:tool".
	ExecutionID string `json:"execution_id,omitempty"`
	CallID      int    `json:"call_id,omitempty"`
	Tool        string `json:"tool,omitempty"`
	// Reason says why it was skipped; Error why it failed or is unknown.
	Reason string       `json:"reason,omitempty"`
	Error  *fault.Error `json:"error,omitempty"`
}

// RollbackState is the rollback state of an execution whose effects are
// effects: "" when no effect carries a compensation, else RollingBack
// while one runs, else, of the applied effects, RolledBack when every one
// was compensated, PartiallyRolledBack when some were, NotRolledBack when
// none was.
func RollbackState(effects []Effect) string {
	touched, applied, done := false, 0, 0
	for _, e := range effects {
		c := e.Compensation
		if c == nil {
			if e.Status == EffectApplied {
				applied++
			}
			continue
		}
		touched = true
		if c.Status == CompensationRunning {
			return RollingBack
		}
		if e.Status == EffectApplied {
			applied++
			if c.Status == CompensationDone {
				done++
			}
		}
	}
	switch {
	case !touched:
		return ""
	case applied > 0 && done == applied:
		return RolledBack
	case done > 0:
		return PartiallyRolledBack
	}
	return NotRolledBack
}

// RollbackRequest asks to undo an execution's applied effects (POST
// /executions/{id}/rollback, rollback_execution, pml rollback, the approval
// page). The JSON fields are the route's optional body.
type RollbackRequest struct {
	// AllowDestructive lets compensating calls of tools that need
	// approval run without asking, as an execute request's does (the
	// policy decides who may set it).
	AllowDestructive bool `json:"allow_destructive,omitempty"`
	// Approval is what becomes of a compensating call that needs approval
	// otherwise: ApprovalSuspend (the default where the service keeps
	// suspended executions) parks it for a person, and the rollback waits;
	// ApprovalRefuse fails it FORBIDDEN (the compensation reads failed).
	Approval string `json:"approval,omitempty"`
	// DryRun answers what a rollback would run, and runs nothing.
	DryRun bool `json:"dry_run,omitempty"`

	// Set by the host, never by the caller's JSON.

	ExecutionID string `json:"-"`
	// Principal is who asks: the execution's owner, or whoever the policy
	// lets decide for the owner (an approver; on the page, a person who
	// may decide). Anyone else is told the id is unknown. The rollback's
	// own execution belongs to Principal.
	Principal string  `json:"-"`
	Channel   Channel `json:"-"`
	Source    Source  `json:"-"`
	// TraceHeader is the caller's X-Ray header, as Request.TraceHeader.
	TraceHeader string `json:"-"`
}

// DecodeRollback reads a rollback request's optional body for execution
// id, strictly. Errors are INVALID_REQUEST.
func DecodeRollback(data []byte, id string) (RollbackRequest, *fault.Error) {
	var rr RollbackRequest
	if len(bytes.TrimSpace(data)) > 0 {
		if ferr := decodeStrict(data, &rr, "a rollback request"); ferr != nil {
			return RollbackRequest{}, ferr
		}
	}
	if ferr := CheckApproval(rr.Approval); ferr != nil {
		return RollbackRequest{}, ferr
	}
	rr.ExecutionID = id
	return rr, nil
}

// Rollback is a rollback's answer: what became of each effect of the
// execution, newest first.
type Rollback struct {
	// ExecutionID is the execution rolled back.
	ExecutionID string `json:"execution_id"`
	// Status is the execution's rollback state after this rollback
	// (RolledBack, PartiallyRolledBack, NotRolledBack, RollingBack while
	// the rollback waits for a person), or NothingToRollBack. A dry run's
	// is OutcomePlanned when something would run, else the state as it
	// stands.
	Status  string `json:"status"`
	Message string `json:"message"`
	DryRun  bool   `json:"dry_run,omitempty"`
	// RollbackID is the rollback's own execution ("" when nothing ran):
	// its document and trace are any execution's; Execution is its
	// answer (calls summarised).
	RollbackID string           `json:"rollback_execution_id,omitempty"`
	Effects    []RollbackEffect `json:"effects"`
	Execution  *Response        `json:"execution,omitempty"`
	// Owner is whose the execution rolled back is (set by the host, never
	// sent): the approval page names it.
	Owner string `json:"-"`
}

// The outcomes of one effect in a rollback (RollbackEffect.Outcome): a
// compensation's status (CompensationDone, CompensationFailed,
// CompensationUnknown, CompensationSkipped), or:
const (
	// OutcomePending: its compensating call waits for a person (the
	// rollback suspended) or runs.
	OutcomePending = "pending"
	// OutcomePlanned: what a dry run would run.
	OutcomePlanned = "planned"
)

// RollbackEffect is one effect in a rollback's answer.
type RollbackEffect struct {
	CallID int    `json:"call_id"`
	Server string `json:"server"`
	Tool   string `json:"tool"`
	Key    string `json:"key"`
	// Status is the effect's own (applied, failed…).
	Status string `json:"status"`
	// Outcome is what the rollback did about it; Reason why it skipped it
	// (or that an earlier rollback compensated it); Error why its
	// compensation failed or is unknown.
	Outcome string       `json:"outcome"`
	Reason  string       `json:"reason,omitempty"`
	Error   *fault.Error `json:"error,omitempty"`
	// Compensation is the compensating call, when there is one.
	Compensation *CompensationCall `json:"compensation,omitempty"`
}

// CompensationCall is a compensating call: the tool of the effect's server
// that undoes it, its arguments as the template built them, and its call
// in the rollback's execution.
type CompensationCall struct {
	Server      string          `json:"server"`
	Tool        string          `json:"tool"`
	Args        json.RawMessage `json:"args"`
	ExecutionID string          `json:"execution_id,omitempty"`
	CallID      int             `json:"call_id,omitempty"`
}
