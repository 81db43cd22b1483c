package approvalpage

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestLocalLinksOnceWithinTheirTime: a link signs in once, within
// LinkTTL, only as minted and only on the origin it was printed for; the
// oldest go when too many wait.
func TestLocalLinksOnceWithinTheirTime(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := &LocalLinks{now: func() time.Time { return now }}
	const here = "http://127.0.0.1:8080"
	a, b := l.MintFor(here), l.MintFor(here)
	if a == b || len(a) < 40 {
		t.Fatalf("tokens %q %q", a, b)
	}
	for _, bad := range []string{"", a + "x", strings.ToUpper(a)} {
		if l.RedeemAt(bad, here) {
			t.Errorf("redeemed %q", bad)
		}
	}
	if l.RedeemAt(a, "http://127.0.0.1:8081") || l.RedeemAt(a, "http://localhost:8080") {
		t.Fatal("a link printed for one origin signs in on another")
	}
	if !l.RedeemAt(a, here) || l.RedeemAt(a, here) {
		t.Fatal("a link is used exactly once")
	}
	if any := l.Mint(); !l.RedeemAt(any, "http://127.0.0.1:9") {
		t.Fatal("a link minted for any origin")
	}
	now = now.Add(LinkTTL)
	if l.RedeemAt(b, here) {
		t.Fatal("a link outlived LinkTTL")
	}
	first := l.Mint()
	for range maxLinks {
		l.Mint()
	}
	if l.RedeemAt(first, here) || len(l.links) != maxLinks {
		t.Fatalf("the oldest link stays past %d (%d held)", maxLinks, len(l.links))
	}
}

// TestSessionsOnTheServer: the cookie holds only an id; the session is
// its record on the server, read on the origin it was started on, before
// it expires, until it is ended, and acts only with its key — derived
// from the id and the origin with the page's key, worth nothing in
// another session, on another origin or under another key.
func TestSessionsOnTheServer(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	store := &memorySessions{now: func() time.Time { return now }, m: map[string]memorySession{}}
	p := &Page{keys: deriveKeys([]byte(strings.Repeat("k", 32))), sessions: store, opts: Options{Now: func() time.Time { return now }}}
	const origin = "http://127.0.0.1:8080"
	req := func(method, target, host, cookie string) *http.Request {
		r := httptest.NewRequest(method, target, nil)
		r.Host = host
		if cookie != "" {
			r.AddCookie(&http.Cookie{Name: "pml-approvals", Value: cookie})
		}
		return r
	}
	rec := httptest.NewRecorder()
	s, err := p.startSession(rec, req(http.MethodGet, "/approvals/signin", "127.0.0.1:8080", ""), "jwt:https://idp#alice", "oidc")
	if err != nil {
		t.Fatal(err)
	}
	cookie := rec.Result().Cookies()[0]
	if cookie.Value != s.id || strings.Contains(cookie.Value, ".") || s.Origin != origin {
		t.Fatalf("cookie %+v, session %+v", cookie, s)
	}
	for k, v := range store.m {
		if k == cookie.Value || strings.Contains(string(v.value), cookie.Value) {
			t.Fatal("the store keeps the cookie's value")
		}
	}
	tok := p.token(s)
	got, err := p.signedIn(req(http.MethodGet, "/approvals?s="+tok, "127.0.0.1:8080", cookie.Value))
	if err != nil || got.Principal != "jwt:https://idp#alice" || got.Via != "oidc" {
		t.Fatalf("signed in: %+v %v", got, err)
	}
	other := &Page{keys: deriveKeys([]byte(strings.Repeat("o", 32))), sessions: store, opts: p.opts}
	for name, r := range map[string]*http.Request{
		"the cookie alone":        req(http.MethodGet, "/approvals", "127.0.0.1:8080", cookie.Value),
		"another port":            req(http.MethodGet, "/approvals?s="+tok, "127.0.0.1:8081", cookie.Value),
		"another key's token":     req(http.MethodGet, "/approvals?s="+other.token(s), "127.0.0.1:8080", cookie.Value),
		"a token in a POST's URL": req(http.MethodPost, "/approvals?s="+tok, "127.0.0.1:8080", cookie.Value),
		"a changed cookie":        req(http.MethodGet, "/approvals?s="+tok, "127.0.0.1:8080", strings.ToUpper(cookie.Value)),
		"no cookie":               req(http.MethodGet, "/approvals?s="+tok, "127.0.0.1:8080", ""),
	} {
		if _, err := p.signedIn(r); err != errSignedOut {
			t.Errorf("%s: %v, want signed out", name, err)
		}
	}
	// A second sign-in in the same browser ends the first session.
	rec = httptest.NewRecorder()
	s2, err := p.startSession(rec, req(http.MethodGet, "/approvals/signin", "127.0.0.1:8080", cookie.Value), "local:person", "link")
	if err != nil || p.token(s2) == tok {
		t.Fatalf("second session %+v %v", s2, err)
	}
	if _, err := p.cookieSession(req(http.MethodGet, "/", "127.0.0.1:8080", cookie.Value)); err != errSignedOut {
		t.Fatal("the first session outlived the second sign-in")
	}
	r2 := req(http.MethodGet, "/approvals?s="+p.token(s2), "127.0.0.1:8080", s2.id)
	if err := p.endSession(httptest.NewRecorder(), r2, s2); err != nil {
		t.Fatal(err)
	}
	if _, err := p.signedIn(r2); err != errSignedOut {
		t.Fatal("an ended session still acts")
	}
	rec = httptest.NewRecorder()
	s3, _ := p.startSession(rec, req(http.MethodGet, "/approvals/signin", "127.0.0.1:8080", ""), "local:person", "link")
	now = now.Add(SessionTTL)
	if _, err := p.signedIn(req(http.MethodGet, "/approvals?s="+p.token(s3), "127.0.0.1:8080", s3.id)); err != errSignedOut {
		t.Fatal("a session outlived SessionTTL")
	}
}

// TestMemorySessionsBounded: the memory store keeps at most
// maxMemorySessions, dropping the soonest to expire.
func TestMemorySessionsBounded(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := &memorySessions{now: func() time.Time { return now }, m: map[string]memorySession{}}
	ctx := context.Background()
	for i := range maxMemorySessions + 10 {
		_ = m.Put(ctx, fmt.Sprintf("k%d", i), []byte("v"), now.Add(time.Hour+time.Duration(i)*time.Second))
	}
	if len(m.m) != maxMemorySessions {
		t.Fatalf("%d sessions held", len(m.m))
	}
	if _, ok, _ := m.Get(ctx, "k0"); ok {
		t.Fatal("the soonest to expire stays")
	}
	if _, ok, _ := m.Get(ctx, fmt.Sprintf("k%d", maxMemorySessions+9)); !ok {
		t.Fatal("the newest is gone")
	}
}
