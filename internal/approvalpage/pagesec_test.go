package approvalpage_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/approvalpage"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/trace"
)

// replay is a local process that holds what a browser sent it (its
// Cookie header) and sends it to the page itself, with any headers it
// likes: it is no browser, and forges Origin and Sec-Fetch-Site at will.
type replay struct {
	t      *testing.T
	cookie string
	c      *http.Client
}

func newReplay(t *testing.T, cookie string) *replay {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &replay{t: t, cookie: cookie, c: &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (r *replay) do(method, u string, form url.Values, headers ...string) (int, string) {
	r.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, u, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.Header.Set("Cookie", r.cookie)
	for i := 0; i+1 < len(headers); i += 2 {
		switch {
		case headers[i] != "Host":
			req.Header.Set(headers[i], headers[i+1])
		case headers[i+1] != "":
			req.Host = headers[i+1]
		}
	}
	resp, err := r.c.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// devServer is another web server on 127.0.0.1 (an agent's dev server, a
// local tool's): it answers every page and keeps the Cookie header the
// browser sent it.
func devServer(t *testing.T) (*httptest.Server, <-chan string) {
	got := make(chan string, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case got <- r.Header.Get("Cookie"):
		default:
		}
		_, _ = io.WriteString(w, "<!doctype html><p>a dev server</p>")
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

// stillWaits fails the test unless execution id still waits, decided by no
// one.
func (e *env) stillWaits(id string) {
	e.t.Helper()
	if doc, ferr := e.svc.Waiting(context.Background(), id); ferr != nil || doc.Status != execution.StatusSuspended {
		e.t.Fatalf("execution %s no longer waits: %+v %v", id, doc, ferr)
	}
	ex, _, err := e.sink.GetExecution(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, ev := range ex.Events {
		if ev.Type == trace.EventResume {
			e.t.Fatalf("a decision was recorded: %+v", ev)
		}
	}
}

// TestAnotherLocalServerCannotActAsThePerson (hostile review 5, finding
// 1): the person signs in on the page, then opens another web server on
// 127.0.0.1. Cookies do not separate ports and SameSite counts every
// loopback port as the same site, so the browser sends that server the
// page's cookie. That server replays it — and every token it can read
// with it — to the page, as itself and dressed as the page's own browser:
// it reads nothing and decides nothing. The person still decides.
func TestAnotherLocalServerCannotActAsThePerson(t *testing.T) {
	e := newEnv(t, nil)
	id := e.suspend(padded)
	b := e.browser()
	e.signInLocal(b)
	dev, got := devServer(t)
	if status, _ := b.get(dev.URL + "/"); status != http.StatusOK {
		t.Fatalf("the dev server: %d", status)
	}
	cookie := <-got
	if !strings.Contains(cookie, "pml-approvals") {
		t.Fatalf("the browser sent the other port %q: the test shows nothing", cookie)
	}
	r := newReplay(t, cookie)
	execURL := e.srv.URL + "/approvals/" + id
	// Whatever it can read with the cookie alone: the execution, the
	// list, a page that is not there, the sign-in page.
	var tokens []string
	for _, u := range []string{execURL, e.srv.URL + "/approvals", e.srv.URL + "/approvals/ex_none", e.srv.URL + "/approvals/signin"} {
		for _, host := range []string{"", strings.TrimPrefix(dev.URL, "http://")} {
			status, body := r.do(http.MethodGet, u, nil, "Host", host)
			if strings.Contains(body, "production_customers") || strings.Contains(body, id) && u != execURL {
				t.Errorf("GET %s (Host %q) with the replayed cookie read the call: %d", u, host, status)
			}
			for _, m := range csrfRE.FindAllStringSubmatch(body, -1) {
				tokens = append(tokens, m[1])
			}
		}
	}
	if len(tokens) == 0 {
		tokens = []string{""}
	}
	for _, tok := range tokens {
		f := url.Values{"csrf": {tok}, "version": {"1"}, "call": {"2"}, "decision": {"approve"}}
		for _, h := range [][]string{
			nil,
			{"Origin", e.srv.URL, "Sec-Fetch-Site", "same-origin"},
			{"Sec-Fetch-Site", "none"},
		} {
			if status, body := r.do(http.MethodPost, execURL, f, h...); status == http.StatusOK {
				t.Fatalf("the other server approved the call as the person (token %q, headers %v): %s", tok, h, body)
			}
		}
		// Nor may it sign the person out.
		if status, _ := r.do(http.MethodPost, e.srv.URL+"/approvals/signout", url.Values{"csrf": {tok}}); status == http.StatusOK && tok != "" {
			t.Errorf("the other server signed the person out")
		}
	}
	e.stillWaits(id)
	_, page := b.get(execURL)
	if status, body := b.post(execURL, form(t, page, "2", "approve", "")); status != http.StatusOK {
		t.Fatalf("the person's own decision: %d %s", status, body)
	}
}

// TestSignOutEndsTheSession (hostile review 5, finding 8): signing out
// ends the session on the server; its old cookie, sent again with the
// page's tokens, reads and decides nothing.
func TestSignOutEndsTheSession(t *testing.T) {
	e := newEnv(t, nil)
	id := e.suspend(padded)
	execURL := e.srv.URL + "/approvals/" + id
	b := e.browser()
	e.signInLocal(b)
	_, page := b.get(execURL)
	f := form(t, page, "2", "approve", "")
	u, _ := url.Parse(e.srv.URL)
	var cookie []string
	for _, c := range b.c.Jar.Cookies(u) {
		cookie = append(cookie, c.Name+"="+c.Value)
	}
	if status, body := b.post(e.srv.URL+"/approvals/signout", url.Values{"csrf": f["csrf"]}); status != http.StatusOK || !strings.Contains(body, "signed out") {
		t.Fatalf("sign out: %d %s", status, body)
	}
	r := newReplay(t, strings.Join(cookie, "; "))
	links := regexp.MustCompile(`href="([^"]+)"`).FindAllStringSubmatch(page, -1)
	for _, u := range append([]string{execURL}, func() (out []string) {
		for _, l := range links {
			out = append(out, e.srv.URL+strings.ReplaceAll(l[1], "&amp;", "&"))
		}
		return out
	}()...) {
		if status, body := r.do(http.MethodGet, u, nil); status == http.StatusOK && strings.Contains(body, "production_customers") {
			t.Fatalf("the signed-out session read %s", u)
		}
	}
	if status, body := r.do(http.MethodPost, execURL, f); status == http.StatusOK {
		t.Fatalf("the signed-out session approved: %s", body)
	}
	e.stillWaits(id)
}

// TestListGroupsByWhoAsked (hostile review 5, finding 7): 55 executions
// of one caller do not hide another's from the list: it is grouped by who
// asked, and every one of the 55 is reached by paging.
func TestListGroupsByWhoAsked(t *testing.T) {
	e := newEnv(t, nil)
	const code = `return await mcp.demo.kv_delete({key: "k"})`
	agent := map[string]bool{}
	for range 55 {
		agent[e.suspend(code)] = true
	}
	resp := e.svc.Execute(context.Background(), execution.Request{Code: code, Approval: execution.ApprovalSuspend, Principal: "jwt:other#bob"})
	if !resp.Suspended() {
		t.Fatalf("bob's execution did not suspend: %+v", resp.Error)
	}
	bob := resp.ExecutionID
	b := e.browser()
	e.signInLocal(b)
	_, list := b.get(e.srv.URL + "/approvals")
	if !strings.Contains(list, bob) {
		t.Fatalf("bob's call is hidden behind the agent's 55")
	}
	if !strings.Contains(list, "jwt:other#bob") || !strings.Contains(list, e.agent()) {
		t.Fatalf("the list does not say who asked:\n%s", list)
	}
	// Every one of the agent's is reached by following the list's links.
	idRE := regexp.MustCompile(`/approvals/(ex_[A-Za-z0-9_-]+)`)
	moreRE := regexp.MustCompile(`<a class="more" href="([^"]+)"`)
	seen := map[string]bool{}
	queue, visited := []string{"/approvals"}, map[string]bool{}
	for len(queue) > 0 && len(visited) < 40 {
		u := queue[0]
		queue = queue[1:]
		if visited[u] {
			continue
		}
		visited[u] = true
		status, page := b.get(e.srv.URL + u)
		if status != http.StatusOK {
			t.Fatalf("GET %s: %d", u, status)
		}
		for _, m := range idRE.FindAllStringSubmatch(page, -1) {
			seen[m[1]] = true
		}
		for _, m := range moreRE.FindAllStringSubmatch(page, -1) {
			queue = append(queue, strings.ReplaceAll(m[1], "&amp;", "&"))
		}
	}
	for id := range agent {
		if !seen[id] {
			t.Fatalf("the agent's %s is never listed (%d of 55 seen, %d pages)", id, len(seen)-1, len(visited))
		}
	}
}

// TestSessionsSharedByContainers: the deployed shape. Two pages — two
// Lambda containers — behind one HTTPS origin share the suspension
// store's page sessions (a directory here; the table in
// TestApprovalPageLambdaInBrowser): a session started in one acts in the
// other, with its key; a sign-out in one ends it in both; and a page of
// another origin sharing the store does not take it.
func TestSessionsSharedByContainers(t *testing.T) {
	e := newEnv(t, nil)
	id := e.suspend(padded)
	store := suspend.NewFilePageSessions(t.TempDir(), suspend.Options{})
	key, err := approval.LoadKeyFile(t.TempDir() + "/key")
	if err != nil {
		t.Fatal(err)
	}
	links := approvalpage.NewLocalLinks()
	var pages [2]*approvalpage.Page
	var n atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pages[n.Add(1)%2].ServeHTTP(w, r) // each request to the other container
	}))
	srv.StartTLS()
	t.Cleanup(srv.Close)
	for i := range pages {
		if pages[i], err = approvalpage.New(approvalpage.Options{Service: e.svc, Lister: e.svc, Policy: e.policy, Key: key, Links: links,
			Sessions: store, BaseURL: srv.URL, Logger: slog.New(slog.DiscardHandler)}); err != nil {
			t.Fatal(err)
		}
	}
	jar, _ := cookiejar.New(nil)
	c := srv.Client()
	c.Jar = jar
	b := &browser{t: t, c: c}
	status, body := b.get(pages[0].SignInLink(srv.URL) + "&next=" + url.QueryEscape("/approvals/"+id))
	if status != http.StatusOK || b.token == "" {
		t.Fatalf("sign-in: %d %s", status, body)
	}
	u, _ := url.Parse(srv.URL)
	if ck := jar.Cookies(u); len(ck) != 1 || ck[0].Name != "__Host-pml-approvals" {
		t.Fatalf("cookies %+v", ck)
	}
	execURL := srv.URL + "/approvals/" + id
	for range 2 { // one request per container
		if status, page := b.get(execURL); status != http.StatusOK || !strings.Contains(page, "production_customers") {
			t.Fatalf("the execution's page: %d", status)
		}
	}
	// Another origin's page over the same store and key: not its session.
	elsewhere, err := approvalpage.New(approvalpage.Options{Service: e.svc, Lister: e.svc, Policy: e.policy, Key: key, Sessions: store,
		BaseURL: "https://elsewhere.example", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, b.keyed("/approvals/"+id), nil)
	for _, ck := range jar.Cookies(u) {
		req.AddCookie(ck)
	}
	rec := httptest.NewRecorder()
	elsewhere.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("another origin's page took the session: %d", rec.Code)
	}
	_, page := b.get(execURL)
	old := jar.Cookies(u)
	if status, _ := b.post(srv.URL+"/approvals/signout", url.Values{"csrf": form(t, page, "2", "approve", "")["csrf"]}); status != http.StatusOK {
		t.Fatalf("sign out: %d", status)
	}
	replayed := &browser{t: t, c: &http.Client{Transport: c.Transport, Jar: func() http.CookieJar { j, _ := cookiejar.New(nil); j.SetCookies(u, old); return j }()}, token: b.token}
	for range 2 {
		if status, _ := replayed.get(execURL); status != http.StatusUnauthorized {
			t.Fatalf("the signed-out session, in either container: %d", status)
		}
	}
	e.stillWaits(id)
}
