package capability

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
)

// Guard is the one way capabilities are published. Every front's save
// (POST /capabilities, the MCP save_capability tool, pml capability save)
// and every suggestion learned from traces goes through Submit, and every
// draft through PublishDraft: the deployment's approval.Policy decides,
// with MayPublish, whether the decider may publish the author's code into
// the namespace as its owners stand at the write; a save it may not
// publish becomes a draft, which waits for someone who may.
type Guard struct {
	Registry Registry
	Policy   approval.Policy
	// DraftTTL is how long a draft waits (default DefaultDraftTTL).
	DraftTTL time.Duration
	// DraftLimits bound the drafts kept, per author and in all (zero
	// limits: the defaults).
	DraftLimits DraftLimits
	// Notify, when set, is told of every new draft (the deployment puts
	// it on the approvals bus). It must not block for long.
	Notify func(context.Context, DraftNotice)
	// Index, when set, is the process's discovery index: List reads it,
	// and every version published through the guard goes into it at once.
	Index *Index
}

// List is the latest version of every capability, from the index (the
// registry without one), as principal may see it (Shown).
func (g *Guard) List(ctx context.Context, principal string) ([]Capability, error) {
	var list []Capability
	var err error
	if g.Index != nil {
		list, err = g.Index.List(ctx)
	} else {
		list, err = g.Registry.List(ctx)
	}
	if err != nil {
		return nil, err
	}
	out := make([]Capability, len(list))
	for i, c := range list {
		out[i] = g.Shown(c, principal)
	}
	return out, nil
}

// Outcome is what a save or a draft's publication came to.
type Outcome struct {
	// Status is OutcomePublished (a new version), OutcomeExisting (an
	// equivalent version was published already: no new one) or
	// OutcomeDraft (the decider may not publish: a draft waits).
	Status     string      `json:"status"`
	Capability *Capability `json:"capability,omitempty"`
	Draft      *Draft      `json:"draft,omitempty"`
	// Message says what happened, and for a draft who may publish it
	// (roles, never principals).
	Message string `json:"message"`
}

// Outcome statuses.
const (
	OutcomePublished = "published"
	OutcomeExisting  = "existing"
	OutcomeDraft     = "draft"
)

