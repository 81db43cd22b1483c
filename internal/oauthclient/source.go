package oauthclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"
)

// maxStepUps bounds the re-authorizations for one set of scopes: a server
// that keeps answering insufficient_scope must not loop the client.
const maxStepUps = 1

// leaseTime bounds a refresh another process waits for: past it, the
// lease is taken over (its holder died, say).
const leaseTime = 30 * time.Second

// leasePoll is how often a waiting process reads the store again.
const leasePoll = 200 * time.Millisecond

// expirySkew is how long before its expiry an access token is no longer
// used; shorter for short-lived tokens (a quarter of their life).
const expirySkew = 30 * time.Second

// Options configure a Source.
type Options struct {
	// Server is the server's name; URL its endpoint.
	Server string
	URL    string
	Config Config
	// Store keeps the credentials; nil keeps them in memory only (client
	// credentials can always be fetched again; an authorization-code login
	// then lasts as long as the process).
	Store Store
	// HTTPClient makes the requests to authorization servers and metadata
	// endpoints (default: 30 s timeout).
	HTTPClient *http.Client
	// Agent, when set, lets the Source run the authorization-code flow
	// itself when it has no usable credentials or must step up; without
	// it, those fail with LoginRequired or StepUpRequired.
	Agent UserAgent
	// LoginHint says how to log in, for error messages, given arguments
	// to add to the login command (` --scope "a b"`).
	LoginHint func(args string) string
	Logger    *slog.Logger
	// AddSecret is told every secret before it is sent or stored, so that
	// the caller's redactor masks it wherever it may be quoted back.
	AddSecret func(...string)
	// Now is the clock (default time.Now).
	Now func() time.Time
	// ClientSecrets, when set, gives the configured client secret and
	// private key as they are now (Config's are what they were at start),
	// so that a rotated secret is used without a restart; force asks past
	// any cache, after the authorization server refused the client. It
	// answers changed when force found values other than before.
	ClientSecrets func(ctx context.Context, force bool) (s ClientSecrets, changed bool, err error)
}

// ClientSecrets are a configured client's secret values.
type ClientSecrets struct {
	ClientSecret, PrivateKey string
}

// Source hands out one server's access tokens: cached until shortly before
// they expire, refreshed (and the rotated refresh token stored) when they
// do or when the server rejects one, re-read from the Store first in case
// another process already did.
type Source struct {
	o  Options
	hc *http.Client
	// id names this Source in refresh leases.
	id string
	// sem serialises token work (refresh, login, discovery) so that
	// concurrent requests that all find the token expired refresh it once;
	// waiting on it honours the caller's context.
	sem chan struct{}

	mu        sync.Mutex // guards the fields below; never held over I/O
	creds     *Credentials
	version   string
	loaded    bool
	disc      *Discovery
	requested []string // the scopes of the last authorization
	stepUps   map[string]int
}

// NewSource returns a Source for one server.
func NewSource(o Options) *Source {
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.AddSecret == nil {
		o.AddSecret = func(...string) {}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	o.AddSecret(o.Config.ClientSecret, o.Config.PrivateKey)
	return &Source{o: o, hc: o.HTTPClient, id: randomString(), sem: make(chan struct{}, 1), stepUps: map[string]int{}}
}

// hint is the login hint with args.
func (s *Source) hint(args string) string {
	if s.o.LoginHint == nil {
		return ""
	}
	return s.o.LoginHint(args)
}

// Type is the configured auth type.
func (s *Source) Type() string { return s.o.Config.Type }

func (s *Source) lock(ctx context.Context) error {
	select {
	case s.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Source) unlock() { <-s.sem }

// fresh reports whether c holds an access token usable now.
func (s *Source) fresh(c *Credentials) bool {
	if c == nil || c.AccessToken == "" {
		return false
	}
	if c.Expiry.IsZero() {
		return true
	}
	skew := expirySkew
	if !c.ObtainedAt.IsZero() {
		skew = min(skew, c.Expiry.Sub(c.ObtainedAt)/4)
	}
	return s.o.Now().Before(c.Expiry.Add(-skew))
}

// dormant reports a TypeAuto source that has nothing to send: its store
// was read and held nothing. Requests then go out without taking the
// token lock, as they did before OAuth, until a server asks for more.
func (s *Source) dormant() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.o.Config.Type == TypeAuto && s.loaded && s.creds == nil
}

// cached is the access token in memory, if usable.
func (s *Source) cached() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fresh(s.creds) {
		return s.creds.AccessToken
	}
	return ""
}

