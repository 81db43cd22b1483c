package approvalpage

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/execution"
)

// The plan on the page. A person decides a call knowing what else the
// script will do: every call site of a tool that needs a person (where it
// is, whether it sits in a loop, how many calls it has made, which waits
// now, what its calls reach), and the grants in force. Besides a call
// alone, they may approve its call site for up to N calls of this
// execution (N at most the deployment's bound), only while the arguments
// they tick keep the values shown, or decide every pending call at once.
// The executor checks each of these again (internal/executor: grants),
// and the policy weighs a grant as an approval (approval.Policy.MayGrant).

// planView is the script's plan as the page shows it; the template is
// templates/plan.html.
type planView struct {
	Sites  []siteView
	Grants []grantView
	// MaxGrant is the most calls one grant may cover.
	MaxGrant  int
	Truncated bool
	// MayGrant: the person may approve call sites and every call at
	// once; Approvals counts the calls waiting for approval (what
	// "every pending call" decides), Questions those whose server asked.
	MayGrant             bool
	Approvals, Questions int
	Action, CSRF         string
	Version              int
}

// siteView is one call site of a tool that needs a person.
type siteView struct {
	ID           string // the element's id
	Server, Tool string
	Line         int
	InLoop       bool
	Computed     bool
	NoSite       bool // calls from eval'd code or a promise job: no site
	Calls        int
	// Waiting are the calls of the site that wait now (their ids), and
	// as text ("#3, #4").
	Waiting     []int
	WaitingText string
	// Endpoint is what its calls reach (an HTTP operation, a function).
	Endpoint string
	// Granted says what the grants over it allow now.
	Granted string
}

// grantView is one grant in force.
type grantView struct {
	ID, Tool, By, Via string
	Line, Used, Max   int
	Pinned            []string // "key = value"
}

// siteForm is a pending call's form that approves its site for more
// than one call.
type siteForm struct {
	CallID, Line int
	Max          int
	Keys         []pinKey
	Action, CSRF string
	Version      int
}

// pinKey is an argument a grant may pin (Name, as the form sends it;
// Shown, every character visible), with the value it would keep.
type pinKey struct {
	Name, Shown, Value string
	Index              int
}

// maxPinShown bounds an argument's value as the grant form shows it (the
// whole value is in the call's arguments above).
const maxPinShown = 80

// planOf is the plan of doc for the person signed in as s.
func (p *Page) planOf(doc *execution.Response, s session, d approval.Decider, tools map[string]catalog.Tool, ev *execView) *planView {
	plan := doc.Plan
	if plan == nil || len(plan.Sites) == 0 && len(plan.Grants) == 0 {
		return nil
	}
	pv := &planView{MaxGrant: plan.MaxGrant, Truncated: plan.Truncated, MayGrant: p.opts.Policy.MayGrant(d, doc.Owner),
		Approvals: ev.Approvals, Questions: ev.Questions, Action: ev.Action, CSRF: p.token(s), Version: ev.Version}
	for i, site := range plan.Sites {
		sv := siteView{ID: "site-" + strconv.Itoa(i+1), Server: site.Server, Tool: site.Tool, Line: site.Line, InLoop: site.InLoop,
			Computed: site.Computed, NoSite: site.Site == "", Calls: site.Calls}
		if t, ok := tools[site.Server+":"+site.Tool]; ok {
			sv.Endpoint = t.Endpoint.String()
		}
		for _, pc := range doc.Pending {
			if pc.Server == site.Server && pc.Tool == site.Tool && pc.Site == site.Site {
				sv.Waiting = append(sv.Waiting, pc.CallID)
			}
		}
		sv.WaitingText = waitingAt(sv.Waiting)
		var granted []string
		for _, g := range plan.Grants {
			if g.Server == site.Server && g.Tool == site.Tool && g.Site == site.Site {
				granted = append(granted, fmt.Sprintf("%s: %d of %d calls left", g.ID, g.Left(), g.Max))
			}
		}
		sv.Granted = strings.Join(granted, "; ")
		pv.Sites = append(pv.Sites, sv)
	}
	for _, g := range plan.Grants {
		gv := grantView{ID: g.ID, Tool: g.Server + "." + g.Tool, By: g.By, Via: g.Via, Line: g.Line, Used: g.Used, Max: g.Max}
		for _, pin := range g.Pinned {
			gv.Pinned = append(gv.Pinned, visible(pin.Key)+" = "+visible(pin.Value))
		}
		pv.Grants = append(pv.Grants, gv)
	}
	return pv
}

// grantForm is the form that approves pc's site, when the person may
// grant and the call has a site: each top-level argument may be pinned.
func grantForm(pc execution.Pending, plan *planView) *siteForm {
	if plan == nil || !plan.MayGrant || pc.Site == "" || pc.Reason == execution.PendingQuestion || plan.MaxGrant < 1 {
		return nil
	}
	f := &siteForm{CallID: pc.CallID, Line: pc.Line, Max: plan.MaxGrant, Action: plan.Action, CSRF: plan.CSRF, Version: plan.Version}
	dec := json.NewDecoder(bytes.NewReader(pc.Args))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return f
	}
	for i := 0; dec.More() && i < execution.MaxGrantPins; i++ {
		k, err := dec.Token()
		if err != nil {
			break
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			break
		}
		name, _ := k.(string)
		f.Keys = append(f.Keys, pinKey{Name: name, Shown: visible(name), Value: cutShown(visible(string(v)), maxPinShown), Index: i})
	}
	return f
}

