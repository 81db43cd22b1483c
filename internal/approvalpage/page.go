// Package approvalpage is the approval page: where a person — not the
// caller, nor whatever answers for its MCP client — decides what waits for
// a person. Someone signs in (through the deployment's OpenID Connect
// provider, or, on pml serve, with a one-time link printed on its
// terminal), sees the decisions that wait for them, reads each pending
// call in full — every argument, the tool's description and annotations,
// the script around the call, who asked and until when — and approves or
// rejects it with a form. The decision resumes the execution through the
// same executor as every front end, as execution.ChannelPage under the
// person's principal, and the deployment's one policy (internal/approval)
// weighs it.
//
// The page is server-rendered HTML (html/template: every value is text),
// sends no script at all, and is sent with a strict Content-Security-Policy
// and frame-ancestors 'none'. Sessions are kept on the server (a
// SessionStore) and bound to the origin they were started on; the cookie
// (HttpOnly, SameSite=Strict, Secure and __Host- over HTTPS) holds only
// their id, and acts only with the session's key, which the page's own
// links (?s=) and forms (csrf) carry: other servers on the same host,
// which browsers send the cookie to, never see it (session.go). Signing
// out deletes the session. Cross-origin posts are refused (net/http's
// CrossOriginProtection), and a decision names the version of the
// execution it was shown, so a replayed form is refused once the
// execution has moved on.
//
// A call parked on a remote MCP server's question (2026-07-28
// input_required) is shown as the server asked it, as a form whose answer
// is checked against the server's own schema (question.go). Capability
// drafts awaiting publication are the list's second kind of decision
// (Options.Drafts, drafts.go), each on a page of its own under the same
// route, told apart by its id; other kinds join the list by registering a
// Provider.
//
// Its routes (RouteKeys, all under Prefix): GET /approvals (what waits
// for the person signed in), GET and POST /approvals/{id} (an execution's
// page and its decisions, or a capability draft's, told apart by the id:
// ex_… or cd_…), GET /approvals/signin, GET /approvals/signin/callback
// (OpenID Connect, or a one-time local link) and POST /approvals/signout.
package approvalpage

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
)

// Prefix is the path every route of the page is under.
const Prefix = "/approvals"

// RouteKeys are the page's routes, as API Gateway route keys (and
// ServeMux patterns). A deployment routes them without the API's caller
// authorization: the page signs people in itself, and a browser cannot
// sign a request or send a bearer token.
var RouteKeys = []string{
	"GET " + Prefix,
	"GET " + Prefix + "/{id}",
	"POST " + Prefix + "/{id}",
	"GET " + Prefix + "/signin",
	"GET " + Prefix + "/signin/callback",
	"POST " + Prefix + "/signout",
}

// IsPagePath reports whether path is one of the page's.
func IsPagePath(path string) bool {
	return path == Prefix || strings.HasPrefix(path, Prefix+"/")
}

// Lister lists suspended executions for the page (executor.Service), by
// who asked and a page at a time: after is "" or the next cursor the page
// before returned, and next is "" after the last page.
type Lister interface {
	// WaitingOwners returns the principals whose executions may wait,
	// those mayList lets through, at most limit.
	WaitingOwners(ctx context.Context, after string, limit int, mayList func(owner string) bool) (owners []string, next string, ferr *fault.Error)
	// WaitingOf returns owner's suspended documents (Pending naming the
	// calls only), soonest to expire first, at most limit.
	WaitingOf(ctx context.Context, owner, after string, limit int) (docs []*execution.Response, next string, ferr *fault.Error)
}

// Provider is one kind of decision that waits for people. The list page
// shows every provider's items for the person signed in; each item links
// to a page of its own (the executions' is this package's; another kind
// serves its own through Page.Handle).
type Provider interface {
	// Kind names the decisions, as the list's heading ("Tool calls").
	Kind() string
	// Waiting lists what person may decide now, most urgent first, at
	// most limit items.
	Waiting(ctx context.Context, person approval.Decider, limit int) ([]Item, error)
}

