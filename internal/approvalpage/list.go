package approvalpage

import (
	"context"
	"net/url"
	"strings"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/execution"
)

// The list of tool calls is grouped by who asked and read a page at a
// time: a page names at most ownersPerPage of them, each with its
// callsPerOwner soonest to expire and a link to all of theirs, a page of
// callsPerPage at a time. One caller's many suspensions never hide
// another's, and no page reads more than it shows.
const (
	ownersPerPage = 10
	callsPerOwner = 5
	callsPerPage  = 50
)

// callsList is the tool calls' part of the list.
type callsList struct {
	// Owner is set on the page of one owner's calls alone.
	Owner  string
	Owners []ownerCalls
	Error  string
	// More is the next page (of owners, or of Owner's calls); Back the
	// whole list, from an owner's page.
	More, Back string
}

// ownerCalls is one asker's calls on the list.
type ownerCalls struct {
	Owner string
	Items []Item
	// More opens all of Owner's calls, when the list shows only some.
	More string
}

// callGroups is a page of the tool calls that wait, grouped by who asked,
// from the owners' cursor after.
func (p *Page) callGroups(ctx context.Context, s session, after string) *callsList {
	d := p.decider(s)
	out := &callsList{}
	owners, next, ferr := p.opts.Lister.WaitingOwners(ctx, after, ownersPerPage, func(owner string) bool { return p.mayDecide(d, owner) })
	if ferr != nil {
		p.log.WarnContext(ctx, "approval list", "kind", "tool calls", "err", ferr)
		out.Error = "This list could not be read now."
		return out
	}
	for _, owner := range owners {
		docs, more, ferr := p.opts.Lister.WaitingOf(ctx, owner, "", callsPerOwner)
		if ferr != nil {
			p.log.WarnContext(ctx, "approval list", "kind", "tool calls", "owner", owner, "err", ferr)
			out.Error = "Part of this list could not be read now."
			continue
		}
		if len(docs) == 0 {
			continue // its executions all ended
		}
		g := ownerCalls{Owner: owner}
		for _, doc := range docs {
			g.Items = append(g.Items, p.callItem(s, d, doc))
		}
		if more != "" {
			g.More = p.ownerLink(s, owner, "")
		}
		out.Owners = append(out.Owners, g)
	}
	if next != "" {
		out.More = p.link(s, Prefix+"?owners="+url.QueryEscape(next))
	}
	return out
}

// ownerCalls is a page of owner's calls alone, from the cursor after.
func (p *Page) ownerCalls(ctx context.Context, s session, owner, after string) *callsList {
	d := p.decider(s)
	out := &callsList{Owner: owner, Back: p.link(s, Prefix)}
	if !p.mayDecide(d, owner) {
		return out // as though nothing waited: ids are not probed so
	}
	docs, next, ferr := p.opts.Lister.WaitingOf(ctx, owner, after, callsPerPage)
	if ferr != nil {
		p.log.WarnContext(ctx, "approval list", "kind", "tool calls", "owner", owner, "err", ferr)
		out.Error = "This list could not be read now."
		return out
	}
	if len(docs) > 0 {
		g := ownerCalls{Owner: owner}
		for _, doc := range docs {
			g.Items = append(g.Items, p.callItem(s, d, doc))
		}
		out.Owners = []ownerCalls{g}
	}
	if next != "" {
		out.More = p.ownerLink(s, owner, next)
	}
	return out
}

// ownerLink opens owner's calls alone, from the cursor after.
func (p *Page) ownerLink(s session, owner, after string) string {
	rel := Prefix + "?owner=" + url.QueryEscape(owner)
	if after != "" {
		rel += "&after=" + url.QueryEscape(after)
	}
	return p.link(s, rel)
}

// callItem is a suspended execution on the list.
func (p *Page) callItem(s session, person approval.Decider, doc *execution.Response) Item {
	var tools []string
	approvals, questions := false, false
	for _, pc := range doc.Pending {
		tools = append(tools, pendingLabel(pc))
		questions = questions || pc.Reason == execution.PendingQuestion
		approvals = approvals || pc.Reason != execution.PendingQuestion
	}
	may := p.opts.Policy.MayApprove(person, doc.Owner)
	return Item{Path: p.link(s, Prefix+"/"+url.PathEscape(doc.ExecutionID)), Title: "Execution " + doc.ExecutionID,
		Summary: strings.Join(tools, ", "), Owner: doc.Owner, Asked: doc.CreatedAt, Expires: doc.ExpiresAt,
		MayApprove: may, May: callsMay(may, approvals, questions)}
}
