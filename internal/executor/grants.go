package executor

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/trace"
)

// Decisions that cover more than one call, as a resumption takes them:
// the decision on every pending call (execution.AllCalls), and grants
// (an approval with scope "site"). Both are checked, and the policy asked,
// before the execution is claimed: a refusal means nothing ran.

// expandAll gives every parked call that no decision names the decision
// on them all, if rr makes one: an approval leaves a call that waits for
// an answer to its server's question waiting (approving is not
// answering), a rejection rejects it too.
func expandAll(rr execution.ResumeRequest, decisions map[int]execution.Decision, parked []guest.ParkedCall) (map[int]execution.Decision, *fault.Error) {
	all, ok := rr.All()
	if !ok {
		return decisions, nil
	}
	for _, p := range parked {
		if _, named := decisions[p.CallID]; named || (all.Approve && len(p.Question) > 0) {
			continue
		}
		decisions[p.CallID] = execution.Decision{Approve: all.Approve, Reason: all.Reason}
	}
	if len(decisions) == 0 {
		return nil, fault.New(fault.InvalidRequest, "no call to decide: every pending call waits for an answer to its server's question, which approving all does not give")
	}
	return decisions, nil
}

// granting reports whether decisions make a grant.
func granting(decisions map[int]execution.Decision) bool {
	for _, d := range decisions {
		if d.Site != nil {
			return true
		}
	}
	return false
}

// via is what a decider decided as (trace.Event.Via).
func via(rr execution.ResumeRequest, owner string, policy approval.Policy) string {
	switch {
	case rr.Channel == execution.ChannelClient:
		return trace.ViaElicitation
	case rr.Channel == execution.ChannelPage:
		return trace.ViaPage
	case policy.IsApprover(rr.Principal):
		return trace.ViaApprover
	case rr.Principal == owner:
		return trace.ViaCaller
	}
	return ""
}

// grant makes the grants decisions ask for, each over the site of the call
// it approves, and extends them to the other parked calls of that site
// they cover (adding their approvals to decisions). It returns each
// approved call's approval, for its trace record: who approved it, and
// under which grant. The grants are added to st's plan.
func (s *Service) grant(rr execution.ResumeRequest, owner string, decisions map[int]execution.Decision, parked []guest.ParkedCall,
	st *durableState, at time.Time) (map[int]*trace.Approval, []trace.Grant, *fault.Error) {
	by, how := rr.Principal, via(rr, owner, s.policy)
	approvals := map[int]*trace.Approval{}
	for cid, d := range decisions {
		if d.Approve && d.Answers == nil {
			approvals[cid] = &trace.Approval{By: by, Via: how}
		}
	}
	if !granting(decisions) {
		return approvals, nil, nil
	}
	if st.Plan == nil {
		st.Plan = &planState{}
	}
	byID := map[int]guest.ParkedCall{}
	for _, p := range parked {
		byID[p.CallID] = p
	}
	var made []trace.Grant
	sites := map[string]bool{}
	for _, cid := range slices.Sorted(maps.Keys(decisions)) {
		d := decisions[cid]
		if d.Site == nil {
			continue
		}
		g, ferr := s.newGrant(cid, d, byID[cid], st.Plan, sites)
		if ferr != nil {
			return nil, nil, ferr
		}
		g.By, g.Via, g.At = by, how, at.UTC()
		approvals[cid].Grant = g.ID
		// The other calls of the site waiting now, oldest first, while
		// it covers them.
		for _, p := range parked {
			if _, named := decisions[p.CallID]; named || g.Left() == 0 || len(p.Question) > 0 ||
				p.Server != g.Server || p.Tool != g.Tool || siteKey(p.Line, p.Column) != g.Site || !pinsMatch(g.Pinned, p.Args) {
				continue
			}
			g.Used++
			decisions[p.CallID] = execution.Decision{Approve: true}
			approvals[p.CallID] = &trace.Approval{By: by, Via: how, Grant: g.ID}
		}
		st.Plan.Grants = append(st.Plan.Grants, g)
		made = append(made, trace.Grant{ID: g.ID, Tool: g.Server + ":" + g.Tool, Site: g.Site, Line: g.Line, Max: g.Max, Pinned: pinnedKeys(g.Pinned)})
	}
	return approvals, made, nil
}

// newGrant checks one approval with scope "site" on parked call p and
// makes its grant, its first call spent on p.
func (s *Service) newGrant(cid int, d execution.Decision, p guest.ParkedCall, plan *planState, sites map[string]bool) (execution.Grant, *fault.Error) {
	site := siteKey(p.Line, p.Column)
	switch {
	case d.Site.Count < 1 || d.Site.Count > s.maxGrant:
		return execution.Grant{}, fault.New(fault.InvalidRequest, "a grant covers from 1 to %d calls here (this deployment's bound), not %d", s.maxGrant, d.Site.Count)
	case len(p.Question) > 0:
		return execution.Grant{}, fault.New(fault.InvalidRequest, "call #%d waits for an answer to its server's question: answer it; a grant covers calls that need approval", cid)
	case site == "":
		return execution.Grant{}, fault.New(fault.InvalidRequest, "call #%d has no call site in the script (it came from eval'd code or a promise job): approve it alone", cid)
	case sites[p.Server+":"+p.Tool+"@"+site]:
		return execution.Grant{}, fault.New(fault.InvalidRequest, "two grants over one call site (%s.%s at %s) in one decision", p.Server, p.Tool, site)
	case len(plan.Grants) >= maxGrants:
		return execution.Grant{}, fault.New(fault.InvalidRequest, "an execution holds at most %d grants: approve this call alone", maxGrants)
	}
	sites[p.Server+":"+p.Tool+"@"+site] = true
	pins, ferr := pinned(p.Args, d.Site.Pin)
	if ferr != nil {
		return execution.Grant{}, ferr
	}
	id := "g" + strconv.Itoa(len(plan.Grants)+1)
	return execution.Grant{ID: id, Server: p.Server, Tool: p.Tool, Site: site, Line: plan.line(p.Server, p.Tool, p.Line, p.Column),
		Max: d.Site.Count, Used: 1, Pinned: pins}, nil
}

func pinnedKeys(pins []execution.PinnedArg) []string {
	out := make([]string, len(pins))
	for i, p := range pins {
		out[i] = p.Key
	}
	return out
}

// grantRefusal is the policy's refusal of a grant.
func (s *Service) grantRefusal(id string) *fault.Error {
	return &fault.Error{Code: fault.Forbidden, Details: map[string]any{"reason": "policy"},
		Message: fmt.Sprintf("granting calls is not the caller's to do here: under this deployment's policy the calls execution %s waits for are approved by %s", id, s.policy.Deciders())}
}
