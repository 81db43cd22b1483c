package approvalpage_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/approvalpage"
	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/journal"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/testutil/enginetest"
	"github.com/pml-sandbox/pml/internal/testutil/oidcprovider"
	"github.com/pml-sandbox/pml/internal/trace"
	"github.com/pml-sandbox/pml/internal/tracedb"
)

var engine *guest.Engine

func TestMain(m *testing.M) {
	enginetest.Main(m, func(e *guest.Engine) { engine = e })
}

// padded hides its key behind 520 spaces of a note, as a script that
// wants a truncated question to show only its harmless part would.
const padded = `await mcp.demo.kv_set({key: "production_customers", value: 1});
const out = {};
try {
  out.deleted = await mcp.demo.kv_delete({note: "Routine cleanup. Dry-run verified, no user data is touched." + " ".repeat(520), key: "production_customers"});
} catch (e) {
  out.code = e.code;
  out.message = e.message;
}
return out;`

// twoDeletes waits on two destructive calls at once (calls 3 and 4).
const twoDeletes = `await mcp.demo.kv_set({key: "a", value: 1});
await mcp.demo.kv_set({key: "b", value: 2});
const settle = (p) => p.then((v) => ({ok: v}), (e) => ({code: e.code, message: e.message}));
const [a, b] = await Promise.all([settle(mcp.demo.kv_delete({key: "a"})), settle(mcp.demo.kv_delete({key: "b"}))]);
return {a, b};`

// env is a deployment in miniature: the execution service over the demo
// tools (and any more sources) and a suspension directory, the capability
// guard over a file registry, the page over both with the deployed policy
// (the caller decides nothing; alice, signed in through the provider, and
// the local person approve), and the provider.
type env struct {
	t      *testing.T
	svc    *executor.Service
	sink   *tracedb.Memory
	links  *approvalpage.LocalLinks
	idp    *oidcprovider.Provider
	srv    *httptest.Server
	policy approval.Policy
	reg    *capability.FileRegistry
	guard  *capability.Guard
}

const clientID = "approval-page"

func newEnv(t *testing.T, mutate func(*approval.Policy), sources ...execution.ToolSource) *env {
	t.Helper()
	e := &env{t: t, sink: tracedb.NewMemory(0), links: approvalpage.NewLocalLinks()}
	mux := http.NewServeMux()
	e.srv = httptest.NewServer(mux)
	t.Cleanup(e.srv.Close)
	e.idp = oidcprovider.Start(t, oidcprovider.Options{
		Clients: map[string]oidcprovider.Client{clientID: {Secret: "s3cret", RedirectURIs: []string{e.srv.URL + "/approvals/signin/callback"}}},
		Users:   map[string]string{"alice": "pw-alice", "agent-7": "pw-agent", "bob": "pw-bob"},
	})
	e.policy = approval.Policy{Approvers: []string{approvalpage.JWTPrincipal(e.idp.URL, "alice"), approvalpage.LocalPrincipal}}
	if mutate != nil {
		mutate(&e.policy)
	}
	log := slog.New(slog.DiscardHandler)
	e.reg = capability.NewFileRegistry(t.TempDir() + "/capabilities.json")
	e.guard = &capability.Guard{Registry: e.reg, Policy: e.policy}
	e.svc = executor.New(engine, executor.Options{Policy: e.policy, Sources: append([]execution.ToolSource{demoserver.Source{Set: demoserver.New()}}, sources...),
		// The list's tests keep more suspended executions of one caller
		// than the default quota lets one principal keep (50).
		Sink: e.sink, Logger: log, Suspensions: suspend.NewFile(t.TempDir(), suspend.Options{Quota: suspend.Quota{Count: 100}}),
		Journal: journal.NewFile(t.TempDir(), journal.Options{}), Traces: e.sink})
	key, err := approval.LoadKeyFile(t.TempDir() + "/key")
	if err != nil {
		t.Fatal(err)
	}
	idpClient := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(idpClient.CloseIdleConnections)
	page, err := approvalpage.New(approvalpage.Options{Service: e.svc, Lister: e.svc, Drafts: e.guard, Policy: e.policy, Key: key, Links: e.links, Logger: log,
		OIDC: &approvalpage.OIDC{Issuer: e.idp.URL, ClientID: clientID, ClientSecret: "s3cret", HTTPClient: idpClient}})
	if err != nil {
		t.Fatal(err)
	}
	mux.Handle("/", page)
	return e
}

