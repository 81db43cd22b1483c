package executor

import (
	"context"
	"fmt"
	"time"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/policy"
	"github.com/pml-sandbox/pml/internal/trace"
)

// verdict is the policy set's outcome for one call of the run, decided
// once (by the park decision, or when the call is made) and kept by call
// id: its limits are counted once.
// A call sent again with the answers to its server's question (retry) was
// counted when it was first sent.
func (h *toolHost) verdict(ctx context.Context, c guest.Call, e entry, retry bool) policy.Outcome {
	h.vmu.Lock()
	if out, ok := h.verdicts[c.ID]; ok {
		h.vmu.Unlock()
		return out
	}
	h.vmu.Unlock()
	pc := policy.Call{Principal: h.req.Principal, Tool: e.tool, Args: c.Args, Source: string(h.req.Source),
		Consent: h.req.AllowDestructive, Approved: h.approved[c.ID] || h.gate.covers(c.ID), ExecutionID: h.req.ExecutionID, Session: h.session,
		Uncounted: retry}
	if h.req.Parent != nil {
		pc.Chain = h.req.Parent.Path()
	}
	out := h.service.gate.Check(ctx, pc)
	h.vmu.Lock()
	defer h.vmu.Unlock()
	if prev, ok := h.verdicts[c.ID]; ok {
		return prev // decided meanwhile (never: one call is decided by one goroutine)
	}
	if h.verdicts == nil {
		h.verdicts = map[int]policy.Outcome{}
	}
	h.verdicts[c.ID] = out
	return out
}

// forget drops the verdict kept for call id: a grant that came to cover
// the call since (the park decision found it) makes it an approved one.
func (h *toolHost) forget(id int) {
	h.vmu.Lock()
	defer h.vmu.Unlock()
	delete(h.verdicts, id)
}

// policiesOf are the ids of the policies that decided call id, for its
// trace record.
func (h *toolHost) policiesOf(id int) []string {
	h.vmu.Lock()
	defer h.vmu.Unlock()
	return h.verdicts[id].Decision.Policies
}

// refusal is the error of a call the policy set does not let run now, nil
// for one it does. A call it would let a person approve gets the refusal
// it always has (needsApproval), naming the policies that ask.
func refusal(full string, out policy.Outcome, h *toolHost, e entry) *fault.Error {
	switch out.Verdict {
	case policy.Allow:
		return nil
	case policy.Ask:
		if out.Limit != nil {
			return overLimit(full, out, h.req.Approval != execution.ApprovalSuspend).WithTool(full)
		}
		fe := needsApproval(full, e.tool, h.req)
		inCapability := h.req.Approval == execution.ApprovalSuspend && h.req.Parent != nil
		switch {
		case !e.tool.NeedsApproval() && !inCapability:
			// The set asks for a person where the tool does not say it
			// needs one: say so, in the set's words.
			fe = fault.New(fault.Forbidden, "%s needs a person's approval under this deployment's policy set (%s): "+
				`send approval "suspend" to ask for it`, full, out.Decision.Why()).WithTool(full)
		case len(out.Decision.Policies) > 0 && !isDefaultAsk(out.Decision):
			fe.Message += " (" + out.Decision.Why() + ")"
		}
		return withPolicies(fe, out.Decision)
	case policy.OverLimit:
		return overLimit(full, out, false).WithTool(full)
	}
	msg := fmt.Sprintf("%s is refused by this deployment's policy set: %s", full, out.Decision.Why())
	if out.Reason != "" {
		msg = fmt.Sprintf("%s is refused: %s", full, out.Reason)
	}
	return withPolicies(fault.New(fault.Forbidden, "%s", msg).WithTool(full), out.Decision)
}

// isDefaultAsk: the default set's own reason to ask, which needsApproval
// already says in words.
func isDefaultAsk(d policy.Decision) bool {
	return len(d.Policies) == 1 && d.Policies[0] == "call-needs-a-person"
}

func withPolicies(fe *fault.Error, d policy.Decision) *fault.Error {
	if len(d.Policies) == 0 {
		return fe
	}
	details, _ := fe.Details.(map[string]any)
	if details == nil {
		details = map[string]any{}
	}
	details["reason"] = "policy"
	details["policies"] = d.Policies
	fe.Details = details
	return fe
}

// overLimit is the LIMIT_EXCEEDED of a call past a policy's limit (or,
// with ask, the FORBIDDEN of one a person would have to decide, in a
// request that does not wait).
func overLimit(full string, out policy.Outcome, ask bool) *fault.Error {
	l := out.Limit
	msg := fmt.Sprintf("%s: policy %q allows %s to each principal (%s), and this call would pass it; the window ends at %s",
		full, l.Policy, l.String(), l.Text, out.WindowEnds.UTC().Format(time.RFC3339))
	if ask {
		fe := fault.New(fault.Forbidden, "%s. A person may let it pass: send approval \"suspend\" to ask", msg)
		fe.Details = map[string]any{"reason": "limit", "policy": l.Policy, "limit": l.Text}
		return fe
	}
	fe := fault.Limitf("policy", "%s", msg)
	fe.Details = map[string]any{"policy": l.Policy, "limit": l.Text, "window_ends": out.WindowEnds.UTC().Format(time.RFC3339)}
	return fe
}

// consentedFor is what the tool's source is told was consented to
// (CallOptions.Lineage.AllowDestructive): a tool the policy set let run
// may run whatever it is (the source's own check, and its server's
// allow_destructive, still apply). A capability's run inherits consent
// only from the request's allow_destructive, or from a person's approval
// of a call that needed one, as it always has: what the policy allowed is
// the call, never what the run it starts will do.
func consentedFor(e entry, out policy.Outcome, approvedNeeded, retry bool) bool {
	if e.tool.Kind == trace.KindCapability {
		return approvedNeeded || retry
	}
	return out.Verdict == policy.Allow
}