// Item is one decision on the list.
type Item struct {
	// Path is the item's page, under Prefix ("/approvals/ex_…").
	Path string
	// Title and Summary say what is asked, in a line each.
	Title, Summary string
	// Owner is whose ask it is; Asked and Expires when it was asked and
	// until when it waits.
	Owner          string
	Asked, Expires time.Time
	// MayApprove is whether the person may approve it (else only reject).
	MayApprove bool
	// May says in a few words what the person may do ("approve or
	// reject"); empty: as MayApprove says.
	May string
}

// Options configure a Page. Service, Policy and Key are required.
type Options struct {
	// Service reads what a suspended execution waits for and resumes it,
	// the same executor every front end uses.
	Service execution.Executor
	// Lister lists suspended executions; without one the list shows the
	// other providers' items only.
	Lister Lister
	// Policy is the deployment's one policy: it weighs a decision made
	// here as execution.ChannelPage.
	Policy approval.Policy
	// Key signs sign-in flows and derives the sessions' keys (keys
	// derived from it, one per use): the deployment's approval state key.
	Key approval.Key
	// Sessions keeps page sessions; nil: in this process's memory (a
	// restart signs everyone out). A page served by several processes or
	// Lambda containers needs one they share (suspend.PageSessions).
	Sessions SessionStore
	// BaseURL is the page's external base ("https://api.example.com",
	// "https://id.execute-api.region.amazonaws.com/v1"): what links, the
	// provider's redirect and an MCP client's URL elicitation name. Empty:
	// derived from each request (pml serve).
	BaseURL string
	// OIDC, when set, signs people in through the deployment's provider.
	OIDC *OIDC
	// Links, when set, are the one-time local links of pml serve: whoever
	// opens one signs in as LocalPrincipal.
	Links *LocalLinks
	// Drafts, when set, are the deployment's capability drafts
	// (capability.Guard): the list shows those the person may publish,
	// each on a page of its own where they publish or reject it.
	Drafts Drafts
	// Providers are more kinds of decisions for the list.
	Providers []Provider
	Logger    *slog.Logger
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Page is the approval page: an http.Handler serving RouteKeys.
type Page struct {
	opts      Options
	log       *slog.Logger
	mux       *http.ServeMux
	keys      keys
	cookies   cookies
	signin    *signin
	providers []Provider
	sessions  SessionStore
	cop       *http.CrossOriginProtection
}

// New returns the page.
func New(opts Options) (*Page, error) {
	if opts.Service == nil {
		return nil, errors.New("approvalpage: no executor")
	}
	if len(opts.Key) < approval.KeyBytes {
		return nil, errors.New("approvalpage: no key to sign sessions with")
	}
	if opts.BaseURL != "" {
		u, err := url.Parse(opts.BaseURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return nil, errors.New("approvalpage: the base URL must be an http(s) URL without query or fragment, e.g. https://api.example.com/v1")
		}
		opts.BaseURL = strings.TrimSuffix(opts.BaseURL, "/")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	p := &Page{opts: opts, log: opts.Logger, mux: http.NewServeMux(), keys: deriveKeys(opts.Key),
		cookies: cookies{secure: strings.HasPrefix(opts.BaseURL, "https://")}, sessions: opts.Sessions}
	if p.sessions == nil {
		p.sessions = &memorySessions{now: opts.Now, m: map[string]memorySession{}}
	}
	if opts.OIDC != nil {
		if opts.OIDC.Issuer == "" || opts.OIDC.ClientID == "" {
			return nil, errors.New("approvalpage: sign-in needs the provider's issuer and the page's client id")
		}
		p.signin = &signin{cfg: *opts.OIDC}
	}
	if opts.Drafts != nil {
		p.providers = append(p.providers, draftsProvider{p})
	}
	p.providers = append(p.providers, opts.Providers...)
	p.cop = http.NewCrossOriginProtection()
	if opts.BaseURL != "" {
		// The page's own origin, as the browser names it, which the Host
		// header behind a proxy or API Gateway may not.
		u, _ := url.Parse(opts.BaseURL)
		if err := p.cop.AddTrustedOrigin(u.Scheme + "://" + u.Host); err != nil {
			return nil, err
		}
	}
	p.cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.fail(w, r, http.StatusForbidden, "This form was sent from another site: it is refused.")
	}))
	p.mux.HandleFunc("GET "+Prefix, p.list)
	p.mux.HandleFunc("GET "+Prefix+"/{id}", p.execution)
	p.mux.Handle("POST "+Prefix+"/{id}", p.cop.Handler(http.HandlerFunc(p.decide)))
	p.mux.HandleFunc("GET "+Prefix+"/signin", p.signinPage)
	p.mux.HandleFunc("GET "+Prefix+"/signin/callback", p.callback)
	p.mux.Handle("POST "+Prefix+"/signout", p.cop.Handler(http.HandlerFunc(p.signout)))
	return p, nil
}