// Token returns an access token for the next request, or "" when the
// server has not asked for one yet (TypeAuto without stored credentials).
func (s *Source) Token(ctx context.Context) (string, error) {
	if tok := s.cached(); tok != "" {
		return tok, nil
	}
	if s.dormant() {
		return "", nil
	}
	if err := s.lock(ctx); err != nil {
		return "", err
	}
	defer s.unlock()
	if tok := s.cached(); tok != "" {
		return tok, nil
	}
	if err := s.load(ctx, false); err != nil {
		return "", err
	}
	if tok := s.cached(); tok != "" {
		return tok, nil
	}
	s.mu.Lock()
	c := s.creds
	s.mu.Unlock()
	switch {
	case c != nil && c.RefreshToken != "":
		if err := s.refresh(ctx); err == nil {
			return s.cached(), nil
		} else if !isGrantRejected(err) {
			return "", err
		}
		// The refresh token is dead: only a new authorization helps.
		return "", s.authorize(ctx, Challenge{}, nil, "the refresh token was rejected")
	case s.o.Config.Type == TypeClientCredentials:
		if err := s.clientCredentials(ctx, Challenge{}, nil); err != nil {
			return "", err
		}
		return s.cached(), nil
	case s.o.Config.Type == TypeOAuth:
		if err := s.authorize(ctx, Challenge{}, nil, "no stored credentials"); err != nil {
			return "", err
		}
		return s.cached(), nil
	}
	return "", nil
}

// Handle answers a 401 or 403 Bearer challenge to a request that carried
// sent ("" for none). It returns nil when the request is worth retrying
// with a new Token.
func (s *Source) Handle(ctx context.Context, status int, ch Challenge, sent string) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.unlock()
	s.mu.Lock()
	cur := s.creds
	s.mu.Unlock()
	if status == http.StatusForbidden {
		return s.stepUp(ctx, ch)
	}
	if s.fresh(cur) && cur.AccessToken != sent {
		// Another request already replaced the token this one was
		// refused with (or logged in while it went without one).
		return nil
	}
	if sent != "" {
		s.o.Logger.Info("mcp access token rejected; renewing")
		s.mu.Lock()
		if s.creds != nil && s.creds.AccessToken == sent {
			s.creds.AccessToken = ""
		}
		s.mu.Unlock()
		// Another container may have refreshed already.
		if err := s.load(ctx, true); err != nil {
			return err
		}
		s.mu.Lock()
		c := s.creds
		s.mu.Unlock()
		if s.fresh(c) && c.AccessToken != sent {
			return nil
		}
		if c != nil && c.AccessToken == sent {
			s.mu.Lock()
			s.creds.AccessToken = ""
			s.mu.Unlock()
		}
		if c != nil && c.RefreshToken != "" && !s.movedServer(ctx, ch, c) {
			err := s.refresh(ctx)
			if err == nil || !isGrantRejected(err) {
				return err
			}
		}
	}
	if s.o.Config.Type == TypeClientCredentials {
		return s.clientCredentials(ctx, ch, nil)
	}
	return s.authorize(ctx, ch, nil, "the server asked for authorization")
}

// movedServer reports whether the resource now names another
// authorization server than the one c came from (the challenge's metadata
// is read again): then c's refresh token is worthless there, and a new
// authorization, with a registration at the new server, is needed.
func (s *Source) movedServer(ctx context.Context, ch Challenge, c *Credentials) bool {
	if ch.ResourceMetadata == "" || c.Issuer == "" {
		return false
	}
	d, err := discover(ctx, s.hc, s.o.URL, ch)
	if err != nil {
		return false
	}
	s.mu.Lock()
	s.disc = d
	s.mu.Unlock()
	if d.Issuer == c.Issuer {
		return false
	}
	s.o.Logger.Warn("mcp server names another authorization server; authorizing again", "issuer", d.Issuer, "was", c.Issuer)
	return true
}