func cutShown(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

// The form fields of a decision that covers more than one call: scope
// (execution.ScopeSite with count and pin, or execution.ScopeAll).
const (
	formScope = "scope"
	formCount = "count"
	formPin   = "pin"
)

// scoped reports whether a posted decision covers more than one call, and
// takes it if so: a grant over a call's site, or a decision on every
// pending call. The form's token was checked.
func (p *Page) scoped(w http.ResponseWriter, r *http.Request, s session, id string) bool {
	scope := r.PostFormValue(formScope)
	if scope != execution.ScopeSite && scope != execution.ScopeAll {
		return false
	}
	version, err := strconv.Atoi(r.PostFormValue("version"))
	word, reason := r.PostFormValue("decision"), strings.TrimSpace(r.PostFormValue("reason"))
	if err != nil || version < 1 || (word != execution.DecisionApprove && word != execution.DecisionReject) || len(reason) > execution.MaxReasonBytes {
		p.fail(w, r, http.StatusBadRequest, "The form is not one this page sent: it names no version or decision, or its reason is over "+
			strconv.Itoa(execution.MaxReasonBytes)+" bytes.")
		return true
	}
	dec := execution.Decision{Approve: word == execution.DecisionApprove, Reason: reason}
	if !dec.Approve && reason == "" {
		dec.Reason = "rejected on the approval page"
	}
	key := execution.AllCalls
	if scope == execution.ScopeSite {
		call, err1 := strconv.Atoi(r.PostFormValue("call"))
		count, err2 := strconv.Atoi(r.PostFormValue(formCount))
		pins := r.PostForm[formPin]
		if err1 != nil || call < 1 || err2 != nil || !dec.Approve || len(pins) > execution.MaxGrantPins {
			p.fail(w, r, http.StatusBadRequest, "The form is not one this page sent: a call site is approved for a number of calls, "+
				"pinning at most "+strconv.Itoa(execution.MaxGrantPins)+" arguments.")
			return true
		}
		// The executor bounds the count by the deployment's limit: a
		// forged one is refused there, and nothing runs.
		key, dec.Site = strconv.Itoa(call), &execution.SiteScope{Count: count, Pin: pins}
	}
	rr := execution.ResumeRequest{ExecutionID: id, Decisions: map[string]execution.Decision{key: dec},
		CallDetail: execution.CallDetailSummary, Principal: s.Principal, Channel: execution.ChannelPage, Version: version}
	resp, ferr := p.opts.Service.Resume(r.Context(), rr)
	p.flush(r.Context())
	if ferr != nil {
		p.log.InfoContext(r.Context(), "approval refused", "execution_id", id, "scope", scope, "decision", word, "principal", s.Principal, "code", string(ferr.Code))
		status, msg := refusal(ferr)
		p.fail(w, r, status, msg)
		return true
	}
	p.log.InfoContext(r.Context(), "decided on the approval page", "execution_id", id, "scope", scope, "decision", word, "principal", s.Principal)
	execPath, listPath := p.path(Prefix+"/"+url.PathEscape(id)), p.path(Prefix)
	data := decidedView(s, id, 0, dec, resp, execPath, listPath)
	out := data.Decided
	switch {
	case scope == execution.ScopeAll:
		out.Heading = "Every pending call " + verb(dec)
		out.Said = "You " + verb(dec) + " every call execution " + id + " waited on"
		if !dec.Approve && reason != "" {
			out.Said += " (reason: " + reason + ")"
		}
		out.Said += "."
	default:
		out.Heading = "Call site approved"
		out.Said = fmt.Sprintf("You approved call #%s and its call site for up to %d calls of execution %s", key, dec.Site.Count, id)
		if len(dec.Site.Pin) > 0 {
			out.Said += ", while " + strings.Join(dec.Site.Pin, ", ") + " keep the values shown"
		}
		out.Said += fmt.Sprintf(": %d of its calls ran or run under it.", grantUsed(resp))
	}
	data.Title = out.Heading
	p.render(w, r, http.StatusOK, "decided", data)
	return true
}

// grantUsed is how many calls the newest grant of resp has covered.
func grantUsed(resp *execution.Response) int {
	if resp.Plan != nil && len(resp.Plan.Grants) > 0 {
		return resp.Plan.Grants[len(resp.Plan.Grants)-1].Used
	}
	n, last := 0, ""
	for _, c := range resp.Calls {
		if c.Approval != nil && c.Approval.Grant != "" {
			if c.Approval.Grant != last {
				n, last = 0, c.Approval.Grant
			}
			n++
		}
	}
	return n
}

// waitingAt lists the pending calls of a site, for a line of text.
func waitingAt(ids []int) string {
	s := make([]string, len(ids))
	for i, id := range slices.Sorted(slices.Values(ids)) {
		s[i] = "#" + strconv.Itoa(id)
	}
	return strings.Join(s, ", ")
}
