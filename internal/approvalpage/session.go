package approvalpage

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Page sessions are kept on the server (a SessionStore): the cookie holds
// only a random id, and the store, under a hash of it, whose session it is,
// how they signed in, the origin (scheme, host and port) they signed in
// on, and when it ends. Signing out deletes the record, so the old cookie
// is worth nothing at once, in every process and container that reads
// the same store.
//
// A cookie is not enough to act, though: browsers send a host's cookies
// to every port of it, and SameSite counts every loopback port as the
// same site, so any other web server on 127.0.0.1 the person opens (an
// agent's dev server) receives the page's cookie, and can send it back.
// What it cannot have is what the page put in its own links and forms: a
// key, derived with the deployment's key from the session's id and its
// origin, that every page request must carry — in the URL (?s=) of a
// page, in the csrf field of a form. The page sends no script, keeps its
// URLs out of Referer, and a browser sends another port neither this
// page's URLs nor its forms; a request with the cookie alone is treated
// as signed out, and reads and decides nothing.

// SessionTTL is how long a page session lasts after sign-in.
const SessionTTL = 8 * time.Hour

// flowTTL bounds a sign-in through the provider: from the redirect to it
// to the callback.
const flowTTL = 10 * time.Minute

// session is a signed-in person's page session, as its record keeps it.
type session struct {
	Principal string `json:"p"`
	// Via is how the person signed in: "oidc" (the deployment's provider)
	// or "link" (pml serve's one-time local link).
	Via string `json:"v"`
	// Origin is the page's base the session was started on (scheme,
	// host and port; deployed, the configured base URL): it holds
	// nowhere else.
	Origin  string `json:"o"`
	Expires int64  `json:"x"`
	// id is the cookie's value: kept in no record, shown on no page.
	id string
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
// key for one use, so a value made for one use never passes for another
// (a flow cookie as a session's key, either as an elicitation state).
type keys struct {
	flow, csrf []byte
}

func deriveKeys(root []byte) keys {
	derive := func(use string) []byte {
		m := hmac.New(sha256.New, root)
		m.Write([]byte("pml approval page: " + use))
		return m.Sum(nil)
	}
	return keys{flow: derive("sign-in flow"), csrf: derive("session key")}
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
// page, link or form makes the browser send it (other ports of the same
// host are the same site: the session's key, not the cookie, keeps them
// out). The sign-in flow's cookie
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

// SessionStore keeps page sessions on the server: small values under
// opaque keys until they expire or are deleted. suspend.PageSessions is
// one (a directory or the suspensions' DynamoDB table: what every process
// and container serving the page sees); NewMemorySessions keeps them in
// this process alone.
type SessionStore interface {
	Put(ctx context.Context, key string, value []byte, expires time.Time) error
	// Get returns key's value; false when there is none (or it expired).
	Get(ctx context.Context, key string) ([]byte, bool, error)
	Delete(ctx context.Context, key string) error
}

// tokenParam is the query parameter that carries the session's key in
// the page's links; a form carries it as its csrf field.
const tokenParam = "s"

// errSignedOut is a request without a session: no cookie, or one whose
// session ended, expired, was started on another origin, or whose key
// the request does not carry.
var errSignedOut = errors.New("not signed in")

// storeKey is where a session's record is kept: a hash of the cookie, so
// that whoever reads the store (the directory, the table) finds no cookie
// to send.
func storeKey(id string) string {
	sum := sha256.Sum256([]byte("pml approval page session\n" + id))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// cookieSession returns the session the request's cookie names, unless it
// ended, expired or belongs to another origin. It does not check the
// session's key: only signedIn's answer may act.
func (p *Page) cookieSession(r *http.Request) (session, error) {
	ck, err := r.Cookie(p.cookies.sessionName())
	if err != nil || len(ck.Value) != idLength {
		return session{}, errSignedOut
	}
	raw, ok, err := p.sessions.Get(r.Context(), storeKey(ck.Value))
	if err != nil {
		return session{}, fmt.Errorf("reading the page session: %w", err)
	}
	var s session
	if !ok || json.Unmarshal(raw, &s) != nil || s.Principal == "" || p.now().Unix() >= s.Expires ||
		subtle.ConstantTimeCompare([]byte(s.Origin), []byte(p.baseURL(r))) != 1 {
		return session{}, errSignedOut
	}
	s.id = ck.Value
	return s, nil
}

// signedIn returns the request's session if it has one and carries its
// key: in the URL (?s=) of a GET, in the csrf field of a POST (whose form
// the caller has parsed, under its own bound). errSignedOut otherwise;
// another error when the store cannot be read.
func (p *Page) signedIn(r *http.Request) (session, error) {
	s, err := p.cookieSession(r)
	if err != nil {
		return session{}, err
	}
	token := r.URL.Query().Get(tokenParam)
	if r.Method == http.MethodPost {
		token = r.PostFormValue("csrf")
	}
	if !p.tokenOK(s, token) {
		return session{}, errSignedOut
	}
	return s, nil
}

// idLength is the length of a session id: randomToken's.
var idLength = len(randomToken())

// startSession signs principal in: a new session, kept on the server,
// bound to the origin the request came to, its id in the cookie. The
// session the browser held before, if any, ends: a sign-in never hands
// out an id someone else may have seen.
func (p *Page) startSession(w http.ResponseWriter, r *http.Request, principal, via string) (session, error) {
	if old, err := p.cookieSession(r); err == nil {
		_ = p.sessions.Delete(r.Context(), storeKey(old.id))
	}
	s := session{Principal: principal, Via: via, Origin: p.baseURL(r), Expires: p.now().Add(SessionTTL).Unix(), id: randomToken()}
	raw, err := json.Marshal(s)
	if err != nil {
		return session{}, err
	}
	if err := p.sessions.Put(r.Context(), storeKey(s.id), raw, time.Unix(s.Expires, 0)); err != nil {
		return session{}, err
	}
	p.cookies.set(w, p.cookies.sessionName(), s.id, SessionTTL, true)
	return s, nil
}

// endSession signs s out: its record is deleted, and its cookie with it.
func (p *Page) endSession(w http.ResponseWriter, r *http.Request, s session) error {
	if err := p.sessions.Delete(r.Context(), storeKey(s.id)); err != nil {
		return err
	}
	p.cookies.clear(w, p.cookies.sessionName(), true)
	return nil
}

// token is the key of s that the page's links and forms carry: derived
// from the session's id and origin with the deployment's key, so only the
// page computes it, it is worth nothing in another session or on another
// origin, and the cookie alone does not give it.
func (p *Page) token(s session) string {
	return base64.RawURLEncoding.EncodeToString(mac(p.keys.csrf, s.id+"\n"+s.Origin))
}

// tokenOK checks a request's key against the session, in constant time.
func (p *Page) tokenOK(s session, token string) bool {
	want := p.token(s)
	return token != "" && subtle.ConstantTimeCompare([]byte(token), []byte(want)) == 1
}

// link is the page path rel (Prefix + …, perhaps with a query) as s's
// links name it: under the base URL's path, carrying the session's key.
func (p *Page) link(s session, rel string) string {
	sep := "?"
	if strings.Contains(rel, "?") {
		sep = "&"
	}
	return p.path(rel) + sep + tokenParam + "=" + p.token(s)
}

// memorySessions is a SessionStore in this process's memory.
type memorySessions struct {
	mu  sync.Mutex
	now func() time.Time
	m   map[string]memorySession
}

type memorySession struct {
	value   []byte
	expires time.Time
}

// maxMemorySessions bounds the sessions kept in memory: the soonest to
// expire goes first (sign-ins take a person or a one-time link, so this
// is far above use).
const maxMemorySessions = 1024

// NewMemorySessions returns a SessionStore in this process's memory: a
// restart signs everyone out. For a page served by one process (pml serve
// without a suspension directory, tests).
func NewMemorySessions() SessionStore {
	return &memorySessions{now: time.Now, m: map[string]memorySession{}}
}

func (m *memorySessions) Put(_ context.Context, key string, value []byte, expires time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	for k, s := range m.m {
		if !now.Before(s.expires) {
			delete(m.m, k)
		}
	}
	if _, ok := m.m[key]; !ok && len(m.m) >= maxMemorySessions {
		first := ""
		for k, s := range m.m {
			if first == "" || s.expires.Before(m.m[first].expires) {
				first = k
			}
		}
		delete(m.m, first)
	}
	m.m[key] = memorySession{value: bytes.Clone(value), expires: expires}
	return nil
}

func (m *memorySessions) Get(_ context.Context, key string) ([]byte, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.m[key]
	if !ok || !m.now().Before(s.expires) {
		return nil, false, nil
	}
	return bytes.Clone(s.value), true, nil
}

func (m *memorySessions) Delete(_ context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.m, key)
	return nil
}