// ServeHTTP implements http.Handler: every answer carries the page's
// security headers.
func (p *Page) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	// The local link's token and execution ids stay out of Referer.
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	if p.cookies.secure {
		h.Set("Strict-Transport-Security", "max-age=31536000")
	}
	// ServeMux, not the handler it finds, serves the request: only it
	// sets the path's values.
	if _, pattern := p.mux.Handler(r); pattern == "" {
		p.fail(w, r, http.StatusNotFound, "There is no such page.")
		return
	}
	p.mux.ServeHTTP(w, r)
}

// Handle serves another kind of decision's page under Prefix (pattern
// "GET /approvals/things/{id}"; a deployment must route it too): it gets
// the page's headers; its handlers read the person with Person, check
// forms with CheckForm, and link to the page's addresses with Link (a
// link without the session's key opens nothing).
// A POST pattern is wrapped in the cross-origin protection.
func (p *Page) Handle(pattern string, h http.Handler) {
	if strings.HasPrefix(pattern, http.MethodPost+" ") {
		h = p.cop.Handler(h)
	}
	p.mux.Handle(pattern, h)
}

// Person returns who is signed in on the page, as a decider on the page
// channel: a request with the session's cookie and its key (in the URL of
// a GET; in the csrf field of a POST, whose form the handler has parsed).
func (p *Page) Person(r *http.Request) (approval.Decider, bool) {
	s, err := p.signedIn(r)
	return approval.Decider{Principal: s.Principal, Channel: execution.ChannelPage}, err == nil
}

// CheckForm reports whether a posted form carries the signed-in session's
// key (after r.ParseForm).
func (p *Page) CheckForm(r *http.Request) bool {
	_, err := p.signedIn(r)
	return r.Method == http.MethodPost && err == nil
}

// Link is the page path rel (Prefix + …) as the person signed in on r
// must open it: carrying their session's key. "" when no one is.
func (p *Page) Link(r *http.Request, rel string) string {
	s, err := p.signedIn(r)
	if err != nil {
		return ""
	}
	return p.link(s, rel)
}

// ExecutionURL is the page of execution id (or of capability draft id:
// both are under the same route), under base (the request's base URL
// when the page has none configured: BaseURL).
func (p *Page) ExecutionURL(base, id string) string {
	if p.opts.BaseURL != "" {
		base = p.opts.BaseURL
	}
	return base + Prefix + "/" + url.PathEscape(id)
}

// Configured reports whether the page has a base URL of its own.
func (p *Page) Configured() bool { return p.opts.BaseURL != "" }

// SignInLink is the one-time local sign-in URL for a new token, under
// base, good on base's origin alone; "" without local links.
func (p *Page) SignInLink(base string) string {
	if p.opts.Links == nil {
		return ""
	}
	if p.opts.BaseURL != "" {
		base = p.opts.BaseURL
	}
	return base + Prefix + "/signin?link=" + p.opts.Links.MintFor(originOf(base))
}

// originOf is the scheme and host of a base URL, as the page's origin
// is named (RequestBase).
func originOf(base string) string {
	u, err := url.Parse(base)
	if err != nil {
		return base
	}
	return u.Scheme + "://" + u.Host
}

func (p *Page) now() time.Time { return p.opts.Now() }

// baseURL is the page's external base for r.
func (p *Page) baseURL(r *http.Request) string {
	if p.opts.BaseURL != "" {
		return p.opts.BaseURL
	}
	return RequestBase(r)
}