// agent is the caller whose executions wait: the provider's agent-7, as
// the authorizer names a caller with its token.
func (e *env) agent() string { return approvalpage.JWTPrincipal(e.idp.URL, "agent-7") }

// suspend runs code for the agent with approval "suspend" and returns its
// id.
func (e *env) suspend(code string) string {
	e.t.Helper()
	resp := e.svc.Execute(context.Background(), execution.Request{Code: code, Approval: execution.ApprovalSuspend, Principal: e.agent()})
	if !resp.Suspended() {
		e.t.Fatalf("not suspended: %+v", resp.Error)
	}
	return resp.ExecutionID
}

// browser is a cookie-keeping HTTP client that opens the page's
// addresses as the page's own links do: with the session's key (?s=),
// which it reads from the landing of its last sign-in.
type browser struct {
	t     *testing.T
	c     *http.Client
	token string
}

var tokenRE = regexp.MustCompile(`id="continue" href="[^"]*[?&](?:amp;)?s=([A-Za-z0-9_-]+)`)

// keyed is u with the session's key, if it is a page address without
// one.
func (b *browser) keyed(u string) string {
	p, err := url.Parse(u)
	if err != nil || b.token == "" || !strings.HasPrefix(p.Path, "/approvals") || strings.HasPrefix(p.Path, "/approvals/signin") || p.Query().Has("s") {
		return u
	}
	q := p.Query()
	q.Set("s", b.token)
	p.RawQuery = q.Encode()
	return p.String()
}

// landed keeps the session's key of a sign-in's landing page.
func (b *browser) landed(body string) {
	if m := tokenRE.FindStringSubmatch(body); m != nil {
		b.token = m[1]
	}
}

func (e *env) browser() *browser {
	jar, _ := cookiejar.New(nil)
	tr := &http.Transport{}
	e.t.Cleanup(tr.CloseIdleConnections)
	return &browser{t: e.t, c: &http.Client{Jar: jar, Transport: tr}}
}

// get fetches a URL (following redirects) and returns the status and body.
func (b *browser) get(u string) (int, string) {
	b.t.Helper()
	resp, err := b.c.Get(b.keyed(u))
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	b.landed(string(body))
	return resp.StatusCode, string(body)
}

// post sends a form, with extra headers.
func (b *browser) post(u string, form url.Values, headers ...string) (int, string) {
	b.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	b.landed(string(body))
	return resp.StatusCode, string(body)
}

// signInLocal opens a fresh one-time link.
func (e *env) signInLocal(b *browser) {
	e.t.Helper()
	if status, body := b.get(e.srv.URL + "/approvals/signin?link=" + e.links.Mint()); status != 200 || !strings.Contains(body, approvalpage.LocalPrincipal) {
		e.t.Fatalf("local sign-in: %d %s", status, body)
	}
}

// signInAs signs in through the provider as user: the page sends the
// browser to the provider, whose form is posted with the password, and
// the provider sends it back with a code.
func (e *env) signInAs(b *browser, user, password string) (int, string) {
	e.t.Helper()
	resp, err := b.c.Get(e.srv.URL + "/approvals/signin?next=/approvals")
	if err != nil {
		e.t.Fatal(err)
	}
	resp.Body.Close()
	authz := resp.Request.URL
	if resp.StatusCode != 200 || !strings.HasPrefix(authz.String(), e.idp.URL+"/authorize?") {
		e.t.Fatalf("sign-in did not reach the provider's form: %d %s", resp.StatusCode, authz)
	}
	form := authz.Query()
	form.Set("user", user)
	form.Set("password", password)
	return b.post(e.idp.URL+"/authorize", form)
}

