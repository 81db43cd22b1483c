package approvalpage

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
)

// What an execution did to the world, and the way to undo it. The effects
// block (templates/effects.html) lists an execution's effects — each with
// its idempotency key, its status, what a rollback did about it, and the
// compensating call a rollback would run now (a dry run of
// Executor.Rollback) — and, where something can be undone, a form: "Roll
// back" on an execution that has ended, "Reject all and roll back" on one
// that waits (it is cancelled first: its pending calls never run, and the
// script makes nothing more). The rollback runs as an execution of the
// person's own; its compensating calls that need approval run on the
// person's click where the policy lets them consent (they were listed,
// call by call, beside the button, and the form names that list: a
// different one is refused), and otherwise wait for someone who may.

// formRollback is the decision word of the rollback form.
const formRollback = "rollback"

// effectsView is the effects block.
type effectsView struct {
	Effects []effectView
	// Applied counts the effects that happened; Unsure those whose
	// outcome is not known (pending or unknown).
	Applied, Unsure int
	// Waiting: the execution waits for decisions (else it has ended).
	Waiting bool
	// State is the execution's rollback state, "" when none ran.
	State string
	// The rollback form, when something can be undone: Planned counts
	// the compensating calls; Plan names them (planDigest); Consent says
	// that those needing approval run on the person's click.
	CanRollBack   bool
	Planned       int
	Action, CSRF  string
	Plan          string
	Version       int
	Consent       bool
	RollbackLabel string
}

// effectView is one effect, as a row.
type effectView struct {
	CallID       int
	Server, Tool string
	Key          string
	Status       string
	Error        string // its code and message, when it did not apply
	// Compensation is what a rollback did about it ("compensated by
	// shop.cancel_order, call 1 of ex_…"); Undo the compensating call a
	// rollback would run now; Why why it would not run one.
	Compensation string
	Undo         string
	Why          string
}

// newEffectsView is the page's view of effects, with plan (a dry run of
// the rollback; nil when it could not be read), nil when there are none.
func newEffectsView(effects []execution.Effect, plan *execution.Rollback) *effectsView {
	if len(effects) == 0 {
		return nil
	}
	v := &effectsView{State: execution.RollbackState(effects)}
	planned := map[int]execution.RollbackEffect{}
	if plan != nil {
		for _, e := range plan.Effects {
			planned[e.CallID] = e
		}
	}
	for _, e := range effects {
		ev := effectView{CallID: e.CallID, Server: e.Server, Tool: e.Tool, Key: e.Key, Status: e.Status}
		if e.Error != nil {
			ev.Error = string(e.Error.Code) + ": " + e.Error.Message
		}
		if c := e.Compensation; c != nil {
			ev.Compensation = compensationText(c)
		}
		if p, ok := planned[e.CallID]; ok && e.Status == execution.EffectApplied {
			switch {
			case p.Outcome == execution.OutcomePlanned && p.Compensation != nil:
				ev.Undo = p.Compensation.Server + "." + p.Compensation.Tool + " " + visible(string(p.Compensation.Args))
				v.Planned++
			case p.Reason != "":
				ev.Why = p.Reason
			}
		}
		switch e.Status {
		case execution.EffectApplied:
			v.Applied++
		case execution.EffectPending, execution.EffectUnknown:
			v.Unsure++
		}
		v.Effects = append(v.Effects, ev)
	}
	return v
}

// compensationText says what a rollback did about an effect.
func compensationText(c *execution.EffectCompensation) string {
	s := c.Status
	if c.Tool != "" {
		s += " by " + c.Tool
	}
	if c.ExecutionID != "" {
		s += fmt.Sprintf(" (call %d of %s)", c.CallID, c.ExecutionID)
	}
	switch {
	case c.Error != nil:
		s += ": " + string(c.Error.Code) + ": " + c.Error.Message
	case c.Reason != "":
		s += ": " + c.Reason
	}
	return s
}