// RequestBase is the base URL a request reached this server by
// (scheme and Host), for a server that has none configured.
func RequestBase(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// path is a page path as the browser must request it: under the base
// URL's path (an API Gateway stage, "/v1"), which the request path here
// does not show.
func (p *Page) path(rel string) string {
	if p.opts.BaseURL == "" {
		return rel
	}
	u, _ := url.Parse(p.opts.BaseURL)
	return strings.TrimSuffix(u.Path, "/") + rel
}

// safeNext keeps a post-sign-in destination on the page: a path under
// Prefix, nothing that could leave the site.
func safeNext(next string) string {
	if next == "" || !strings.HasPrefix(next, Prefix) || strings.ContainsAny(next, "\\\r\n") || strings.HasPrefix(next, "//") {
		return Prefix
	}
	if u, err := url.Parse(next); err != nil || u.Scheme != "" || u.Host != "" || !IsPagePath(u.Path) {
		return Prefix
	}
	return next
}

// signinPage starts a sign-in: a one-time local link (?link=), else the
// provider, else it says how to sign in.
func (p *Page) signinPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	next := safeNext(q.Get("next"))
	if token := q.Get("link"); token != "" {
		if p.opts.Links == nil || !p.opts.Links.RedeemAt(token, originOf(p.baseURL(r))) {
			p.fail(w, r, http.StatusUnauthorized, "This sign-in link is not valid: it was used already, has expired (links last 10 minutes), "+
				"or was printed by another server or for another address (open it as printed). pml serve prints a new one when it starts and whenever an execution waits.")
			return
		}
		s, err := p.startSession(w, r, LocalPrincipal, "link")
		if err != nil {
			p.log.WarnContext(r.Context(), "page session not started", "err", err)
			p.fail(w, r, http.StatusServiceUnavailable, "The session could not be started now. Ask pml serve for a new link and try again.")
			return
		}
		p.log.InfoContext(r.Context(), "signed in on the approval page", "principal", LocalPrincipal, "via", "link")
		p.landing(w, r, s, next)
		return
	}
	if p.signin != nil {
		p.signinStart(w, r, next)
		return
	}
	msg := "This server signs no one in through a provider."
	if p.opts.Links != nil {
		msg = "Open the one-time sign-in link pml serve printed on its terminal (it prints a new one when it starts and whenever an execution waits)."
	}
	p.render(w, r, http.StatusUnauthorized, "message", pageData{Title: "Sign in", Message: msg})
}

func (p *Page) callback(w http.ResponseWriter, r *http.Request) {
	if p.signin == nil {
		p.fail(w, r, http.StatusNotFound, "This server signs no one in through a provider.")
		return
	}
	p.signinCallback(w, r)
}

// landing answers a sign-in: a page that moves on to next by itself. Not
// a redirect: the session cookie is SameSite=Strict, and a browser does
// not send it on a redirect chain that began on the provider's site; a
// navigation this page starts is the site's own.
// The landing's link carries the new session's key.
func (p *Page) landing(w http.ResponseWriter, r *http.Request, s session, next string) {
	p.render(w, r, http.StatusOK, "landing", pageData{Title: "Signed in", Principal: s.Principal, Next: p.link(s, next)})
}

// signout ends the session on the server: its cookie, sent again, is
// worth nothing, here and in every process that shares the store.
func (p *Page) signout(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	_ = r.ParseForm()
	s, err := p.signedIn(r)
	switch {
	case err == nil:
		if err := p.endSession(w, r, s); err != nil {
			p.log.WarnContext(r.Context(), "page session not ended", "err", err)
			p.fail(w, r, http.StatusServiceUnavailable, "You could not be signed out now: try again.")
			return
		}
		p.log.InfoContext(r.Context(), "signed out of the approval page", "principal", s.Principal, "via", s.Via)
	case !errors.Is(err, errSignedOut):
		p.log.WarnContext(r.Context(), "page session not read", "err", err)
		p.fail(w, r, http.StatusServiceUnavailable, "You could not be signed out now: try again.")
		return
	default:
		if _, err := p.cookieSession(r); err == nil {
			p.fail(w, r, http.StatusForbidden, "This form does not carry this session's token: it is refused.")
			return
		}
		// Nothing to end: the cookie names no session.
		p.cookies.clear(w, p.cookies.sessionName(), true)
	}
	p.render(w, r, http.StatusOK, "message", pageData{Title: "Signed out",
		Message: "You are signed out: the session has ended on the server, and its cookie opens nothing any more."})
}

