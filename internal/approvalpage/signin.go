package approvalpage

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
)

// OIDC configures sign-in through the deployment's OpenID Connect
// provider (a Cognito user pool, or any issuer): the authorization code
// flow with PKCE, state and nonce, the ID token verified against the
// issuer's keys (its JWKS, found through discovery), its audience and its
// expiry. The person's principal is jwt:<iss>#<sub>, as the authorizer
// names a caller with a token of the same issuer, so the policy compares
// them: a caller that signs in as itself is still the caller.
type OIDC struct {
	// Issuer is the provider's issuer URL (its discovery document is at
	// Issuer/.well-known/openid-configuration).
	Issuer string
	// ClientID is the page's client at the provider; ClientSecret its
	// secret, empty for a public client (PKCE alone).
	ClientID, ClientSecret string
	// RedirectURL is where the provider sends the person back; empty: the
	// page's base URL + /approvals/signin/callback.
	RedirectURL string
	// Scopes are asked for besides openid.
	Scopes []string
	// HTTPClient reaches the provider (nil: http.DefaultClient).
	HTTPClient *http.Client
}

// JWTPrincipal is the principal of a token's issuer and subject, as the
// authorizer and API Gateway's context name a caller.
func JWTPrincipal(iss, sub string) string { return "jwt:" + iss + "#" + sub }

// signin is a configured provider, discovered on first use (a Lambda
// container that never serves a sign-in never fetches the document) and
// again after a failure.
type signin struct {
	cfg OIDC

	mu       sync.Mutex
	oauth    *oauth2.Config
	verifier *oidc.IDTokenVerifier
}

// discoveryTimeout bounds fetching the provider's discovery document.
const discoveryTimeout = 10 * time.Second

func (s *signin) ctx(ctx context.Context) context.Context {
	if s.cfg.HTTPClient != nil {
		return oidc.ClientContext(ctx, s.cfg.HTTPClient)
	}
	return ctx
}

// provider returns the OAuth configuration and the token verifier,
// discovering the provider the first time.
func (s *signin) provider(ctx context.Context, redirect string) (*oauth2.Config, *oidc.IDTokenVerifier, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.oauth != nil {
		return s.oauth, s.verifier, nil
	}
	dctx, cancel := context.WithTimeout(ctx, discoveryTimeout)
	defer cancel()
	p, err := oidc.NewProvider(s.ctx(dctx), s.cfg.Issuer)
	if err != nil {
		return nil, nil, fmt.Errorf("discovering the sign-in provider %s: %w", s.cfg.Issuer, err)
	}
	if s.cfg.RedirectURL != "" {
		redirect = s.cfg.RedirectURL
	}
	s.oauth = &oauth2.Config{ClientID: s.cfg.ClientID, ClientSecret: s.cfg.ClientSecret, Endpoint: p.Endpoint(),
		RedirectURL: redirect, Scopes: append([]string{oidc.ScopeOpenID}, s.cfg.Scopes...)}
	// The verifier keeps the issuer's keys, fetching them again when a
	// token names a key it does not know (a rotation). It checks the
	// issuer, the audience (our client id) and the expiry.
	s.verifier = p.VerifierContext(context.WithoutCancel(s.ctx(ctx)), &oidc.Config{ClientID: s.cfg.ClientID})
	return s.oauth, s.verifier, nil
}

// start sends the person to the provider: a fresh state, nonce and PKCE
// verifier, kept in a signed cookie until the callback.
func (p *Page) signinStart(w http.ResponseWriter, r *http.Request, next string) {
	oc, _, err := p.signin.provider(r.Context(), p.baseURL(r)+"/approvals/signin/callback")
	if err != nil {
		p.log.WarnContext(r.Context(), "sign-in provider unavailable", "err", err)
		p.fail(w, r, http.StatusServiceUnavailable, "The sign-in provider cannot be reached now. Try again in a moment.")
		return
	}
	f := flow{State: randomToken(), Nonce: randomToken(), Verifier: oauth2.GenerateVerifier(), Next: next, Expires: p.now().Add(flowTTL).Unix()}
	v, err := sign(p.keys.flow, f)
	if err != nil {
		p.fail(w, r, http.StatusInternalServerError, "The sign-in could not be started.")
		return
	}
	p.cookies.set(w, p.cookies.flowName(), v, flowTTL, false)
	http.Redirect(w, r, oc.AuthCodeURL(f.State, oidc.Nonce(f.Nonce), oauth2.S256ChallengeOption(f.Verifier)), http.StatusSeeOther)
}

// signinCallback ends a sign-in: the state must be the one this browser
// was sent with, the code is exchanged with its PKCE verifier, and the ID
// token must verify and carry the nonce sent.
func (p *Page) signinCallback(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ck, err := r.Cookie(p.cookies.flowName())
	var f flow
	if err != nil || open(p.keys.flow, ck.Value, &f) != nil || p.now().Unix() >= f.Expires {
		p.fail(w, r, http.StatusBadRequest, "This sign-in was not started here, or took too long. Sign in again.")
		return
	}
	// Spent whatever happens next: a callback is answered once.
	p.cookies.clear(w, p.cookies.flowName(), false)
	if e := q.Get("error"); e != "" {
		p.fail(w, r, http.StatusUnauthorized, "The sign-in provider refused the sign-in: "+e+" "+q.Get("error_description"))
		return
	}
	if subtle.ConstantTimeCompare([]byte(q.Get("state")), []byte(f.State)) != 1 || q.Get("code") == "" {
		p.fail(w, r, http.StatusBadRequest, "This sign-in answer does not belong to the sign-in this browser started. Sign in again.")
		return
	}
	principal, err := p.exchange(r.Context(), r, q.Get("code"), f)
	if err != nil {
		p.log.InfoContext(r.Context(), "sign-in refused", "err", err)
		p.fail(w, r, http.StatusUnauthorized, "The sign-in could not be verified. Sign in again.")
		return
	}
	s, err := p.startSession(w, r, principal, "oidc")
	if err != nil {
		p.log.WarnContext(r.Context(), "page session not started", "err", err)
		p.fail(w, r, http.StatusServiceUnavailable, "The session could not be started now. Sign in again in a moment.")
		return
	}
	p.log.InfoContext(r.Context(), "signed in on the approval page", "principal", principal, "via", "oidc")
	p.landing(w, r, s, f.Next)
}

// exchange trades the code for tokens and returns the verified person.
func (p *Page) exchange(ctx context.Context, r *http.Request, code string, f flow) (string, error) {
	oc, verifier, err := p.signin.provider(ctx, p.baseURL(r)+"/approvals/signin/callback")
	if err != nil {
		return "", err
	}
	tok, err := oc.Exchange(p.signin.ctx(ctx), code, oauth2.VerifierOption(f.Verifier))
	if err != nil {
		return "", fmt.Errorf("exchanging the code: %w", err)
	}
	raw, ok := tok.Extra("id_token").(string)
	if !ok || raw == "" {
		return "", errors.New("the provider answered no ID token")
	}
	id, err := verifier.Verify(p.signin.ctx(ctx), raw)
	if err != nil {
		return "", fmt.Errorf("verifying the ID token: %w", err)
	}
	if subtle.ConstantTimeCompare([]byte(id.Nonce), []byte(f.Nonce)) != 1 {
		return "", errors.New("the ID token's nonce is not the one sent")
	}
	if id.Subject == "" {
		return "", errors.New("the ID token names no subject")
	}
	return JWTPrincipal(id.Issuer, id.Subject), nil
}