// DraftNotice is what the deployment announces of a new draft: enough
// for an approver to find it, never its code (which may hold what its
// author should not have written down).
type DraftNotice struct {
	DraftID   string    `json:"draft_id"`
	Name      string    `json:"name"`
	Author    string    `json:"author"`
	CodeHash  string    `json:"code_hash"`
	CodeBytes int       `json:"code_bytes"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	// Publishers says who may publish it (roles).
	Publishers string `json:"publishers"`
	// ApprovalURL is the draft's page on the approval page, where a
	// person who may publish it signs in and decides (where the
	// deployment names its page's URL).
	ApprovalURL string `json:"approval_url,omitempty"`
}

// errNotAllowed is a save's refusal by the policy, which Submit turns
// into a draft.
var errNotAllowed = errors.New("the policy does not let this decider publish")

// Via is how d's publication of author's code is recorded
// (Capability.Via).
func Via(d approval.Decider, p approval.Policy) string {
	switch d.Channel {
	case execution.ChannelClient:
		return ViaClient
	case execution.ChannelPage:
		return ViaPage
	}
	if p.IsApprover(d.Principal) {
		return ViaApprover
	}
	return ViaCaller
}

// Submit saves what author proposes, as d decides it: published at once
// when the policy lets d publish author's code into the namespace
// (approval.Policy.MayPublish: an approver; the author itself where the
// caller decides or through a client the deployment trusts; ...), else
// kept as a draft for someone who may. Code equivalent to a version
// already published answers that version (nothing new is published, so
// nobody needs to decide). This is the one function a proposal from
// anywhere — a front, or a suggestion learned from traces — goes through.
func (g *Guard) Submit(ctx context.Context, d approval.Decider, author string, p Proposal) (Outcome, error) {
	c := p.Capability()
	if err := Validate(c); err != nil {
		return Outcome{}, err
	}
	c.Author, c.Publisher, c.Via = author, d.Principal, Via(d, g.Policy)
	saved, err := g.Registry.Save(ctx, c, func(owners []string) error {
		if g.Policy.MayPublishName(d, c.Name, author, owners) {
			return nil
		}
		return errNotAllowed
	})
	switch {
	case errors.Is(err, errNotAllowed):
		return g.draft(ctx, author, p)
	case err != nil:
		return Outcome{}, err
	}
	return g.published(saved, d.Principal), nil
}

// Propose keeps what author proposes as a draft, whoever could publish
// it: for proposals no one has decided on yet (a suggestion shown to its
// principal). Code equivalent to a published version answers that
// version.
func (g *Guard) Propose(ctx context.Context, author string, p Proposal) (Outcome, error) {
	c := p.Capability()
	if err := Validate(c); err != nil {
		return Outcome{}, err
	}
	saved, err := g.Registry.Save(ctx, c, func([]string) error { return errNotAllowed })
	switch {
	case errors.Is(err, errNotAllowed):
		return g.draft(ctx, author, p)
	case err != nil:
		return Outcome{}, err
	}
	return g.published(saved, author), nil
}

// published is the outcome of a save that published (or found) saved, as
// viewer may see it (Shown).
func (g *Guard) published(saved Saved, viewer string) Outcome {
	if !saved.Existing && g.Index != nil {
		g.Index.Saved(saved.Capability)
	}
	c := g.Shown(saved.Capability, viewer)
	if saved.Existing {
		return Outcome{Status: OutcomeExisting, Capability: &c,
			Message: fmt.Sprintf("%s version %d is equivalent (the same code, whitespace and comments aside, description, input schema and pins): no new version", c.Name, c.Version)}
	}
	return Outcome{Status: OutcomePublished, Capability: &c, Message: fmt.Sprintf("published %s version %d", c.Name, c.Version)}
}

// draft keeps p as author's draft: the pending one of author's drafts
// that proposes the same already, or a new one.
func (g *Guard) draft(ctx context.Context, author string, p Proposal) (Outcome, error) {
	c := p.Capability()
	stamp(&c)
	owners, err := g.Registry.Owners(ctx, c.Namespace())
	if err != nil {
		return Outcome{}, err
	}
	who := g.Policy.Publishers(author, owners)
	if !g.anyonePublishes(author, owners) {
		who = ""
	}
	drafts, err := g.Registry.Drafts(ctx)
	if err != nil {
		return Outcome{}, err
	}
	now := time.Now().UTC()
	for _, d := range drafts {
		if d.Pending(now) && d.Author == author && d.Name == c.Name && d.Equivalence == c.Equivalence {
			return Outcome{Status: OutcomeDraft, Draft: &d, Message: draftMessage(d, who, true)}, nil
		}
	}
	ttl := g.DraftTTL
	if ttl <= 0 {
		ttl = DefaultDraftTTL
	}
	d := Draft{ID: NewDraftID(), Proposal: p, Author: author, CodeHash: c.CodeHash, Equivalence: c.Equivalence,
		CreatedAt: now, ExpiresAt: now.Add(ttl), Status: DraftPending}
	if err := g.Registry.PutDraft(ctx, d, g.DraftLimits); err != nil {
		return Outcome{}, err
	}
	if g.Notify != nil {
		g.Notify(ctx, DraftNotice{DraftID: d.ID, Name: d.Name, Author: author, CodeHash: d.CodeHash, CodeBytes: len(d.Code),
			CreatedAt: d.CreatedAt, ExpiresAt: d.ExpiresAt, Publishers: who})
	}
	return Outcome{Status: OutcomeDraft, Draft: &d, Message: draftMessage(d, who, false)}, nil
}

// draftMessage says what became of a save kept as draft d, and who may
// publish it (roles; "" when nobody may under the policy, which then says
// how a deployment lets someone).
func draftMessage(d Draft, who string, again bool) string {
	what := "is kept as draft"
	if again {
		what = "already waits as draft"
	}
	if who == "" {
		return fmt.Sprintf("%s is not published, and nobody may publish it under this deployment's policy, which names no approver and lets no caller decide: "+
			"name approvers (PML_APPROVERS) or let the caller decide (PML_CALLER_DECIDES=on; locally, pml capability publish %s --caller-decides on). "+
			"Until then it %s %s until %s, and callers run the published version, if any.",
			d.Name, d.ID, what, d.ID, d.ExpiresAt.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("%s is not published: under this deployment's policy the caller may not publish it, so it %s %s until %s. "+
		"It is published by %s (POST /capabilities/drafts/%s/publish, or pml capability publish %s); until then callers run the published version, if any.",
		d.Name, what, d.ID, d.ExpiresAt.UTC().Format(time.RFC3339), who, d.ID, d.ID)
}

// anyonePublishes reports whether anyone at all may publish author's
// code into a namespace of owners under the policy (approval.Policy's
// Publishers names them; with none it names nobody).
func (g *Guard) anyonePublishes(author string, owners []string) bool {
	p := g.Policy
	if len(p.Approvers) > 0 || p.Custom {
		// An operator's policy file says who in its own words.
		return true
	}
	for _, ch := range []execution.Channel{execution.ChannelCaller, execution.ChannelPage, execution.ChannelClient} {
		if p.MayPublish(approval.Decider{Principal: author, Channel: ch}, author, owners) {
			return true
		}
	}
	return slices.ContainsFunc(owners, func(o string) bool {
		return p.MayPublish(approval.Decider{Principal: o, Channel: execution.ChannelPage}, author, owners)
	})
}

// MayPublishDraft reports whether d may publish draft dr into its
// namespace as its owners stand now (a front asks before it puts the
// question to a client's user whose answer would not count).
func (g *Guard) MayPublishDraft(ctx context.Context, d approval.Decider, dr Draft) (bool, error) {
	owners, err := g.Registry.Owners(ctx, dr.Namespace())
	if err != nil {
		return false, err
	}
	return g.Policy.MayPublishName(d, dr.Name, dr.Author, owners), nil
}

// PublishDraft publishes draft id as d decides it, if the policy lets d
// publish its author's code into the namespace as its owners stand at the
// write: the version and the draft's closing are one write. FORBIDDEN
// (nothing written) names who may; CONFLICT when the draft is closed.
func (g *Guard) PublishDraft(ctx context.Context, d approval.Decider, id string) (Outcome, error) {
	dr, err := g.readDraft(ctx, d.Principal, id)
	if err != nil {
		return Outcome{}, err
	}
	if dr.Status != DraftPending {
		return Outcome{}, fault.New(fault.Conflict, "draft %s is %s already%s", id, dr.Status, closedAs(dr))
	}
	c := dr.Proposal.Capability()
	c.Author, c.Publisher, c.Via, c.Draft = dr.Author, d.Principal, Via(d, g.Policy), dr.ID
	saved, err := g.Registry.Save(ctx, c, func(owners []string) error {
		if g.Policy.MayPublishName(d, dr.Name, dr.Author, owners) {
			return nil
		}
		who := "it is published by " + g.Policy.Publishers(dr.Author, owners)
		if !g.anyonePublishes(dr.Author, owners) {
			who = "nobody may publish it (name approvers with PML_APPROVERS, or let the caller decide with PML_CALLER_DECIDES=on)"
		}
		return &fault.Error{Code: fault.Forbidden, Details: map[string]any{"reason": "policy", "draft_id": id},
			Message: fmt.Sprintf("draft %s (%s) is not yours to publish under this deployment's policy: %s", id, dr.Name, who)}
	})
	if err != nil {
		return Outcome{}, err
	}
	out := g.published(saved, d.Principal)
	out.Draft = &dr
	dr.Status, dr.Version = DraftPublished, saved.Version
	if saved.Existing {
		out.Message = fmt.Sprintf("draft %s is equivalent to %s version %d, published already: the draft is closed as that version", id, saved.Name, saved.Version)
	}
	return out, nil
}

func closedAs(d Draft) string {
	if d.Status == DraftPublished {
		return fmt.Sprintf(" (as version %d)", d.Version)
	}
	return ""
}

// RejectDraft closes draft id for d: its author withdraws it, or someone
// who may publish it rejects it (an approver, an owner on the page...).
// reason is kept with it.
func (g *Guard) RejectDraft(ctx context.Context, d approval.Decider, id, reason string) (Draft, error) {
	dr, err := g.readDraft(ctx, d.Principal, id)
	if err != nil {
		return Draft{}, err
	}
	status := DraftRejected
	switch ok, err := g.MayPublishDraft(ctx, d, dr); {
	case err != nil:
		return Draft{}, err
	case ok || g.Policy.IsApprover(d.Principal):
	case d.Principal == dr.Author && d.Channel != execution.ChannelClient:
		status = DraftWithdrawn
	default:
		return Draft{}, &fault.Error{Code: fault.Forbidden, Details: map[string]any{"reason": "policy", "draft_id": id},
			Message: fmt.Sprintf("draft %s is not yours to reject: its author may withdraw it, and whoever may publish it may reject it", id)}
	}
	if len(reason) > execution.MaxReasonBytes {
		return Draft{}, fault.New(fault.InvalidRequest, "reason is over %d bytes", execution.MaxReasonBytes)
	}
	return g.Registry.CloseDraft(ctx, id, status, d.Principal, reason)
}

// mayRead reports whether principal may read draft dr: its author, an
// approver, or an owner of its namespace (who may publish it on the
// approval page).
func (g *Guard) mayRead(ctx context.Context, principal string, dr Draft) (bool, error) {
	if principal == dr.Author || g.Policy.IsApprover(principal) {
		return true, nil
	}
	owners, err := g.Registry.Owners(ctx, dr.Namespace())
	if err != nil {
		return false, err
	}
	return principal != "" && slices.Contains(owners, principal), nil
}

// readDraft is draft id as principal may read it; another's draft is
// answered as a missing one, so that ids cannot be probed.
func (g *Guard) readDraft(ctx context.Context, principal, id string) (Draft, error) {
	if err := CheckDraftID(id); err != nil {
		return Draft{}, err
	}
	dr, err := g.Registry.GetDraft(ctx, id)
	if err != nil {
		return Draft{}, err
	}
	ok, err := g.mayRead(ctx, principal, dr)
	if err != nil {
		return Draft{}, err
	}
	if !ok {
		return Draft{}, fault.New(fault.NotFound, "no draft %s (it may have expired)", id)
	}
	return dr, nil
}

// Draft is draft id as principal may see it (Shown).
func (g *Guard) Draft(ctx context.Context, principal, id string) (Draft, error) {
	dr, err := g.readDraft(ctx, principal, id)
	if err != nil {
		return Draft{}, err
	}
	return g.ShownDraft(dr, principal), nil
}

// Drafts are the drafts principal may read, oldest first; closed ones
// too when all is set (they stay until they expire).
func (g *Guard) Drafts(ctx context.Context, principal string, all bool) ([]Draft, error) {
	drafts, err := g.Registry.Drafts(ctx)
	if err != nil {
		return nil, err
	}
	out := []Draft{}
	now := time.Now()
	for _, dr := range drafts {
		if !all && !dr.Pending(now) {
			continue
		}
		ok, err := g.mayRead(ctx, principal, dr)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, g.ShownDraft(dr, principal))
		}
	}
	return out, nil
}

// Head is the published head of name (its latest version) as principal
// may see it (Shown); ok is false when nothing is published under the
// name. The approval page shows a draft against it.
func (g *Guard) Head(ctx context.Context, principal, name string) (c Capability, ok bool, err error) {
	found, err := g.Registry.Lookup(ctx, []string{name})
	if err != nil {
		return Capability{}, false, err
	}
	c, ok = found[name]
	if !ok {
		return Capability{}, false, nil
	}
	return g.Shown(c, principal), true, nil
}

// Shown is c as principal may see it: the principals that wrote and
// published it only to an approver or to those principals themselves
// (how it was published, Via, to everyone). The approvers' identities
// are the deployment's, not a caller's to learn.
func (g *Guard) Shown(c Capability, principal string) Capability {
	if g.Policy.IsApprover(principal) {
		return c
	}
	if c.Author != principal {
		c.Author = ""
	}
	if c.Publisher != principal {
		c.Publisher = ""
	}
	return c
}

// ShownDraft is dr as principal may see it: who closed it only to an
// approver or to that principal.
func (g *Guard) ShownDraft(dr Draft, principal string) Draft {
	if !g.Policy.IsApprover(principal) && dr.ClosedBy != principal {
		dr.ClosedBy = ""
	}
	return dr
}
