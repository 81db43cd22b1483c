// Package oauthserver is a small OAuth 2.1 authorization server and
// resource-server guard for tests: RFC 8414 metadata, dynamic client
// registration (RFC 7591), the authorization-code grant with PKCE S256
// (checked) and resource indicators (RFC 8707, bound into the tokens),
// refresh tokens that rotate on every use with reuse detection (a spent
// refresh token revokes its whole family, as OAuth 2.1 §4.3.1 suggests),
// the client-credentials grant, short-lived access tokens, and a guard
// that answers requests to a protected MCP endpoint with RFC 9728
// challenges and serves its protected resource metadata.
//
// Its authorization endpoint approves at once and redirects (the test, or
// a headless user agent, plays the browser). It listens on loopback only.
package oauthserver

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Options configure a Server.
type Options struct {
	// AccessTTL is the access tokens' lifetime (default 1 h).
	AccessTTL time.Duration
	// Clients are pre-registered confidential clients: id → secret.
	Clients map[string]string
	// ScopesSupported is advertised in the metadata.
	ScopesSupported []string
}

// Counts says what the server has done.
type Counts struct {
	Registrations, Authorizations, CodeExchanges, Refreshes, ClientCredentials, ReuseDetected int
}

// Server is a running authorization server.
type Server struct {
	URL  string // the issuer
	opts Options
	ts   *httptest.Server

	mu      sync.Mutex
	clients map[string]client
	codes   map[string]grant
	access  map[string]token
	refresh map[string]*family // refresh token → its family
	spent   map[string]*family // rotated-out refresh tokens
	counts  Counts
}

type client struct {
	secret      string
	redirectURI []string
}

type grant struct {
	clientID, redirectURI, challenge, resource string
	scopes                                     []string
}

type token struct {
	resource string
	scopes   []string
	expires  time.Time
	family   *family
}

type family struct {
	clientID, resource string
	scopes             []string
	revoked            bool
}

// Start starts a server on a loopback port; it stops when the test ends.
func Start(tb testing.TB, o Options) *Server {
	tb.Helper()
	if o.AccessTTL == 0 {
		o.AccessTTL = time.Hour
	}
	s := &Server{opts: o, clients: map[string]client{}, codes: map[string]grant{}, access: map[string]token{},
		refresh: map[string]*family{}, spent: map[string]*family{}}
	for id, secret := range o.Clients {
		s.clients[id] = client{secret: secret}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", s.metadata)
	mux.HandleFunc("POST /register", s.register)
	mux.HandleFunc("GET /authorize", s.authorize)
	mux.HandleFunc("POST /token", s.token)
	s.ts = httptest.NewServer(mux)
	s.URL = s.ts.URL
	tb.Cleanup(s.ts.Close)
	return s
}

// Counts returns what the server has done so far.
func (s *Server) Counts() Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts
}

// SetClientSecret gives a pre-registered client a new secret (a rotation):
// the old one is refused from now on.
func (s *Server) SetClientSecret(id, secret string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.clients[id]
	c.secret = secret
	s.clients[id] = c
}

// RevokeAll revokes every token: the next refresh fails with invalid_grant.
func (s *Server) RevokeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.refresh {
		f.revoked = true
	}
	s.access = map[string]token{}
}

// RefreshTokenValid reports whether rt may still be used.
func (s *Server) RefreshTokenValid(rt string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.refresh[rt]
	return f != nil && !f.revoked
}

func (s *Server) metadata(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"issuer":                                s.URL,
		"authorization_endpoint":                s.URL + "/authorize",
		"token_endpoint":                        s.URL + "/token",
		"registration_endpoint":                 s.URL + "/register",
		"response_types_supported":              []string{"code"},
		"grant_types_supported":                 []string{"authorization_code", "refresh_token", "client_credentials"},
		"code_challenge_methods_supported":      []string{"S256"},
		"token_endpoint_auth_methods_supported": []string{"none", "client_secret_basic"},
		"scopes_supported":                      s.opts.ScopesSupported,
	})
}