// planDigest names a dry run's compensating calls (effect, tool,
// arguments): the form carries it, so that what runs on the person's
// click is what they were shown.
func planDigest(plan *execution.Rollback) string {
	h := sha256.New()
	for _, e := range plan.Effects {
		if c := e.Compensation; e.Outcome == execution.OutcomePlanned && c != nil {
			fmt.Fprintf(h, "%d\x00%s\x00%s\x00%s\x00", e.CallID, c.Server, c.Tool, c.Args)
		}
	}
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

// plan is a dry run of the rollback of id for the person (nil when it
// cannot be read: the block then shows no form).
func (p *Page) plan(ctx context.Context, s session, id string) *execution.Rollback {
	rb, ferr := p.opts.Service.Rollback(ctx, execution.RollbackRequest{ExecutionID: id, Principal: s.Principal, Channel: execution.ChannelPage, DryRun: true})
	if ferr != nil {
		return nil
	}
	return rb
}

// withRollbackForm adds the rollback form to v, where something can be
// undone.
func (p *Page) withRollbackForm(v *effectsView, s session, id string, version int, plan *execution.Rollback) {
	if v == nil || plan == nil || v.Planned == 0 {
		return
	}
	v.CanRollBack, v.Action, v.CSRF, v.Plan, v.Version = true, p.path(Prefix+"/"+id), p.token(s), planDigest(plan), version
	v.Consent = p.opts.Policy.MayConsent(s.Principal)
	v.RollbackLabel = "Roll back"
	if v.Waiting {
		v.RollbackLabel = "Reject all and roll back"
	}
}

// ended serves the page of an execution that does not wait: what it did,
// and the rollback form. Anyone who may not roll it back is told what an
// unknown id is told.
func (p *Page) ended(w http.ResponseWriter, r *http.Request, s session, id string) {
	plan := p.plan(r.Context(), s, id)
	if plan == nil {
		p.notWaiting(w, r)
		return
	}
	ev := &execView{ID: id, Owner: plan.Owner, Mine: plan.Owner == s.Principal, Effects: planEffectsView(plan)}
	p.withRollbackForm(ev.Effects, s, id, 0, plan)
	p.render(w, r, http.StatusOK, "ended", pageData{Title: "Execution " + id, Session: &s, Exec: ev})
}

// planEffectsView is the effects block of an execution that has ended,
// read from a dry run of its rollback alone: each effect, what rollbacks
// did about it, and what one would do now.
func planEffectsView(plan *execution.Rollback) *effectsView {
	if len(plan.Effects) == 0 {
		return nil
	}
	v := &effectsView{}
	if plan.Status != execution.OutcomePlanned && plan.Status != execution.NothingToRollBack {
		v.State = plan.Status
	}
	for i := len(plan.Effects) - 1; i >= 0; i-- {
		e := plan.Effects[i]
		ev := effectView{CallID: e.CallID, Server: e.Server, Tool: e.Tool, Key: e.Key, Status: e.Status}
		switch {
		case e.Outcome == execution.OutcomePlanned && e.Compensation != nil:
			ev.Undo = e.Compensation.Server + "." + e.Compensation.Tool + " " + visible(string(e.Compensation.Args))
			v.Planned++
		case e.Outcome == execution.CompensationSkipped:
			ev.Why = e.Reason
		default:
			ev.Compensation = e.Outcome + ": " + e.Reason
		}
		switch e.Status {
		case execution.EffectApplied:
			v.Applied++
		case execution.EffectPending, execution.EffectUnknown:
			v.Unsure++
		}
		v.Effects = append(v.Effects, ev)
	}
	return v
}

// rollBack serves the rollback form: a waiting execution is cancelled
// first (at the version the page showed), then its applied effects'
// compensations run, as an execution of the person's own.
func (p *Page) rollBack(w http.ResponseWriter, r *http.Request, s session, id string) {
	ctx := r.Context()
	d := p.decider(s)
	if doc, ferr := p.opts.Service.Waiting(ctx, id); ferr == nil {
		if !p.mayDecide(d, doc.Owner) {
			p.notWaiting(w, r)
			return
		}
		if strconv.Itoa(doc.StateVersion) != r.PostFormValue("version") {
			status, msg := refusal(fault.New(fault.Conflict, "moved on"))
			p.fail(w, r, status, msg)
			return
		}
	}
	plan := p.plan(ctx, s, id)
	if plan == nil {
		p.notWaiting(w, r)
		return
	}
	if planDigest(plan) != r.PostFormValue("plan") {
		p.fail(w, r, http.StatusConflict, "Nothing was rolled back: what a rollback would run has changed since this page was shown. Open the execution again, and read it again.")
		return
	}
	if _, ferr := p.opts.Service.Waiting(ctx, id); ferr == nil {
		if _, ferr := p.opts.Service.Cancel(ctx, execution.CancelRequest{ExecutionID: id, Principal: s.Principal}); ferr != nil {
			status, msg := refusal(ferr)
			p.fail(w, r, status, msg)
			return
		}
	}
	rb, ferr := p.opts.Service.Rollback(ctx, execution.RollbackRequest{ExecutionID: id, Principal: s.Principal, Channel: execution.ChannelPage,
		Source: execution.SourceHTTP, AllowDestructive: p.opts.Policy.MayConsent(s.Principal)})
	p.flush(ctx)
	if ferr != nil {
		p.log.InfoContext(ctx, "rollback refused", "execution_id", id, "principal", s.Principal, "code", string(ferr.Code))
		if ferr.Code == fault.NotFound {
			p.notWaiting(w, r)
			return
		}
		status, _ := refusal(ferr)
		p.fail(w, r, status, "Nothing was rolled back: "+ferr.Message)
		return
	}
	p.log.InfoContext(ctx, "rolled back on the approval page", "execution_id", id, "rollback_id", rb.RollbackID, "status", rb.Status, "principal", s.Principal)
	p.render(w, r, http.StatusOK, "rolledback", pageData{Title: "Rollback of " + id, Session: &s, Rolled: p.rolledView(s, rb)})
}

// rolledView is the answer to the rollback form.
type rolledView struct {
	Heading, Message string
	RollbackID       string
	Effects          []rolledEffect
	// Waits is the rollback's own page, when it waits for a decision.
	Waits    string
	ListPath string
}

type rolledEffect struct {
	CallID        int
	Tool, Undo    string
	Outcome, Why  string
	Status, Error string
}

func (p *Page) rolledView(s session, rb *execution.Rollback) *rolledView {
	v := &rolledView{Message: rb.Message, RollbackID: rb.RollbackID, ListPath: p.link(s, Prefix)}
	v.Heading = map[string]string{execution.RolledBack: "Rolled back", execution.PartiallyRolledBack: "Partly rolled back",
		execution.NotRolledBack: "Not rolled back", execution.RollingBack: "Rolling back: a decision is needed",
		execution.NothingToRollBack: "Nothing to roll back"}[rb.Status]
	if v.Heading == "" {
		v.Heading = "Rollback: " + rb.Status
	}
	for _, e := range rb.Effects {
		re := rolledEffect{CallID: e.CallID, Tool: e.Server + "." + e.Tool, Outcome: e.Outcome, Why: e.Reason, Status: e.Status}
		if c := e.Compensation; c != nil {
			re.Undo = c.Server + "." + c.Tool + " " + visible(string(c.Args))
		}
		if e.Error != nil {
			re.Error = string(e.Error.Code) + ": " + e.Error.Message
		}
		v.Effects = append(v.Effects, re)
	}
	if x := rb.Execution; x != nil && x.Suspended() {
		v.Waits = p.link(s, Prefix+"/"+url.PathEscape(rb.RollbackID))
	}
	return v
}
