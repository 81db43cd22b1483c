// Package oidcprovider is a small OpenID Connect provider for tests, on
// loopback: a discovery document, a JWKS, an authorization endpoint that
// shows a sign-in form (user name and password) and redirects back with a
// code, and a token endpoint that exchanges the code — once, within a
// minute, for the client and redirect URI it was issued to, with the PKCE
// S256 verifier it was challenged with — for an ID token signed RS256
// (iss, sub, aud, exp, iat, nonce) and an access token. What a browser or
// an HTTP client signs in through in the approval page's tests.
package oidcprovider

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"html/template"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Client is a client registered with the provider.
type Client struct {
	// Secret is the client's secret; empty for a public client, which
	// must use PKCE.
	Secret       string
	RedirectURIs []string
}

// Options configure a Provider.
type Options struct {
	// Clients by client id.
	Clients map[string]Client
	// Users are who may sign in: user name → password. The user name is
	// the ID token's subject.
	Users map[string]string
	// TokenTTL is the ID token's lifetime (default 10 minutes).
	TokenTTL time.Duration
}

// Counts says what the provider has done.
type Counts struct {
	SignIns, Exchanges, RefusedExchanges int
}

// Provider is a running OpenID Connect provider.
type Provider struct {
	URL  string // the issuer
	opts Options
	key  *rsa.PrivateKey
	ts   *httptest.Server

	mu     sync.Mutex
	codes  map[string]grant
	counts Counts
}

type grant struct {
	client, redirect, challenge, nonce, subject string
	expires                                     time.Time
}

// keyID names the signing key in the JWKS and in tokens.
const keyID = "test-key-1"

// Start starts a provider on a loopback port; it stops when the test ends.
func Start(tb testing.TB, o Options) *Provider {
	tb.Helper()
	if o.TokenTTL == 0 {
		o.TokenTTL = 10 * time.Minute
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		tb.Fatal(err)
	}
	p := &Provider{opts: o, key: key, codes: map[string]grant{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", p.discovery)
	mux.HandleFunc("GET /jwks", p.jwks)
	mux.HandleFunc("GET /authorize", p.authorizeForm)
	mux.HandleFunc("POST /authorize", p.authorize)
	mux.HandleFunc("POST /token", p.token)
	p.ts = httptest.NewServer(mux)
	p.URL = p.ts.URL
	tb.Cleanup(p.ts.Close)
	return p
}

// Counts returns what the provider has done so far.
func (p *Provider) Counts() Counts {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts
}

// IDToken signs an ID token for sub and audience aud directly, as the
// provider would (for a caller's bearer token in tests).
func (p *Provider) IDToken(sub, aud string) string {
	s, err := p.sign(jwt.MapClaims{"iss": p.URL, "sub": sub, "aud": aud, "exp": time.Now().Add(p.opts.TokenTTL).Unix(), "iat": time.Now().Unix()})
	if err != nil {
		panic(err)
	}
	return s
}

func (p *Provider) sign(claims jwt.MapClaims) (string, error) {
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
	tok.Header["kid"] = keyID
	return tok.SignedString(p.key)
}

func (p *Provider) discovery(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"issuer":                                p.URL,
		"authorization_endpoint":                p.URL + "/authorize",
		"token_endpoint":                        p.URL + "/token",
		"jwks_uri":                              p.URL + "/jwks",
		"response_types_supported":              []string{"code"},
		"subject_types_supported":               []string{"public"},
		"id_token_signing_alg_values_supported": []string{"RS256"},
		"scopes_supported":                      []string{"openid"},
		"token_endpoint_auth_methods_supported": []string{"client_secret_basic", "client_secret_post", "none"},
		"code_challenge_methods_supported":      []string{"S256"},
	})
}

func (p *Provider) jwks(w http.ResponseWriter, _ *http.Request) {
	b64 := base64.RawURLEncoding.EncodeToString
	writeJSON(w, http.StatusOK, map[string]any{"keys": []any{map[string]string{"kty": "RSA", "kid": keyID, "alg": "RS256", "use": "sig",
		"n": b64(p.key.N.Bytes()), "e": b64(big.NewInt(int64(p.key.E)).Bytes())}}})
}

var form = template.Must(template.New("").Parse(`<!doctype html><html><head><title>Sign in · test provider</title></head><body>
<h1>Sign in to the test provider</h1>{{with .Error}}<p id="error">{{.}}</p>{{end}}
<form method="post" action="/authorize">
{{range $k, $v := .Params}}<input type="hidden" name="{{$k}}" value="{{$v}}">{{end}}
<label>User <input id="user" name="user"></label> <label>Password <input id="password" name="password" type="password"></label>
<button id="login">Sign in</button></form></body></html>`))