var (
	csrfRE    = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	versionRE = regexp.MustCompile(`name="version" value="(\d+)"`)
)

// form is what the page's decision form for call posts.
func form(t *testing.T, page string, call, decision, reason string) url.Values {
	t.Helper()
	c, v := csrfRE.FindStringSubmatch(page), versionRE.FindStringSubmatch(page)
	if c == nil || v == nil {
		t.Fatalf("no decision form on the page:\n%s", page)
	}
	return url.Values{"csrf": {c[1]}, "version": {v[1]}, "call": {call}, "decision": {decision}, "reason": {reason}}
}

// TestApproverDecidesOnThePage: the local person signs in with a one-time
// link, lists what waits, reads the pending call whole — the key after 520
// spaces of padding included, the tool's description and annotations, the
// script around the call — and approves it: the execution runs on, and
// its trace records the decision as the person's, via the page.
func TestApproverDecidesOnThePage(t *testing.T) {
	e := newEnv(t, nil)
	id := e.suspend(padded)
	b := e.browser()
	e.signInLocal(b)
	status, list := b.get(e.srv.URL + "/approvals")
	if status != 200 || !strings.Contains(list, id) || !strings.Contains(list, "#2 demo.kv_delete") || !strings.Contains(list, "approve or reject") {
		t.Fatalf("list: %d %s", status, list)
	}
	status, page := b.get(e.srv.URL + "/approvals/" + id)
	if status != 200 {
		t.Fatalf("page: %d %s", status, page)
	}
	for _, want := range []string{
		`&#34;key&#34;: &#34;production_customers&#34;`, // the key, whole, after the padding
		strings.Repeat(" ", 520),
		`<code>key</code></td><td>string</td>`, // and named among the keys
		"Delete a key from the scratch store.", // the tool's description
		"destructiveHint: true",
		`class="match">   4    out.deleted = await mcp.demo.kv_delete(`, // the script around the call
		e.agent(), // who asked
		`id="approve-2"`, `id="reject-2"`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(strings.ToLower(page), "<script") {
		t.Errorf("the page sends a script")
	}
	status, done := b.post(e.srv.URL+"/approvals/"+id, form(t, page, "2", "approve", ""))
	if status != 200 || !strings.Contains(done, "You approved call #2") || !strings.Contains(done, "ran to its end") {
		t.Fatalf("approve: %d %s", status, done)
	}
	ex, _, err := e.sink.GetExecution(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	last := ex.Events[len(ex.Events)-1]
	if last.Type != trace.EventResume || last.Via != trace.ViaPage || last.Principal != approvalpage.LocalPrincipal || last.Decisions[0].Decision != "approve" {
		t.Fatalf("trace event %+v", last)
	}
	if _, list = b.get(e.srv.URL + "/approvals"); strings.Contains(list, id) {
		t.Fatalf("the decided execution is still listed")
	}
}

// TestPageListsEffects: the execution page lists what the script did
// before it waited — its writes, not its reads — each with its status and
// idempotency key, read only.
func TestPageListsEffects(t *testing.T) {
	e := newEnv(t, nil)
	id := e.suspend("await mcp.demo.kv_get({key: \"a\"});\n" + twoDeletes)
	b := e.browser()
	e.signInLocal(b)
	status, page := b.get(e.srv.URL + "/approvals/" + id)
	if status != 200 {
		t.Fatalf("page: %d %s", status, page)
	}
	for _, call := range []int{2, 3} {
		want := fmt.Sprintf(`<tr id="effect-%d"><td>#%d</td><td>demo.kv_set</td><td class="effect-applied">applied</td><td><code>%s</code></td>`, call, call, journal.Key(id, call))
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %s:\n%s", want, page)
		}
	}
	if strings.Contains(page, `id="effect-1"`) || !strings.Contains(page, "2 applied") {
		t.Errorf("the read is listed, or the count is wrong:\n%s", page)
	}
	// Nothing here declares an undo: each effect says so, and there is
	// no rollback form.
	if !strings.Contains(page, "not undone: no compensation is declared for demo:kv_set") || strings.Contains(page, `name="decision" value="rollback"`) {
		t.Errorf("the undo column:\n%s", page)
	}
}

// TestSignedInThroughTheProvider: alice signs in through the OpenID
// provider (code flow, PKCE, nonce) and decides two calls of one
// execution — rejects one with a reason, approves the other — each form
// once; the script sees the rejection's reason.
func TestSignedInThroughTheProvider(t *testing.T) {
	e := newEnv(t, nil)
	id := e.suspend(twoDeletes)
	b := e.browser()
	status, body := e.signInAs(b, "alice", "pw-alice")
	alice := approvalpage.JWTPrincipal(e.idp.URL, "alice")
	if status != 200 || !strings.Contains(body, alice) {
		t.Fatalf("sign-in: %d %s", status, body)
	}
	if c := e.idp.Counts(); c.SignIns != 1 || c.Exchanges != 1 {
		t.Fatalf("provider counts %+v", c)
	}
	_, page := b.get(e.srv.URL + "/approvals/" + id)
	status, body = b.post(e.srv.URL+"/approvals/"+id, form(t, page, "4", "reject", "b stays: it is still read"))
	if status != 200 || !strings.Contains(body, "waits again") || !strings.Contains(body, "#3 demo.kv_delete") {
		t.Fatalf("reject #4: %d %s", status, body)
	}
	// The first page's forms name the version they were shown: sent
	// again, the approval is refused, though the call still waits.
	if status, body = b.post(e.srv.URL+"/approvals/"+id, form(t, page, "3", "approve", "")); status != http.StatusConflict {
		t.Fatalf("a form of the page before: %d %s", status, body)
	}
	_, page = b.get(e.srv.URL + "/approvals/" + id)
	status, body = b.post(e.srv.URL+"/approvals/"+id, form(t, page, "3", "approve", ""))
	if status != 200 || !strings.Contains(body, "succeeded") {
		t.Fatalf("approve #3: %d %s", status, body)
	}
	ex, _, err := e.sink.GetExecution(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var decided []string
	for _, ev := range ex.Events {
		if ev.Type == trace.EventResume {
			if ev.Via != trace.ViaPage || ev.Principal != alice {
				t.Errorf("resume event %+v: want alice via the page", ev)
			}
			for _, d := range ev.Decisions {
				decided = append(decided, d.Decision+":"+d.Reason)
			}
		}
	}
	if got := strings.Join(decided, ","); got != "reject:b stays: it is still read,approve:" {
		t.Fatalf("decisions %s", got)
	}
}

// TestPageRefusesTheHostile: nothing but a signed-in person's own form,
// from the page itself, decides — and never the caller's approval of its
// own call, though it signs in through the same provider as itself.
func TestPageRefusesTheHostile(t *testing.T) {
	e := newEnv(t, nil)
	id := e.suspend(padded)
	execURL := e.srv.URL + "/approvals/" + id

	anon := e.browser()
	for _, u := range []string{"/approvals", "/approvals/" + id} {
		if status, body := anon.get(e.srv.URL + u); status != http.StatusUnauthorized || strings.Contains(body, "production_customers") {
			t.Errorf("GET %s without signing in: %d", u, status)
		}
	}
	if status, _ := anon.post(execURL, url.Values{"call": {"2"}, "version": {"1"}, "decision": {"approve"}}); status != http.StatusUnauthorized {
		t.Errorf("POST without signing in: %d", status)
	}
	// A forged session cookie: the local person's name, signed with
	// nothing.
	forged := e.browser()
	u, _ := url.Parse(e.srv.URL)
	forged.c.Jar.SetCookies(u, []*http.Cookie{{Name: "pml-approvals", Value: "eyJwIjoibG9jYWw6cGVyc29uIiwidiI6ImxpbmsiLCJ4Ijo5OTk5OTk5OTk5LCJuIjoieCJ9.AAAA"}})
	if status, _ := forged.get(execURL); status != http.StatusUnauthorized {
		t.Errorf("a forged session: %d", status)
	}
	// A link is used once.
	token := e.links.Mint()
	if status, _ := anon.get(e.srv.URL + "/approvals/signin?link=" + token); status != 200 {
		t.Fatalf("first use of a link: %d", status)
	}
	if status, _ := e.browser().get(e.srv.URL + "/approvals/signin?link=" + token); status != http.StatusUnauthorized {
		t.Errorf("second use of a link: %d", status)
	}
	// A wrong password signs no one in.
	if status, _ := e.signInAs(e.browser(), "alice", "guess"); status != http.StatusUnauthorized {
		t.Errorf("wrong password: %d", status)
	}

	b := anon // signed in as the local person now
	_, page := b.get(execURL)
	good := form(t, page, "2", "approve", "")
	for name, f := range map[string]url.Values{
		"no token":                {"version": good["version"], "call": {"2"}, "decision": {"approve"}},
		"another session's token": {"csrf": {form(t, signedInPage(t, e, execURL), "2", "approve", "")["csrf"][0]}, "version": good["version"], "call": {"2"}, "decision": {"approve"}},
	} {
		if status, _ := b.post(execURL, f); status != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", name, status)
		}
	}
	// From another site, even with the token (a page that stole it).
	if status, _ := b.post(execURL, good, "Sec-Fetch-Site", "cross-site"); status != http.StatusForbidden {
		t.Errorf("cross-site post: %d", status)
	}
	if status, _ := b.post(execURL, good, "Origin", "https://evil.example"); status != http.StatusForbidden {
		t.Errorf("post from another origin: %d", status)
	}
	for name, f := range map[string]url.Values{
		"a call not pending": {"csrf": good["csrf"], "version": good["version"], "call": {"9"}, "decision": {"approve"}},
		"no decision":        {"csrf": good["csrf"], "version": good["version"], "call": {"2"}, "decision": {"yes"}},
		"a reason too long":  {"csrf": good["csrf"], "version": good["version"], "call": {"2"}, "decision": {"reject"}, "reason": {strings.Repeat("x", 1001)}},
	} {
		if status, _ := b.post(execURL, f); status != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", name, status)
		}
	}
	if ex, _, _ := e.sink.GetExecution(context.Background(), id); len(ex.Events) != 1 {
		t.Fatalf("a refused decision was recorded: %+v", ex.Events)
	}

	// The caller signs in as itself: it sees its own execution, may only
	// reject it, and a forged approval is refused by the policy.
	caller := e.browser()
	if status, body := e.signInAs(caller, "agent-7", "pw-agent"); status != 200 || !strings.Contains(body, e.agent()) {
		t.Fatalf("the caller signing in: %d %s", status, body)
	}
	_, own := caller.get(execURL)
	if !strings.Contains(own, "You asked for these calls") || strings.Contains(own, `id="approve-2"`) || !strings.Contains(own, `id="reject-2"`) {
		t.Fatalf("the caller's own page offers approval:\n%s", own)
	}
	if _, list := caller.get(e.srv.URL + "/approvals"); !strings.Contains(list, "reject only") {
		t.Errorf("the caller's list: %s", list)
	}
	status, body := caller.post(execURL, form(t, own, "2", "approve", ""))
	if status != http.StatusForbidden || !strings.Contains(body, "not yours") {
		t.Fatalf("the caller approving its own call on the page: %d %s", status, body)
	}
	// A principal that is neither sees nothing.
	other := newEnv(t, func(p *approval.Policy) { p.Approvers = nil })
	ob := other.browser()
	other.signInLocal(ob)
	oid := other.suspend(padded)
	if status, body := ob.get(other.srv.URL + "/approvals/" + oid); status != http.StatusNotFound || strings.Contains(body, "production_customers") {
		t.Errorf("a non-approver reads another's execution: %d", status)
	}
	if _, list := ob.get(other.srv.URL + "/approvals"); strings.Contains(list, oid) {
		t.Errorf("a non-approver's list shows another's execution")
	}

	// The approver's own form, from the page, goes through; sent twice,
	// the second is refused.
	if status, body := b.post(execURL, good); status != 200 {
		t.Fatalf("the approver's form: %d %s", status, body)
	}
	if status, _ := b.post(execURL, good); status != http.StatusConflict {
		t.Fatalf("the same form again: %d, want 409", status)
	}
}

