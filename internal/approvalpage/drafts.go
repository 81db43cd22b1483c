package approvalpage

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pmezard/go-difflib/difflib"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
)

// Capability drafts on the page. A save the policy does not let its
// caller publish is kept as a draft (capability.Guard); the list shows
// the drafts the person signed in may publish, and a draft's page — at
// /approvals/<draft id>, the executions' route, told apart by the id's
// form (cd_…, never an execution's ex_…), so a deployment routes nothing
// new — shows what publishing it would make every caller of the name run:
// its code whole, its description, input schema, pins and provenance, its
// author to those who may see principals, and, where it replaces a
// published version, a line diff against that version's code. Publish
// and Reject (with a reason) go through the guard as decisions on the
// page channel, so the deployment's one policy (approval.Policy.
// MayPublish) decides. A decision names the published head it was shown
// against: if another version was published since, it is refused, and a
// decided draft is closed, so a replayed form is refused too.

// Drafts is what the page reads and decides of capability drafts: the
// deployment's capability.Guard.
type Drafts interface {
	// Drafts are the drafts principal may read (pending ones).
	Drafts(ctx context.Context, principal string, all bool) ([]capability.Draft, error)
	// Draft is one draft as principal may read it; NOT_FOUND for one
	// principal may not read, as for an unknown id.
	Draft(ctx context.Context, principal, id string) (capability.Draft, error)
	// PublishDraft and RejectDraft decide a draft as d.
	PublishDraft(ctx context.Context, d approval.Decider, id string) (capability.Outcome, error)
	RejectDraft(ctx context.Context, d approval.Decider, id, reason string) (capability.Draft, error)
	// MayPublishDraft reports whether d's decision would publish dr now.
	MayPublishDraft(ctx context.Context, d approval.Decider, dr capability.Draft) (bool, error)
	// Head is the published head of name, if any.
	Head(ctx context.Context, principal, name string) (capability.Capability, bool, error)
}

// isDraftID reports whether id is a capability draft's (cd_…) rather
// than an execution's.
func isDraftID(id string) bool { return strings.HasPrefix(id, "cd_") }

// draftsProvider lists the drafts the person may publish.
type draftsProvider struct{ p *Page }

func (draftsProvider) Kind() string   { return "Capability drafts" }
func (draftsProvider) listID() string { return "drafts" }

func (c draftsProvider) Waiting(ctx context.Context, person approval.Decider, limit int) ([]Item, error) {
	drafts, err := c.p.opts.Drafts.Drafts(ctx, person.Principal, false)
	if err != nil {
		return nil, err
	}
	var items []Item
	for _, dr := range drafts {
		if len(items) == limit {
			break
		}
		may, err := c.p.opts.Drafts.MayPublishDraft(ctx, person, dr)
		if err != nil {
			return nil, err
		}
		if !may {
			continue
		}
		items = append(items, Item{Path: Prefix + "/" + url.PathEscape(dr.ID), Title: "Draft of " + dr.Name,
			Summary: fmt.Sprintf("publish %s (%d bytes of code, %s)", dr.Name, len(dr.Code), dr.CodeHash),
			Owner:   c.p.authorShown(person.Principal, dr.Author), Asked: dr.CreatedAt, Expires: dr.ExpiresAt,
			MayApprove: true, May: "publish or reject"})
	}
	return items, nil
}

// authorShown is a draft's author as viewer may see it: to an approver
// and to the author, as capability.Guard.Shown shows a version's author.
func (p *Page) authorShown(viewer, author string) string {
	if viewer == author || p.opts.Policy.IsApprover(viewer) {
		return author
	}
	return "another principal (shown to approvers only)"
}

// draftView is a draft as the person reads it.
type draftView struct {
	ID, Name, Call string
	Author         string
	Status         string
	Pending        bool
	Closed         string // how a closed draft was decided
	Created        time.Time
	Expires        time.Time
	Description    string
	Schema         string
	Pins           []string
	Provenance     []string
	CodeHash       string
	CodeBytes      int
	Code           []sourceLine
	// Head is the version the draft would replace; Diff the changes from
	// its code to the draft's, in hunks; DiffNote says why there is none.
	Head     *headView
	Diff     []diffHunk
	DiffNote string
	// What the person may do, and the forms' action and the head version
	// they name (0: none).
	MayPublish, MayReject, Withdraw bool
	Action                          string
	HeadVersion                     int
}

type headView struct {
	Version   int
	CodeHash  string
	Published time.Time
	Lines     int
}

type diffHunk struct {
	Header string
	Lines  []diffLine
}

type diffLine struct {
	Op   string // "+", "-" or " "
	Text string
}

// maxDiffLines bounds each side of a diff: the matcher's cost grows with
// the product of the lengths, and the page must not be a way to make it
// work for long. Past it both codes are still shown whole.
const maxDiffLines = 2000

// diffContext is how many unchanged lines a hunk shows around changes.
const diffContext = 3