// checkRequest validates an authorization request's parameters.
func (p *Provider) checkRequest(q url.Values) string {
	c, ok := p.opts.Clients[q.Get("client_id")]
	switch {
	case !ok:
		return "unknown client"
	case !slices.Contains(c.RedirectURIs, q.Get("redirect_uri")):
		return "redirect_uri is not registered for this client"
	case q.Get("response_type") != "code":
		return "response_type must be code"
	case !slices.Contains(strings.Fields(q.Get("scope")), "openid"):
		return "scope must include openid"
	case q.Get("code_challenge") == "" || q.Get("code_challenge_method") != "S256":
		return "PKCE S256 is required"
	}
	return ""
}

// params are the authorization request's parameters the form carries on.
var params = []string{"client_id", "redirect_uri", "response_type", "scope", "state", "nonce", "code_challenge", "code_challenge_method"}

func (p *Provider) authorizeForm(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if msg := p.checkRequest(q); msg != "" {
		http.Error(w, msg, http.StatusBadRequest)
		return
	}
	keep := map[string]string{}
	for _, k := range params {
		keep[k] = q.Get(k)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = form.Execute(w, map[string]any{"Params": keep})
}

func (p *Provider) authorize(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	q := r.PostForm
	if msg := p.checkRequest(q); msg != "" {
		http.Error(w, msg, http.StatusBadRequest)
		return
	}
	user := q.Get("user")
	want, ok := p.opts.Users[user]
	if !ok || subtle.ConstantTimeCompare([]byte(want), []byte(q.Get("password"))) != 1 {
		keep := map[string]string{}
		for _, k := range params {
			keep[k] = q.Get(k)
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusUnauthorized)
		_ = form.Execute(w, map[string]any{"Params": keep, "Error": "wrong user name or password"})
		return
	}
	code := rand.Text()
	p.mu.Lock()
	p.codes[code] = grant{client: q.Get("client_id"), redirect: q.Get("redirect_uri"), challenge: q.Get("code_challenge"),
		nonce: q.Get("nonce"), subject: user, expires: time.Now().Add(time.Minute)}
	p.counts.SignIns++
	p.mu.Unlock()
	back, _ := url.Parse(q.Get("redirect_uri"))
	v := back.Query()
	v.Set("code", code)
	v.Set("state", q.Get("state"))
	back.RawQuery = v.Encode()
	http.Redirect(w, r, back.String(), http.StatusSeeOther)
}

func (p *Provider) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		tokenError(w, "invalid_request")
		return
	}
	f := r.PostForm
	id, secret, basic := r.BasicAuth()
	if !basic {
		id, secret = f.Get("client_id"), f.Get("client_secret")
	}
	p.mu.Lock()
	g, ok := p.codes[f.Get("code")]
	delete(p.codes, f.Get("code")) // a code is used once, whatever follows
	p.mu.Unlock()
	c, known := p.opts.Clients[id]
	sum := sha256.Sum256([]byte(f.Get("code_verifier")))
	switch {
	case f.Get("grant_type") != "authorization_code" || !ok || !known || g.client != id || time.Now().After(g.expires):
		p.refused(w, "invalid_grant")
	case c.Secret != "" && subtle.ConstantTimeCompare([]byte(c.Secret), []byte(secret)) != 1:
		p.refused(w, "invalid_client")
	case f.Get("redirect_uri") != g.redirect:
		p.refused(w, "invalid_grant")
	case base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge:
		p.refused(w, "invalid_grant")
	default:
		now := time.Now()
		claims := jwt.MapClaims{"iss": p.URL, "sub": g.subject, "aud": id, "exp": now.Add(p.opts.TokenTTL).Unix(), "iat": now.Unix()}
		if g.nonce != "" {
			claims["nonce"] = g.nonce
		}
		idToken, err := p.sign(claims)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		p.mu.Lock()
		p.counts.Exchanges++
		p.mu.Unlock()
		w.Header().Set("Cache-Control", "no-store")
		writeJSON(w, http.StatusOK, map[string]any{"access_token": rand.Text(), "token_type": "Bearer", "expires_in": int(p.opts.TokenTTL.Seconds()), "id_token": idToken})
	}
}

func (p *Provider) refused(w http.ResponseWriter, code string) {
	p.mu.Lock()
	p.counts.RefusedExchanges++
	p.mu.Unlock()
	tokenError(w, code)
}

func tokenError(w http.ResponseWriter, code string) {
	writeJSON(w, http.StatusBadRequest, map[string]string{"error": code})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