// person is who is signed in, or answers the request and reports false:
// with a sign-in prompt (401), or for a form that lacks the session's key
// a refusal (403).
func (p *Page) person(w http.ResponseWriter, r *http.Request) (session, bool) {
	s, err := p.signedIn(r)
	if err == nil {
		return s, true
	}
	if !errors.Is(err, errSignedOut) {
		p.log.WarnContext(r.Context(), "page session not read", "err", err)
		p.fail(w, r, http.StatusServiceUnavailable, "Your session could not be read now: try again.")
		return session{}, false
	}
	_, cerr := p.cookieSession(r)
	if cerr == nil && r.Method == http.MethodPost {
		p.log.InfoContext(r.Context(), "approval form refused", "reason", "no session key", "path", r.URL.Path)
		p.fail(w, r, http.StatusForbidden, "This form does not carry this session's token: it is refused. Reload the page and decide again.")
		return session{}, false
	}
	msg := "Sign in to see what waits for your decision."
	if cerr == nil {
		msg = "This address does not carry your session's key (an address opened from outside the page never does): sign in again to open it."
	}
	p.render(w, r, http.StatusUnauthorized, "message", pageData{Title: "Sign in", Message: msg,
		SignIn: p.path(Prefix + "/signin?next=" + url.QueryEscape(r.URL.Path))})
	return session{}, false
}

func (p *Page) decider(s session) approval.Decider {
	return approval.Decider{Principal: s.Principal, Channel: execution.ChannelPage}
}

// maxListItems bounds each provider's part of the list.
const maxListItems = 50

func (p *Page) list(w http.ResponseWriter, r *http.Request) {
	s, ok := p.person(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	data := pageData{Title: "Waiting for a decision", Session: &s}
	if p.opts.Lister != nil {
		if q.Has("owner") {
			data.Calls = p.ownerCalls(r.Context(), s, q.Get("owner"), q.Get("after"))
			p.render(w, r, http.StatusOK, "list", data)
			return
		}
		data.Calls = p.callGroups(r.Context(), s, q.Get("owners"))
	}
	if q.Get("owners") == "" {
		data.Groups = p.providerGroups(r.Context(), s)
	}
	p.render(w, r, http.StatusOK, "list", data)
}

// providerGroups are the other kinds of decisions' parts of the list.
func (p *Page) providerGroups(ctx context.Context, s session) []group {
	d := p.decider(s)
	var groups []group
	for i, pr := range p.providers {
		items, err := pr.Waiting(ctx, d, maxListItems)
		g := group{Kind: pr.Kind(), ID: "waiting-" + strconv.Itoa(i)}
		if id, ok := pr.(interface{ listID() string }); ok {
			g.ID = id.listID()
		}
		if err != nil {
			p.log.WarnContext(ctx, "approval list", "kind", pr.Kind(), "err", err)
			g.Error = "This list could not be read now."
		}
		for _, it := range items {
			it.Path = p.link(s, it.Path)
			g.Items = append(g.Items, it)
		}
		groups = append(groups, g)
	}
	return groups
}

// fail answers with a message page.
func (p *Page) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	p.render(w, r, status, "message", pageData{Title: http.StatusText(status), Message: msg})
}

// callsMay says what a person may do with an execution's calls: approve
// and answer (MayAnswer is MayApprove), or only reject and decline.
func callsMay(may, approvals, questions bool) string {
	switch {
	case may && approvals && questions:
		return "approve or reject, answer or decline"
	case may && questions:
		return "answer or decline"
	case may:
		return "approve or reject"
	case approvals && questions:
		return "reject or decline only"
	case questions:
		return "decline only"
	}
	return "reject only"
}