// lineDiff is the line diff from old to new, in hunks with context
// (difflib's sequence matcher, as Python's difflib).
func lineDiff(old, new string) ([]diffHunk, string) {
	a, b := codeLines(old), codeLines(new)
	if len(a) > maxDiffLines || len(b) > maxDiffLines {
		return nil, fmt.Sprintf("The code is over %d lines: no diff is computed. Both versions are shown whole.", maxDiffLines)
	}
	m := difflib.NewMatcher(a, b)
	var hunks []diffHunk
	for _, group := range m.GetGroupedOpCodes(diffContext) {
		first, last := group[0], group[len(group)-1]
		h := diffHunk{Header: fmt.Sprintf("@@ -%d,%d +%d,%d @@", first.I1+1, last.I2-first.I1, first.J1+1, last.J2-first.J1)}
		for _, op := range group {
			switch op.Tag {
			case 'e':
				for _, l := range a[op.I1:op.I2] {
					h.Lines = append(h.Lines, diffLine{Op: " ", Text: visible(l)})
				}
			case 'd', 'r', 'i':
				for _, l := range a[op.I1:op.I2] {
					h.Lines = append(h.Lines, diffLine{Op: "-", Text: visible(l)})
				}
				for _, l := range b[op.J1:op.J2] {
					h.Lines = append(h.Lines, diffLine{Op: "+", Text: visible(l)})
				}
			}
		}
		hunks = append(hunks, h)
	}
	if len(hunks) == 0 {
		return nil, "The code is the same as the published version's, line for line: the draft changes what else it says (description, input schema or pins)."
	}
	return hunks, ""
}

func codeLines(code string) []string {
	code = strings.TrimRight(strings.ReplaceAll(code, "\r\n", "\n"), "\n")
	if code == "" {
		return nil
	}
	return strings.Split(code, "\n")
}

// draft serves a draft's page.
func (p *Page) draft(w http.ResponseWriter, r *http.Request, s session, id string) {
	if p.opts.Drafts == nil {
		p.notWaiting(w, r)
		return
	}
	dr, err := p.opts.Drafts.Draft(r.Context(), s.Principal, id)
	if err != nil {
		if f := fault.As(err); f.Code != fault.NotFound && f.Code != fault.InvalidRequest {
			p.log.WarnContext(r.Context(), "reading a draft", "draft_id", id, "err", err)
			p.fail(w, r, http.StatusServiceUnavailable, "The draft could not be read now; try again.")
			return
		}
		p.notWaiting(w, r)
		return
	}
	v, err := p.draftView(r.Context(), s, dr)
	if err != nil {
		p.log.WarnContext(r.Context(), "reading a draft", "draft_id", id, "err", err)
		p.fail(w, r, http.StatusServiceUnavailable, "The draft could not be read now; try again.")
		return
	}
	p.render(w, r, http.StatusOK, "draft", pageData{Title: "Draft of " + dr.Name, Session: &s, Draft: v})
}