func (s *Server) register(w http.ResponseWriter, r *http.Request) {
	var req struct {
		RedirectURIs []string `json:"redirect_uris"`
		AuthMethod   string   `json:"token_endpoint_auth_method"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.RedirectURIs) == 0 {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_client_metadata"})
		return
	}
	id := "client-" + random(8)
	c := client{redirectURI: req.RedirectURIs}
	method := "none"
	if req.AuthMethod == "client_secret_basic" {
		c.secret, method = "secret-"+random(16), "client_secret_basic"
	}
	s.mu.Lock()
	s.clients[id] = c
	s.counts.Registrations++
	s.mu.Unlock()
	out := map[string]any{"client_id": id, "redirect_uris": req.RedirectURIs, "token_endpoint_auth_method": method}
	if c.secret != "" {
		out["client_secret"] = c.secret
	}
	writeJSON(w, http.StatusCreated, out)
}

// loopbackMatch: RFC 8252 §7.3, any port of a registered loopback URI.
func loopbackMatch(registered []string, got string) bool {
	gu, err := url.Parse(got)
	if err != nil {
		return false
	}
	for _, r := range registered {
		ru, err := url.Parse(r)
		if err == nil && ru.Scheme == gu.Scheme && ru.Hostname() == gu.Hostname() && ru.Path == gu.Path {
			return true
		}
	}
	return false
}

func (s *Server) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	s.mu.Lock()
	c, ok := s.clients[q.Get("client_id")]
	s.mu.Unlock()
	redirect := q.Get("redirect_uri")
	if !ok || (len(c.redirectURI) > 0 && !loopbackMatch(c.redirectURI, redirect)) {
		http.Error(w, "unknown client or redirect_uri", http.StatusBadRequest)
		return
	}
	if q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("resource") == "" {
		http.Error(w, "PKCE S256 and a resource are required", http.StatusBadRequest)
		return
	}
	code := "code-" + random(16)
	s.mu.Lock()
	s.codes[code] = grant{clientID: q.Get("client_id"), redirectURI: redirect, challenge: q.Get("code_challenge"),
		resource: q.Get("resource"), scopes: strings.Fields(q.Get("scope"))}
	s.counts.Authorizations++
	s.mu.Unlock()
	u, _ := url.Parse(redirect)
	v := u.Query()
	v.Set("code", code)
	v.Set("state", q.Get("state"))
	v.Set("iss", s.URL)
	u.RawQuery = v.Encode()
	http.Redirect(w, r, u.String(), http.StatusFound)
}

func (s *Server) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		oauthError(w, "invalid_request", err.Error())
		return
	}
	id, secret, basic := r.BasicAuth()
	if basic {
		id, _ = url.QueryUnescape(id)
		secret, _ = url.QueryUnescape(secret)
	} else {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.clients[id]
	if !ok || c.secret != secret {
		w.WriteHeader(http.StatusUnauthorized)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": "invalid_client"})
		return
	}
	switch r.PostForm.Get("grant_type") {
	case "authorization_code":
		g, ok := s.codes[r.PostForm.Get("code")]
		delete(s.codes, r.PostForm.Get("code"))
		sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
		switch {
		case !ok || g.clientID != id || g.redirectURI != r.PostForm.Get("redirect_uri"):
			oauthError(w, "invalid_grant", "unknown code")
		case base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge:
			oauthError(w, "invalid_grant", "PKCE verifier does not match")
		case r.PostForm.Get("resource") != g.resource:
			oauthError(w, "invalid_target", "resource differs from the authorization request")
		default:
			s.counts.CodeExchanges++
			s.issue(w, &family{clientID: id, resource: g.resource, scopes: g.scopes}, true)
		}
	case "refresh_token":
		rt := r.PostForm.Get("refresh_token")
		if f := s.spent[rt]; f != nil {
			// A rotated-out token came back: someone else holds the
			// family, so it is revoked for everyone.
			f.revoked = true
			s.counts.ReuseDetected++
			oauthError(w, "invalid_grant", "refresh token reused")
			return
		}
		f := s.refresh[rt]
		switch {
		case f == nil || f.revoked || f.clientID != id:
			oauthError(w, "invalid_grant", "unknown or revoked refresh token")
		case r.PostForm.Get("resource") != f.resource:
			oauthError(w, "invalid_target", "resource differs from the grant's")
		default:
			delete(s.refresh, rt)
			s.spent[rt] = f
			s.counts.Refreshes++
			s.issue(w, f, true)
		}
	case "client_credentials":
		if c.secret == "" {
			oauthError(w, "unauthorized_client", "public clients cannot use client credentials")
			return
		}
		s.counts.ClientCredentials++
		s.issue(w, &family{clientID: id, resource: r.PostForm.Get("resource"), scopes: strings.Fields(r.PostForm.Get("scope"))}, false)
	default:
		oauthError(w, "unsupported_grant_type", "")
	}
}

// issue answers with a new access token (and refresh token). s.mu is held.
func (s *Server) issue(w http.ResponseWriter, f *family, withRefresh bool) {
	at := "at-" + random(24)
	s.access[at] = token{resource: f.resource, scopes: f.scopes, expires: time.Now().Add(s.opts.AccessTTL), family: f}
	out := map[string]any{"access_token": at, "token_type": "Bearer", "expires_in": int(s.opts.AccessTTL.Seconds()),
		"scope": strings.Join(f.scopes, " ")}
	if withRefresh {
		rt := "rt-" + random(24)
		s.refresh[rt] = f
		out["refresh_token"] = rt
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, out)
}

// Verify reports whether tok is a live access token for resource, and
// its scopes.
func (s *Server) Verify(tok, resource string) ([]string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.access[tok]
	if !ok || time.Now().After(t.expires) || t.resource != resource || (t.family != nil && t.family.revoked) {
		return nil, false
	}
	return t.scopes, true
}

// Protect guards the MCP endpoint h, served at resource (the endpoint's
// full URL), with this server: requests without a live token for it get a
// 401 whose challenge names the resource metadata (served by the returned
// handler at the path-inserted well-known URL) and, when scopes are
// required, a 403 insufficient_scope naming them.
func (s *Server) Protect(resource string, h http.Handler, scopes ...string) http.Handler {
	ru, err := url.Parse(resource)
	if err != nil {
		panic(err)
	}
	prm := "/.well-known/oauth-protected-resource" + ru.Path
	metaURL := ru.Scheme + "://" + ru.Host + prm
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+prm, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"resource": resource, "authorization_servers": []string{s.URL}, "scopes_supported": s.opts.ScopesSupported})
	})
	mux.Handle(ru.Path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		got, live := s.Verify(tok, resource)
		if !ok || !live {
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer resource_metadata=%q, error="invalid_token"`, metaURL))
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		for _, sc := range scopes {
			if !slices.Contains(got, sc) {
				w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer error="insufficient_scope", scope=%q, resource_metadata=%q`, strings.Join(scopes, " "), metaURL))
				http.Error(w, "insufficient scope", http.StatusForbidden)
				return
			}
		}
		h.ServeHTTP(w, r)
	}))
	return mux
}

func oauthError(w http.ResponseWriter, code, desc string) {
	writeJSON(w, http.StatusBadRequest, map[string]string{"error": code, "error_description": desc})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func random(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