// mayDecide reports whether the person may act on owner's ask at all.
func (p *Page) mayDecide(d approval.Decider, owner string) bool {
	return p.opts.Policy.MayApprove(d, owner) || p.opts.Policy.MayReject(d, owner)
}

// notWaiting is the answer for an execution that does not wait for this
// person: the same for every reason, so ids cannot be probed.
func (p *Page) notWaiting(w http.ResponseWriter, r *http.Request) {
	p.fail(w, r, http.StatusNotFound, "Nothing waits for your decision under this id: it may have been decided already, "+
		"have expired, belong to someone you do not decide for, or never have existed.")
}

func (p *Page) execution(w http.ResponseWriter, r *http.Request) {
	s, ok := p.person(w, r)
	if !ok {
		return
	}
	id := r.PathValue("id")
	if isDraftID(id) {
		p.draft(w, r, s, id)
		return
	}
	d := p.decider(s)
	doc, ferr := p.opts.Service.Waiting(r.Context(), id)
	switch {
	case ferr != nil && ferr.Code != fault.Unavailable:
		// It waits no more (or never did): what it did, and its undo
		// (effects.go), for whom may roll it back.
		p.ended(w, r, s, id)
		return
	case ferr != nil || !p.mayDecide(d, doc.Owner):
		p.notWaiting(w, r)
		return
	}
	p.render(w, r, http.StatusOK, "execution", p.executionView(r.Context(), s, doc, nil))
}

// flushTimeout bounds writing traces after a decision ran the execution
// on.
const flushTimeout = 5 * time.Second

// flush writes the traces a decision made, before the answer goes out.
func (p *Page) flush(ctx context.Context) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
	defer cancel()
	if err := p.opts.Service.Flush(fctx); err != nil {
		p.log.WarnContext(ctx, "trace flush failed", "err", err)
	}
}

// The words of the page's forms besides execution.DecisionApprove and
// execution.DecisionReject: a remote server's question answered
// (execution.DecisionAnswer) or declined.
const formDecline = "decline"

func (p *Page) decide(w http.ResponseWriter, r *http.Request) {
	// The form first, within its bound: it carries the session's key.
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		p.fail(w, r, http.StatusBadRequest, "The form could not be read.")
		return
	}
	s, ok := p.person(w, r)
	if !ok {
		return
	}
	id := r.PathValue("id")
	if isDraftID(id) {
		p.decideDraft(w, r, s, id)
		return
	}
	if r.PostFormValue("decision") == formRollback {
		p.rollBack(w, r, s, id)
		return
	}
	if p.scoped(w, r, s, id) {
		return // a decision that covers more than one call (plan.go)
	}
	call, err1 := strconv.Atoi(r.PostFormValue("call"))
	version, err2 := strconv.Atoi(r.PostFormValue("version"))
	word, reason := r.PostFormValue("decision"), strings.TrimSpace(r.PostFormValue("reason"))
	known := word == execution.DecisionApprove || word == execution.DecisionReject || word == execution.DecisionAnswer || word == formDecline
	if err1 != nil || err2 != nil || call < 1 || version < 1 || !known || len(reason) > execution.MaxReasonBytes {
		p.fail(w, r, http.StatusBadRequest, "The form is not one this page sent: it names no call, version or decision, or its reason is over "+
			strconv.Itoa(execution.MaxReasonBytes)+" bytes.")
		return
	}
	var dec execution.Decision
	switch word {
	case execution.DecisionAnswer, formDecline:
		var done bool
		if dec, done = p.answer(w, r, s, id, call, version, word); done {
			return
		}
	default:
		dec = execution.Decision{Approve: word == execution.DecisionApprove, Reason: reason}
		if !dec.Approve && reason == "" {
			dec.Reason = "rejected on the approval page"
		}
	}
	rr := execution.ResumeRequest{ExecutionID: id, Decisions: map[string]execution.Decision{strconv.Itoa(call): dec},
		CallDetail: execution.CallDetailSummary, Principal: s.Principal, Channel: execution.ChannelPage, Version: version}
	resp, ferr := p.opts.Service.Resume(r.Context(), rr)
	p.flush(r.Context())
	if ferr != nil {
		p.log.InfoContext(r.Context(), "approval refused", "execution_id", id, "call_id", call, "decision", word, "principal", s.Principal, "code", string(ferr.Code))
		status, msg := refusal(ferr)
		p.fail(w, r, status, msg)
		return
	}
	p.log.InfoContext(r.Context(), "decided on the approval page", "execution_id", id, "call_id", call, "decision", verb(dec), "principal", s.Principal)
	p.render(w, r, http.StatusOK, "decided", decidedView(s, id, call, dec, resp, p.link(s, Prefix+"/"+url.PathEscape(id)), p.link(s, Prefix)))
}