func (p *Page) draftView(ctx context.Context, s session, dr capability.Draft) (*draftView, error) {
	d := p.decider(s)
	now := p.now()
	v := &draftView{ID: dr.ID, Name: dr.Name, Call: "mcp." + strings.Replace(dr.Name, ":", ".", 1), Author: p.authorShown(s.Principal, dr.Author),
		Status: dr.Status, Pending: dr.Pending(now), Created: dr.CreatedAt, Expires: dr.ExpiresAt, Description: visible(dr.Description),
		CodeHash: dr.CodeHash, CodeBytes: len(dr.Code), Code: splitLines(dr.Code), Action: p.path(Prefix + "/" + url.PathEscape(dr.ID))}
	switch {
	case dr.Status == capability.DraftPublished:
		v.Closed = fmt.Sprintf("This draft was published as version %d.", dr.Version)
	case dr.Status != capability.DraftPending:
		v.Closed = "This draft was " + dr.Status
		if dr.ClosedBy != "" {
			v.Closed += " by " + who(dr.ClosedBy)
		}
		if dr.Reason != "" {
			v.Closed += " (reason: " + visible(dr.Reason) + ")"
		}
		v.Closed += ": nothing was published."
	case !v.Pending:
		v.Status, v.Closed = "expired", "This draft expired: nothing was published."
	}
	if len(dr.InputSchema) > 0 {
		var buf bytes.Buffer
		if json.Indent(&buf, dr.InputSchema, "", "  ") == nil {
			v.Schema = visible(buf.String())
		} else {
			v.Schema = visible(string(dr.InputSchema))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(dr.Pins)) {
		v.Pins = append(v.Pins, visible(name)+" version "+strconv.Itoa(dr.Pins[name]))
	}
	for _, e := range dr.Provenance {
		v.Provenance = append(v.Provenance, visible(e))
	}
	head, ok, err := p.opts.Drafts.Head(ctx, s.Principal, dr.Name)
	if err != nil {
		return nil, err
	}
	if ok {
		v.Head = &headView{Version: head.Version, CodeHash: head.CodeHash, Published: head.UpdatedAt, Lines: len(codeLines(head.Code))}
		v.HeadVersion = head.Version
		v.Diff, v.DiffNote = lineDiff(head.Code, dr.Code)
	}
	if v.Pending {
		may, err := p.opts.Drafts.MayPublishDraft(ctx, d, dr)
		if err != nil {
			return nil, err
		}
		v.MayPublish = may
		v.MayReject = may || p.opts.Policy.IsApprover(s.Principal)
		v.Withdraw = !v.MayReject && s.Principal == dr.Author
	}
	return v, nil
}

// decideDraft takes the person's decision on a draft: publish, or reject
// (withdraw, for its author) with a reason.
func (p *Page) decideDraft(w http.ResponseWriter, r *http.Request, s session, id string) {
	if p.opts.Drafts == nil {
		p.notWaiting(w, r)
		return
	}
	word, reason := r.PostFormValue("decision"), strings.TrimSpace(r.PostFormValue("reason"))
	head, err := strconv.Atoi(r.PostFormValue("head"))
	if (word != "publish" && word != "reject") || err != nil || head < 0 || len(reason) > execution.MaxReasonBytes {
		p.fail(w, r, http.StatusBadRequest, "The form is not one this page sent: it names no decision or published version, or its reason is over "+
			strconv.Itoa(execution.MaxReasonBytes)+" bytes.")
		return
	}
	if capability.CheckDraftID(id) != nil {
		p.notWaiting(w, r)
		return
	}
	ctx, d := r.Context(), p.decider(s)
	dr, err := p.opts.Drafts.Draft(ctx, s.Principal, id)
	if err != nil {
		p.draftRefused(w, r, id, word, s, err)
		return
	}
	// The person decided against the version shown them: if another was
	// published since, what they read is not what they would replace.
	now, ok, err := p.opts.Drafts.Head(ctx, s.Principal, dr.Name)
	if err != nil {
		p.draftRefused(w, r, id, word, s, err)
		return
	}
	current := 0
	if ok {
		current = now.Version
	}
	if current != head {
		p.fail(w, r, http.StatusConflict, fmt.Sprintf("This decision was not taken: %s has a new published version since this page was shown. "+
			"Open the draft again to read it against what is published now.", dr.Name))
		return
	}
	list := p.link(s, Prefix)
	if word == "publish" {
		out, err := p.opts.Drafts.PublishDraft(ctx, d, id)
		if err != nil {
			p.draftRefused(w, r, id, word, s, err)
			return
		}
		dv := &decided{Heading: "Draft published", ListPath: list}
		switch {
		case out.Capability != nil && out.Status == capability.OutcomeExisting:
			dv.Said = fmt.Sprintf("You published draft %s: it is equivalent to %s version %d, published already, and is closed as that version.", id, out.Capability.Name, out.Capability.Version)
		case out.Capability != nil:
			dv.Said = fmt.Sprintf("You published draft %s as %s version %d.", id, out.Capability.Name, out.Capability.Version)
			dv.Outcome = fmt.Sprintf("Every caller of mcp.%s now runs it, unless it pins another version.", strings.Replace(out.Capability.Name, ":", ".", 1))
		default:
			dv.Said = "You published draft " + id + "."
		}
		p.log.InfoContext(ctx, "draft published on the approval page", "draft_id", id, "principal", s.Principal, "status", out.Status)
		p.render(w, r, http.StatusOK, "decided", pageData{Title: dv.Heading, Session: &s, Decided: dv})
		return
	}
	closed, err := p.opts.Drafts.RejectDraft(ctx, d, id, reason)
	if err != nil {
		p.draftRefused(w, r, id, word, s, err)
		return
	}
	did := "rejected"
	if closed.Status == capability.DraftWithdrawn {
		did = "withdrew"
	}
	dv := &decided{Heading: "Draft " + closed.Status, Said: fmt.Sprintf("You %s draft %s of %s", did, id, dr.Name), Outcome: "Nothing was published.", ListPath: list}
	if reason != "" {
		dv.Said += " (reason: " + reason + ")"
	}
	dv.Said += "."
	p.log.InfoContext(ctx, "draft rejected on the approval page", "draft_id", id, "principal", s.Principal, "status", closed.Status)
	p.render(w, r, http.StatusOK, "decided", pageData{Title: dv.Heading, Session: &s, Decided: dv})
}

// draftRefused tells the person why a decision on a draft was not taken:
// nothing was published or closed.
func (p *Page) draftRefused(w http.ResponseWriter, r *http.Request, id, word string, s session, err error) {
	f := fault.As(err)
	p.log.InfoContext(r.Context(), "draft decision refused", "draft_id", id, "decision", word, "principal", s.Principal, "code", string(f.Code))
	switch f.Code {
	case fault.NotFound:
		p.notWaiting(w, r)
	case fault.InvalidRequest:
		p.fail(w, r, http.StatusBadRequest, "This decision was not taken: "+f.Message)
	case fault.Conflict:
		p.fail(w, r, http.StatusConflict, "This decision was not taken: the draft was decided already (the form was sent twice, or someone else decided it). "+
			"Open it again to see how it stands.")
	case fault.Forbidden:
		p.fail(w, r, http.StatusForbidden, "This decision is not yours to take under this deployment's policy: "+f.Message)
	default:
		p.fail(w, r, http.StatusServiceUnavailable, "The decision could not be taken now ("+string(f.Code)+"); try again.")
	}
}
