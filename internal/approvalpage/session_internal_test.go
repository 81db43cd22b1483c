package approvalpage

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestLocalLinksOnceWithinTheirTime: a link signs in once, within
// LinkTTL, and only as minted; the oldest go when too many wait.
func TestLocalLinksOnceWithinTheirTime(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := &LocalLinks{now: func() time.Time { return now }}
	a, b := l.Mint(), l.Mint()
	if a == b || len(a) < 40 {
		t.Fatalf("tokens %q %q", a, b)
	}
	for _, bad := range []string{"", a + "x", strings.ToUpper(a)} {
		if l.Redeem(bad) {
			t.Errorf("redeemed %q", bad)
		}
	}
	if !l.Redeem(a) || l.Redeem(a) {
		t.Fatal("a link is used exactly once")
	}
	now = now.Add(LinkTTL)
	if l.Redeem(b) {
		t.Fatal("a link outlived LinkTTL")
	}
	first := l.Mint()
	for range maxLinks {
		l.Mint()
	}
	if l.Redeem(first) || len(l.links) != maxLinks {
		t.Fatalf("the oldest link stays past %d (%d held)", maxLinks, len(l.links))
	}
}

// TestSessionsSignedAndExpiring: a session cookie is read only whole,
// signed with this key, and before it expires; a flow cookie or a
// session signed with another key is no session.
func TestSessionsSignedAndExpiring(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := &Page{keys: deriveKeys([]byte(strings.Repeat("k", 32))), opts: Options{Now: func() time.Time { return now }}}
	rec := httptest.NewRecorder()
	if err := p.startSession(rec, "jwt:https://idp#alice", "oidc"); err != nil {
		t.Fatal(err)
	}
	cookie := rec.Result().Cookies()[0]
	read := func(value string) (session, bool) {
		r := httptest.NewRequest(http.MethodGet, "/approvals", nil)
		r.AddCookie(&http.Cookie{Name: cookie.Name, Value: value})
		return p.readSession(r)
	}
	s, ok := read(cookie.Value)
	if !ok || s.Principal != "jwt:https://idp#alice" || s.Via != "oidc" || !p.csrfOK(s, p.csrfToken(s)) || p.csrfOK(s, "") {
		t.Fatalf("session %+v %v", s, ok)
	}
	payload, sig, _ := strings.Cut(cookie.Value, ".")
	other := &Page{keys: deriveKeys([]byte(strings.Repeat("o", 32)))}
	forged, _ := sign(other.keys.session, s)
	asFlow, _ := sign(p.keys.flow, s)
	for name, v := range map[string]string{
		"another key":        forged,
		"the flow's key":     asFlow,
		"a changed payload":  strings.Replace(payload, "a", "b", 1) + "." + sig,
		"no signature":       payload,
		"another signature":  payload + "." + strings.Repeat("A", len(sig)),
		"not base64 at all!": "%%%.%%%",
	} {
		if _, ok := read(v); ok {
			t.Errorf("%s: read as a session", name)
		}
	}
	now = now.Add(SessionTTL)
	if _, ok := read(cookie.Value); ok {
		t.Fatal("a session outlived SessionTTL")
	}
}
