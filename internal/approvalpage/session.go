package approvalpage

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"
)

// Page sessions are signed, expiring cookies: the person's principal, how
// they signed in, when the session ends, and a random nonce the CSRF token
// of every form is bound to. Nothing is kept on the server, so any process
// or Lambda container with the deployment's key reads them, and a session
// outlives a restart of pml serve (its key file stays).

// SessionTTL is how long a page session lasts after sign-in.
const SessionTTL = 8 * time.Hour

// flowTTL bounds a sign-in through the provider: from the redirect to it
// to the callback.
const flowTTL = 10 * time.Minute

// session is what the session cookie carries.
type session struct {
	Principal string `json:"p"`
	// Via is how the person signed in: "oidc" (the deployment's provider)
	// or "link" (pml serve's one-time local link).
	Via     string `json:"v"`
	Expires int64  `json:"x"`
	Nonce   string `json:"n"`
}

// flow is what the sign-in cookie carries between the redirect to the
// provider and its callback: the state and nonce sent, the PKCE verifier,
// and where to go after.
type flow struct {
	State    string `json:"s"`
	Nonce    string `json:"n"`
	Verifier string `json:"v"`
	Next     string `json:"t"`
	Expires  int64  `json:"x"`
}

// keys are the page's keys, each derived from the deployment's approval
// key for one use, so a value signed for one use never passes for another
// (a flow cookie as a session, a session as an elicitation state).
type keys struct {
	session, flow, csrf []byte
}

func deriveKeys(root []byte) keys {
	derive := func(use string) []byte {
		m := hmac.New(sha256.New, root)
		m.Write([]byte("pml approval page: " + use))
		return m.Sum(nil)
	}
	return keys{session: derive("session"), flow: derive("sign-in flow"), csrf: derive("csrf")}
}

// errBadCookie is any cookie that is not one the page signed whole, or has
// expired.
var errBadCookie = errors.New("not a valid cookie")

// sign returns v as a signed cookie value: base64(JSON).base64(HMAC).
func sign(key []byte, v any) (string, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	payload := base64.RawURLEncoding.EncodeToString(body)
	return payload + "." + base64.RawURLEncoding.EncodeToString(mac(key, payload)), nil
}

// open checks a signed cookie value and decodes it into v.
func open(key []byte, value string, v any) error {
	payload, sig, ok := strings.Cut(value, ".")
	if !ok {
		return errBadCookie
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, mac(key, payload)) {
		return errBadCookie
	}
	body, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil || json.Unmarshal(body, v) != nil {
		return errBadCookie
	}
	return nil
}

func mac(key []byte, s string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(s))
	return m.Sum(nil)
}

// randomToken is 32 random bytes, base64url.
func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// cookies names and sets the page's cookies for one deployment.
type cookies struct {
	// secure: the page is served over HTTPS (the deployment); on http
	// loopback (pml serve) a Secure cookie would not be kept by every
	// browser. A secure session cookie takes the __Host- prefix: no
	// sibling domain can set or shadow it.
	secure bool
}

func (c cookies) sessionName() string {
	if c.secure {
		return "__Host-pml-approvals"
	}
	return "pml-approvals"
}

func (c cookies) flowName() string {
	if c.secure {
		return "__Host-pml-signin"
	}
	return "pml-signin"
}

// set writes a cookie. The session is SameSite=Strict: no other site's
// page, link or form makes the browser send it. The sign-in flow's cookie
// is Lax, since it must come back on the provider's redirect (a top-level
// navigation from another site).
func (c cookies) set(w http.ResponseWriter, name, value string, maxAge time.Duration, strict bool) {
	same := http.SameSiteLaxMode
	if strict {
		same = http.SameSiteStrictMode
	}
	age := int(maxAge / time.Second)
	if maxAge < 0 {
		age = -1
	}
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: "/", MaxAge: age, HttpOnly: true, Secure: c.secure, SameSite: same})
}

// clear removes a cookie.
func (c cookies) clear(w http.ResponseWriter, name string, strict bool) {
	c.set(w, name, "", -1, strict)
}

// readSession returns the request's page session, if it has a valid one.
func (p *Page) readSession(r *http.Request) (session, bool) {
	ck, err := r.Cookie(p.cookies.sessionName())
	if err != nil {
		return session{}, false
	}
	var s session
	if open(p.keys.session, ck.Value, &s) != nil || s.Principal == "" || s.Nonce == "" || p.now().Unix() >= s.Expires {
		return session{}, false
	}
	return s, true
}

// startSession signs principal in: a new session with a fresh nonce.
func (p *Page) startSession(w http.ResponseWriter, principal, via string) error {
	s := session{Principal: principal, Via: via, Expires: p.now().Add(SessionTTL).Unix(), Nonce: randomToken()}
	v, err := sign(p.keys.session, s)
	if err != nil {
		return err
	}
	p.cookies.set(w, p.cookies.sessionName(), v, SessionTTL, true)
	return nil
}

// csrfToken is the token the forms of s carry: bound to the session's
// nonce, so it is worth nothing in another session, and no other site can
// read it from the page.
func (p *Page) csrfToken(s session) string {
	return base64.RawURLEncoding.EncodeToString(mac(p.keys.csrf, s.Nonce))
}

// csrfOK checks a form's token against the session, in constant time.
func (p *Page) csrfOK(s session, token string) bool {
	want := p.csrfToken(s)
	return token != "" && subtle.ConstantTimeCompare([]byte(token), []byte(want)) == 1
}