// maxFormBytes bounds a posted form: an answer to a server's questions
// with its fields, or a decision with its reason.
const maxFormBytes = 256 << 10

// answer reads the person's answer to the question call waits on (word
// execution.DecisionAnswer: every question accepted, its fields checked
// against the server's schema; formDecline: declined) from the execution
// as it waits at version, the version the form was shown with. done
// reports that the request was answered already: a refusal, or the page
// again with what the server's schema refused.
func (p *Page) answer(w http.ResponseWriter, r *http.Request, s session, id string, call, version int, word string) (execution.Decision, bool) {
	d := p.decider(s)
	doc, ferr := p.opts.Service.Waiting(r.Context(), id)
	if ferr != nil || !p.mayDecide(d, doc.Owner) {
		p.notWaiting(w, r)
		return execution.Decision{}, true
	}
	if doc.StateVersion != version {
		status, msg := refusal(fault.New(fault.Conflict, "moved on"))
		p.fail(w, r, status, msg)
		return execution.Decision{}, true
	}
	i := slices.IndexFunc(doc.Pending, func(pc execution.Pending) bool { return pc.CallID == call })
	if i < 0 || doc.Pending[i].Reason != execution.PendingQuestion {
		p.fail(w, r, http.StatusBadRequest, "Call #"+strconv.Itoa(call)+" does not wait for an answer to a server's question: approve or reject it.")
		return execution.Decision{}, true
	}
	pc := doc.Pending[i]
	if word == formDecline {
		if p.opts.Policy.MayAnswer(d, doc.Owner) {
			return execution.Decision{Approve: true, Answers: declined(pc)}, false
		}
		// Whoever may not answer may still refuse: the asker itself.
		return execution.Decision{Reason: "the server's question was declined on the approval page"}, false
	}
	answers, problems := readAnswers(pc, r.PostForm)
	if len(problems) > 0 {
		p.log.InfoContext(r.Context(), "answer refused", "execution_id", id, "call_id", call, "principal", s.Principal, "problems", len(problems))
		p.render(w, r, http.StatusBadRequest, "execution", p.executionView(r.Context(), s, doc, &answerBack{call: call, form: r.PostForm, problems: problems}))
		return execution.Decision{}, true
	}
	return execution.Decision{Approve: true, Answers: answers}, false
}

// refusal is what the person is told when a decision was refused: nothing
// ran.
func refusal(ferr *fault.Error) (int, string) {
	switch ferr.Code {
	case fault.Conflict:
		return http.StatusConflict, "This decision was not taken: the execution has moved on since this page was shown (the call was decided already, " +
			"or the form was sent twice). Open the execution again to see what waits now."
	case fault.Forbidden:
		return http.StatusForbidden, "This decision is not yours to take under this deployment's policy: " + ferr.Message
	case fault.Expired:
		return http.StatusGone, "The execution expired before this decision: its calls will never run."
	case fault.InvalidRequest:
		return http.StatusBadRequest, "This decision was not taken: " + ferr.Message
	case fault.NotFound:
		return http.StatusNotFound, "No execution waits for a decision under this id."
	case fault.ResumeIncompatible:
		return http.StatusConflict, "This server runs another build of the sandbox than the one that suspended the execution: decide it where that build runs."
	}
	return http.StatusServiceUnavailable, "The decision could not be taken now (" + string(ferr.Code) + "); try again."
}