// stepUp answers insufficient_scope: a new authorization for the scopes
// asked so far and the challenge's (MCP 2025-11-25 scope challenge
// handling), at most maxStepUps times for one set of scopes.
func (s *Source) stepUp(ctx context.Context, ch Challenge) error {
	s.mu.Lock()
	want := union(s.requested, ch.Scope)
	if s.creds != nil {
		want = union(s.creds.Scopes, want)
	}
	key := strings.Join(slices.Sorted(slices.Values(want)), " ")
	s.stepUps[key]++
	n := s.stepUps[key]
	s.mu.Unlock()
	if n > maxStepUps {
		return &Error{Server: s.o.Server, Kind: StepUpRequired, Scopes: ch.Scope,
			Err: fmt.Errorf("the server refused %d authorizations for these scopes", maxStepUps)}
	}
	if s.o.Config.Type == TypeClientCredentials {
		return s.clientCredentials(ctx, ch, want)
	}
	if s.o.Agent == nil {
		return &Error{Server: s.o.Server, Kind: StepUpRequired, Scopes: ch.Scope,
			Hint: s.hint(` --scope "` + strings.Join(want, " ") + `"`)}
	}
	return s.authorize(ctx, ch, want, "")
}

// load reads the store once (or again when force), keeping credentials
// that belong to this server only.
func (s *Source) load(ctx context.Context, force bool) error {
	s.mu.Lock()
	done := s.loaded && !force
	s.mu.Unlock()
	if done {
		return nil
	}
	if s.o.Store == nil {
		s.mu.Lock()
		s.loaded = true
		s.mu.Unlock()
		return nil
	}
	c, v, err := s.o.Store.Load(ctx)
	if errors.Is(err, ErrNoCredentials) {
		s.mu.Lock()
		s.loaded = true
		s.mu.Unlock()
		return nil
	}
	if err != nil {
		return &Error{Server: s.o.Server, Kind: StoreFailed, Err: err}
	}
	s.o.AddSecret(c.secrets()...)
	if c.URL != "" && c.URL != s.o.URL {
		// Made for another server under this name: never send them here.
		s.o.Logger.Warn("stored MCP credentials are for another URL; ignored", "where", s.o.Store.Where())
		c = nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loaded = true
	if c == nil {
		return nil
	}
	// Keep a newer access token of our own over an older stored one.
	if s.creds == nil || s.version != v {
		s.creds, s.version = c, v
		if len(s.requested) == 0 {
			s.requested = c.Scopes
		}
	}
	return nil
}

// save stores c over the version read, and on a conflict takes what won.
func (s *Source) save(ctx context.Context, c *Credentials) error {
	s.mu.Lock()
	prev := s.version
	s.mu.Unlock()
	if s.o.Store == nil {
		s.mu.Lock()
		s.creds = c
		s.mu.Unlock()
		return nil
	}
	v, err := s.o.Store.Save(ctx, c, prev)
	if errors.Is(err, ErrConflict) {
		// Another process refreshed from the same version first; its
		// tokens are as good as ours, and its refresh token is the one
		// that stays valid. Keep our access token if theirs is stale.
		s.o.Logger.Info("mcp credentials changed meanwhile; using the stored ones")
		if err := s.load(ctx, true); err != nil {
			return err
		}
		s.mu.Lock()
		if !s.fresh(s.creds) && s.creds != nil {
			s.creds.AccessToken, s.creds.Expiry, s.creds.ObtainedAt, s.creds.TokenType = c.AccessToken, c.Expiry, c.ObtainedAt, c.TokenType
		}
		s.mu.Unlock()
		return nil
	}
	if err != nil {
		// The new tokens are still good for this process.
		s.mu.Lock()
		s.creds = c
		s.mu.Unlock()
		return &Error{Server: s.o.Server, Kind: StoreFailed, Err: err}
	}
	s.mu.Lock()
	s.creds, s.version = c, v
	s.mu.Unlock()
	return nil
}

// saveLogin stores the credentials of a new authorization over whatever
// is stored: unlike a refresh's, they win a conflict.
func (s *Source) saveLogin(ctx context.Context, c *Credentials) error {
	if s.o.Store == nil {
		return s.save(ctx, c)
	}
	for range 5 {
		s.mu.Lock()
		prev := s.version
		s.mu.Unlock()
		v, err := s.o.Store.Save(ctx, c, prev)
		if errors.Is(err, ErrConflict) {
			// Read the version now stored, and write over it.
			if _, v, err = s.o.Store.Load(ctx); err != nil && !errors.Is(err, ErrNoCredentials) {
				return &Error{Server: s.o.Server, Kind: StoreFailed, Err: err}
			}
			s.mu.Lock()
			s.version = v
			s.mu.Unlock()
			continue
		}
		if err != nil {
			s.mu.Lock()
			s.creds = c
			s.mu.Unlock()
			return &Error{Server: s.o.Server, Kind: StoreFailed, Err: err}
		}
		s.mu.Lock()
		s.creds, s.version, s.loaded = c, v, true
		s.mu.Unlock()
		return nil
	}
	return &Error{Server: s.o.Server, Kind: StoreFailed, Err: errors.New("the stored credentials kept changing")}
}

// withToken is c with tok's tokens.
func (s *Source) withToken(c Credentials, tok *oauth2.Token) *Credentials {
	s.o.AddSecret(tok.AccessToken, tok.RefreshToken)
	now := s.o.Now()
	c.AccessToken, c.TokenType, c.Expiry, c.ObtainedAt = tok.AccessToken, tok.TokenType, time.Time{}, now
	if !tok.Expiry.IsZero() {
		// x/oauth2 dates the expiry by the wall clock; keep it on ours.
		c.Expiry = now.Add(time.Until(tok.Expiry))
	}
	if tok.RefreshToken != "" {
		c.RefreshToken = tok.RefreshToken
	}
	if sc, ok := tok.Extra("scope").(string); ok && sc != "" {
		c.Scopes = strings.Fields(sc)
	}
	return &c
}

// refresh renews the access token with the stored refresh token, once
// among all the processes sharing the store: it takes a lease on the
// refresh by a version-checked write; a process that loses that race, or
// finds a live lease, waits for the holder's tokens instead of trading the
// same refresh token again. The new tokens replace the lease, version
// checked too, so a rotated refresh token is never overwritten.
func (s *Source) refresh(ctx context.Context) error {
	if s.o.Store == nil {
		s.mu.Lock()
		c := s.creds
		s.mu.Unlock()
		tok, err := s.trade(ctx, c)
		if err != nil {
			return err
		}
		return s.save(ctx, s.withToken(*c, tok))
	}
	for {
		if err := s.load(ctx, true); err != nil {
			return err
		}
		s.mu.Lock()
		c, version := s.creds, s.version
		s.mu.Unlock()
		switch {
		case c == nil || c.RefreshToken == "":
			return &Error{Server: s.o.Server, Kind: LoginRequired, Hint: s.hint(""), Err: errors.New("no stored refresh token")}
		case s.fresh(c):
			// Another process refreshed meanwhile.
			return nil
		case c.Lease != nil && c.Lease.By != s.id && s.o.Now().Before(c.Lease.Until):
			if err := sleep(ctx, leasePoll); err != nil {
				return err
			}
			continue
		}
		// The lease carries no access token: it is being replaced, and a
		// waiting process must not take it for a fresh one.
		leased := *c
		leased.AccessToken, leased.Expiry, leased.ObtainedAt = "", time.Time{}, time.Time{}
		leased.Lease = &Lease{By: s.id, Until: s.o.Now().Add(leaseTime)}
		v, err := s.o.Store.Save(ctx, &leased, version)
		if errors.Is(err, ErrConflict) {
			continue
		}
		if err != nil {
			return &Error{Server: s.o.Server, Kind: StoreFailed, Err: err}
		}
		s.mu.Lock()
		s.creds, s.version = &leased, v
		s.mu.Unlock()
		tok, err := s.trade(ctx, c)
		if err != nil {
			// Let the others try rather than wait out the lease.
			released := *c
			released.Lease = nil
			if _, serr := s.o.Store.Save(ctx, &released, v); serr == nil {
				_ = s.load(ctx, true)
			}
			return err
		}
		nc := s.withToken(*c, tok)
		nc.Lease = nil
		return s.save(ctx, nc)
	}
}

// clientSecrets are the configured client's secret values, read again
// when Options.ClientSecrets can (force: past its cache).
func (s *Source) clientSecrets(ctx context.Context, force bool) (ClientSecrets, bool, error) {
	if s.o.ClientSecrets == nil {
		return ClientSecrets{ClientSecret: s.o.Config.ClientSecret, PrivateKey: s.o.Config.PrivateKey}, false, nil
	}
	cs, changed, err := s.o.ClientSecrets(ctx, force)
	if err != nil {
		return ClientSecrets{}, false, &Error{Server: s.o.Server, Kind: Refused, Err: fmt.Errorf("client secret: %w", err)}
	}
	s.o.AddSecret(cs.ClientSecret, cs.PrivateKey)
	return cs, changed, nil
}

// withRotation runs a token request made with the configured client's
// secrets; when the server refuses the client and reading the secrets
// again finds them rotated, it runs it once more with the new ones.
func (s *Source) withRotation(ctx context.Context, request func(ClientSecrets) error) error {
	cs, _, err := s.clientSecrets(ctx, false)
	if err != nil {
		return err
	}
	err = request(cs)
	var ae *Error
	if err == nil || s.o.ClientSecrets == nil || !errors.As(err, &ae) || ae.Kind != Refused {
		return err
	}
	cs, changed, rerr := s.clientSecrets(ctx, true)
	if rerr != nil || !changed {
		return err
	}
	s.o.Logger.Info("mcp client secret rotated; token request sent again")
	return request(cs)
}

// trade sends c's refresh token to the token endpoint, with the
// configured client secret as it is now when c is the configured client.
func (s *Source) trade(ctx context.Context, c *Credentials) (tok *oauth2.Token, err error) {
	if cfg := s.o.Config; cfg.ClientID == "" || c.ClientID != cfg.ClientID {
		return s.tradeWith(ctx, c)
	}
	err = s.withRotation(ctx, func(cs ClientSecrets) error {
		cc := *c
		cc.ClientSecret = cs.ClientSecret
		tok, err = s.tradeWith(ctx, &cc)
		return err
	})
	return tok, err
}

// tradeWith sends c's refresh token to the token endpoint as c's client.
func (s *Source) tradeWith(ctx context.Context, c *Credentials) (*oauth2.Token, error) {
	if c.TokenEndpoint == "" {
		return nil, &Error{Server: s.o.Server, Kind: LoginRequired, Hint: s.hint(""), Err: errors.New("the stored credentials name no token endpoint")}
	}
	if err := secureURL(c.TokenEndpoint); err != nil {
		return nil, &Error{Server: s.o.Server, Kind: LoginRequired, Hint: s.hint(""), Err: err}
	}
	cfg := s.oauthConfig(c, "", nil)
	// x/oauth2's refresh sends grant_type and refresh_token only; RFC 8707
	// wants the resource on every token request.
	hc := s.hc
	if c.Resource != "" {
		hc = withFormParams(s.hc, c.TokenEndpoint, map[string]string{"resource": c.Resource})
	}
	tok, err := cfg.TokenSource(context.WithValue(ctx, oauth2.HTTPClient, hc), &oauth2.Token{RefreshToken: c.RefreshToken, Expiry: time.Unix(1, 0)}).Token()
	if err != nil {
		s.o.Logger.Warn("mcp token refresh failed", "err", err)
		return nil, tokenError(s.o.Server, s.hint(""), err)
	}
	s.o.Logger.Info("mcp access token refreshed", "rotated", tok.RefreshToken != "" && tok.RefreshToken != c.RefreshToken)
	return tok, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// oauthConfig is x/oauth2's view of the client.
func (s *Source) oauthConfig(c *Credentials, authURL string, scopes []string) *oauth2.Config {
	return &oauth2.Config{
		ClientID:     c.ClientID,
		ClientSecret: c.ClientSecret,
		Endpoint:     oauth2.Endpoint{AuthURL: authURL, TokenURL: c.TokenEndpoint, AuthStyle: authStyle(c.AuthMethod)},
		Scopes:       scopes,
	}
}

func authStyle(method string) oauth2.AuthStyle {
	if method == AuthSecretBasic {
		return oauth2.AuthStyleInHeader
	}
	return oauth2.AuthStyleInParams
}

// isGrantRejected reports a refresh token the server no longer honours.
func isGrantRejected(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Kind == LoginRequired
}

// tokenError classifies a failed token request: invalid_grant means the
// grant is dead (log in again), invalid_client that the client is
// refused; anything else (the network, a 5xx) may pass.
func tokenError(server, hint string, err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		switch re.ErrorCode {
		case "invalid_grant":
			return &Error{Server: server, Kind: LoginRequired, Hint: hint, Err: errors.New("the authorization server rejected the stored grant (invalid_grant)")}
		case "invalid_client", "unauthorized_client":
			return &Error{Server: server, Kind: Refused, Err: fmt.Errorf("%s: %s", re.ErrorCode, re.ErrorDescription)}
		}
		if re.Response != nil && re.Response.StatusCode >= 400 && re.Response.StatusCode < 500 {
			return &Error{Server: server, Kind: Refused, Err: fmt.Errorf("token request: HTTP %d %s", re.Response.StatusCode, re.ErrorCode)}
		}
	}
	return fmt.Errorf("token request: %w", err)
}

// Status describes the stored credentials without any secret.
type Status struct {
	Server string `json:"server"`
	Type   string `json:"type"`
	// State is "logged in", "not logged in", "expired" (an access token
	// past its expiry and no refresh token), "client credentials" or
	// "none".
	State         string     `json:"state"`
	Where         string     `json:"where,omitempty"`
	Issuer        string     `json:"issuer,omitempty"`
	ClientID      string     `json:"client_id,omitempty"`
	Scopes        []string   `json:"scopes,omitempty"`
	RefreshToken  bool       `json:"refresh_token"`
	AccessExpires *time.Time `json:"access_token_expires,omitempty"`
	Error         string     `json:"error,omitempty"`
}

// Status reads the store and reports what it holds.
func (s *Source) Status(ctx context.Context) Status {
	st := Status{Server: s.o.Server, Type: TypeName(s.o.Config.Type)}
	if s.o.Store != nil {
		st.Where = s.o.Store.Where()
	}
	if s.o.Config.Type == TypeNone {
		st.State = "none"
		return st
	}
	if err := s.load(ctx, true); err != nil {
		st.State, st.Error = "unreadable", err.Error()
		return st
	}
	s.mu.Lock()
	c := s.creds
	s.mu.Unlock()
	switch {
	case c == nil && s.o.Config.Type == TypeClientCredentials:
		st.State = "client credentials"
		return st
	case c == nil:
		st.State = "not logged in"
		return st
	}
	st.Issuer, st.ClientID, st.Scopes, st.RefreshToken = c.Issuer, c.ClientID, c.Scopes, c.RefreshToken != ""
	if !c.Expiry.IsZero() {
		exp := c.Expiry
		st.AccessExpires = &exp
	}
	switch {
	case s.o.Config.Type == TypeClientCredentials:
		st.State = "client credentials"
	case c.RefreshToken != "" || s.fresh(c):
		st.State = "logged in"
	default:
		st.State = "expired"
	}
	return st
}