// signedInPage is execURL as another, freshly signed-in local person sees
// it.
func signedInPage(t *testing.T, e *env, execURL string) string {
	b := e.browser()
	e.signInLocal(b)
	_, page := b.get(execURL)
	return page
}

// TestSelfApproval: where the deployment allows it, a person signed in on
// the page decides their own principal's ask — but the same principal's
// credentials still do not.
func TestSelfApproval(t *testing.T) {
	e := newEnv(t, func(p *approval.Policy) { p.SelfApproval = true })
	id := e.suspend(padded)
	if _, ferr := e.svc.Resume(context.Background(), execution.ResumeRequest{ExecutionID: id, Principal: e.agent(),
		Decisions: map[string]execution.Decision{"2": {Approve: true}}}); ferr == nil || ferr.Code != "FORBIDDEN" {
		t.Fatalf("the caller's credentials approving: %v", ferr)
	}
	b := e.browser()
	e.signInAs(b, "agent-7", "pw-agent")
	_, page := b.get(e.srv.URL + "/approvals/" + id)
	if status, body := b.post(e.srv.URL+"/approvals/"+id, form(t, page, "2", "approve", "")); status != 200 {
		t.Fatalf("self-approval on the page: %d %s", status, body)
	}
}

// TestPageHeaders: every answer forbids scripts, frames and sniffing, and
// keeps its URL out of Referer; sessions are HttpOnly and SameSite=Strict.
func TestPageHeaders(t *testing.T) {
	e := newEnv(t, nil)
	resp, err := http.Get(e.srv.URL + "/approvals/signin?link=" + e.links.Mint())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	h := resp.Header
	if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "frame-ancestors 'none'") ||
		strings.Contains(csp, "script-src") || strings.Contains(csp, "unsafe") {
		t.Errorf("CSP %q", csp)
	}
	if h.Get("X-Frame-Options") != "DENY" || h.Get("Referrer-Policy") != "no-referrer" || h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Cache-Control") != "no-store" {
		t.Errorf("headers %v", h)
	}
	ck := resp.Cookies()
	if len(ck) != 1 || !ck[0].HttpOnly || ck[0].SameSite != http.SameSiteStrictMode || ck[0].MaxAge != int(approvalpage.SessionTTL/time.Second) {
		t.Errorf("session cookie %+v", ck)
	}
	for _, next := range []string{"//evil.example/x", "https://evil.example", "/approvals/../../x\\y", "/elsewhere"} {
		resp, err := http.Get(e.srv.URL + "/approvals/signin?link=" + e.links.Mint() + "&next=" + url.QueryEscape(next))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), `content="0;url=/approvals?s=`) {
			t.Errorf("next=%s: the landing goes elsewhere: %s", next, body)
		}
	}
}

// TestArgumentsShownFaithfully: what could hide or reorder text on the
// page — a bidirectional override, zero-width characters — is shown as an
// escape, and a key a script names twice is listed twice.
func TestArgumentsShownFaithfully(t *testing.T) {
	e := newEnv(t, nil)
	id := e.suspend(`return await mcp.demo.kv_delete({key: "safe\u202e\u200btxt.exe", note: "a\u2028b"})`)
	b := e.browser()
	e.signInLocal(b)
	_, page := b.get(e.srv.URL + "/approvals/" + id)
	for _, want := range []string{`safe\u202e\u200btxt.exe`, `a\u2028b`} {
		if !strings.Contains(page, want) {
			t.Errorf("the page does not show %s as an escape", want)
		}
	}
	if strings.ContainsRune(page, '\u202e') || strings.ContainsRune(page, '\u200b') {
		t.Errorf("the page holds a raw format character")
	}
}
