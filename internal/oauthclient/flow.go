package oauthclient

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

// clientName is how the client introduces itself in dynamic registration.
const clientName = "pml-sandbox"

// A UserAgent takes an authorization request to the authorization server
// on the user's behalf: a browser a person uses, or (Headless) an HTTP
// client, for servers that answer at once. Open returns once the request
// is on its way; the answer arrives at the loopback redirect.
type UserAgent interface {
	Open(ctx context.Context, authURL string) error
}

// discovery returns what is known of the server's authorization, finding
// it out (again, when the challenge names metadata) if need be.
func (s *Source) discovery(ctx context.Context, ch Challenge) (*Discovery, error) {
	s.mu.Lock()
	d := s.disc
	s.mu.Unlock()
	if d != nil && ch.ResourceMetadata == "" {
		return d, nil
	}
	d, err := discover(ctx, s.hc, s.o.URL, ch)
	if err != nil {
		return nil, &Error{Server: s.o.Server, Kind: LoginRequired, Hint: s.hint(""), Err: fmt.Errorf("discovering the authorization server: %w", err)}
	}
	s.mu.Lock()
	s.disc = d
	s.mu.Unlock()
	return d, nil
}

// selectScopes is MCP 2025-11-25's scope selection: the challenge's scope,
// else the resource's scopes_supported, else none; plus extra (the scopes
// asked for before, on a step-up, or on the command line) and the
// configured ones.
func (s *Source) selectScopes(ch Challenge, d *Discovery, extra []string) []string {
	base := ch.Scope
	if len(base) == 0 {
		base = d.ResourceScopes
	}
	return union(union(base, extra), s.o.Config.Scopes)
}

// authorize runs the authorization-code flow through the UserAgent, or
// says a login is needed when there is none.
func (s *Source) authorize(ctx context.Context, ch Challenge, want []string, why string) error {
	if s.o.Config.Type == TypeNone {
		return &Error{Server: s.o.Server, Kind: Refused, Err: errors.New("the server asks for OAuth, and its auth is none")}
	}
	if s.o.Agent == nil {
		return &Error{Server: s.o.Server, Kind: LoginRequired, Hint: s.hint(""), Err: errors.New(why)}
	}
	_, err := s.Login(ctx, ch, want)
	return err
}

// Login runs the authorization-code grant: discovery, client
// registration, a PKCE S256 authorization request with the resource
// indicator, opened by the UserAgent, the redirect taken on a loopback
// listener (state and, where the server sends it, iss checked), and the
// code exchanged for tokens, which are stored. extra scopes are requested
// besides the selected ones. It returns the stored credentials.
func (s *Source) Login(ctx context.Context, ch Challenge, extra []string) (*Credentials, error) {
	if s.o.Agent == nil {
		return nil, &Error{Server: s.o.Server, Kind: LoginRequired, Hint: s.hint(""), Err: errors.New("no way to open the authorization page")}
	}
	d, err := s.discovery(ctx, ch)
	if err != nil {
		return nil, err
	}
	m := d.Server
	if m.AuthorizationEndpoint == "" {
		return nil, &Error{Server: s.o.Server, Kind: Refused, Err: errors.New("the authorization server has no authorization endpoint")}
	}
	// MCP 2025-11-25: a client must not proceed without PKCE S256.
	if !slices.Contains(m.CodeChallengeMethodsSupported, "S256") {
		return nil, &Error{Server: s.o.Server, Kind: Refused, Err: errors.New("the authorization server does not advertise PKCE S256 (code_challenge_methods_supported)")}
	}
	if err := s.load(ctx, false); err != nil {
		return nil, err
	}
	state := randomString()
	cb, err := listenCallback(state)
	if err != nil {
		return nil, err
	}
	defer cb.close()
	c, err := s.client(ctx, d, cb.redirectURI)
	if err != nil {
		return nil, err
	}
	scopes := s.selectScopes(ch, d, extra)
	s.mu.Lock()
	s.requested = scopes
	s.mu.Unlock()

	verifier := oauth2.GenerateVerifier()
	s.o.AddSecret(verifier, state)
	cfg := s.oauthConfig(c, m.AuthorizationEndpoint, scopes)
	cfg.RedirectURL = cb.redirectURI
	authURL := cfg.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("resource", d.Resource))
	s.o.Logger.Info("mcp authorization started", "issuer", d.Issuer, "scopes", strings.Join(scopes, " "))
	if err := s.o.Agent.Open(ctx, authURL); err != nil {
		return nil, &Error{Server: s.o.Server, Kind: LoginRequired, Hint: s.hint(""), Err: err}
	}
	q, err := cb.wait(ctx)
	if err != nil {
		return nil, &Error{Server: s.o.Server, Kind: LoginRequired, Hint: s.hint(""), Err: err}
	}
	if e := q.Get("error"); e != "" {
		return nil, &Error{Server: s.o.Server, Kind: Refused, Err: fmt.Errorf("authorization denied: %s %s", e, q.Get("error_description"))}
	}
	// RFC 9207: a server that names itself in the response must name
	// itself, or the response may come from another (mix-up attack).
	if iss := q.Get("iss"); iss != "" || m.IssParameterSupported {
		if iss != d.Issuer {
			return nil, &Error{Server: s.o.Server, Kind: Refused, Err: fmt.Errorf("the authorization response names issuer %q, not %q", iss, d.Issuer)}
		}
	}
	code := q.Get("code")
	if code == "" {
		return nil, &Error{Server: s.o.Server, Kind: Refused, Err: errors.New("the authorization response has no code")}
	}
	s.o.AddSecret(code)
	xctx := context.WithValue(ctx, oauth2.HTTPClient, s.hc)
	tok, err := cfg.Exchange(xctx, code, oauth2.VerifierOption(verifier), oauth2.SetAuthURLParam("resource", d.Resource))
	if err != nil {
		return nil, tokenError(s.o.Server, s.hint(""), err)
	}
	c.Scopes = scopes
	if err := s.saveLogin(ctx, s.withToken(*c, tok)); err != nil {
		return nil, err
	}
	s.o.Logger.Info("mcp authorization complete", "refresh_token", tok.RefreshToken != "")
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.creds, nil
}

// client decides who the client is at this authorization server: a
// pre-registered client, a client ID metadata document, the registration
// stored with earlier credentials, or a new dynamic registration.
func (s *Source) client(ctx context.Context, d *Discovery, redirectURI string) (*Credentials, error) {
	m := d.Server
	c := &Credentials{Server: s.o.Server, URL: s.o.URL, Resource: d.Resource, Issuer: d.Issuer, TokenEndpoint: m.TokenEndpoint}
	cfg := s.o.Config
	s.mu.Lock()
	old := s.creds
	s.mu.Unlock()
	switch {
	case cfg.ClientID != "":
		cs, _, err := s.clientSecrets(ctx, false)
		if err != nil {
			return nil, err
		}
		c.ClientID, c.ClientSecret = cfg.ClientID, cs.ClientSecret
	case cfg.ClientMetadataURL != "" && m.ClientIDMetadataDocumentSupported:
		c.ClientID = cfg.ClientMetadataURL
	case old != nil && old.Issuer == d.Issuer && old.ClientID != "" && old.ClientID != cfg.ClientMetadataURL:
		c.ClientID, c.ClientSecret, c.AuthMethod = old.ClientID, old.ClientSecret, old.AuthMethod
	case m.RegistrationEndpoint != "":
		if err := s.register(ctx, d, redirectURI, c); err != nil {
			return nil, err
		}
	default:
		return nil, &Error{Server: s.o.Server, Kind: Refused, Hint: "set auth.client_id (and client_secret) in the server's configuration",
			Err: errors.New("the authorization server offers neither dynamic registration nor client ID metadata documents")}
	}
	if c.AuthMethod == "" {
		c.AuthMethod = chooseAuthMethod(cfg.TokenEndpointAuthMethod, c.ClientSecret != "", m.TokenEndpointAuthMethodsSupported)
	}
	return c, nil
}

// chooseAuthMethod picks how the client authenticates at the token
// endpoint: as configured; none without a secret; else what the server
// lists, HTTP Basic first (RFC 8414's default when it lists nothing).
func chooseAuthMethod(configured string, hasSecret bool, supported []string) string {
	switch {
	case configured != "":
		return configured
	case !hasSecret:
		return AuthNone
	case len(supported) == 0 || slices.Contains(supported, AuthSecretBasic):
		return AuthSecretBasic
	case slices.Contains(supported, AuthSecretPost):
		return AuthSecretPost
	}
	return AuthSecretBasic
}

// register makes a dynamic client registration (RFC 7591) and fills c's
// client fields from the answer.
func (s *Source) register(ctx context.Context, d *Discovery, redirectURI string, c *Credentials) error {
	m := d.Server
	method := AuthNone
	if sup := m.TokenEndpointAuthMethodsSupported; len(sup) > 0 && !slices.Contains(sup, AuthNone) {
		method = chooseAuthMethod("", true, sup)
	}
	body, _ := json.Marshal(map[string]any{
		"client_name":                clientName,
		"redirect_uris":              []string{redirectURI},
		"grant_types":                []string{"authorization_code", "refresh_token"},
		"response_types":             []string{"code"},
		"token_endpoint_auth_method": method,
		"application_type":           "native",
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.RegistrationEndpoint, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := s.hc.Do(req)
	if err != nil {
		return &Error{Server: s.o.Server, Kind: Refused, Err: fmt.Errorf("client registration: %w", err)}
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, maxMetadataBytes))
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		var oe struct {
			Error       string `json:"error"`
			Description string `json:"error_description"`
		}
		_ = json.Unmarshal(data, &oe)
		return &Error{Server: s.o.Server, Kind: Refused, Err: fmt.Errorf("client registration: HTTP %d %s %s", resp.StatusCode, oe.Error, oe.Description)}
	}
	var reg struct {
		ClientID     string `json:"client_id"`
		ClientSecret string `json:"client_secret"`
		AuthMethod   string `json:"token_endpoint_auth_method"`
	}
	if err := json.Unmarshal(data, &reg); err != nil || reg.ClientID == "" {
		return &Error{Server: s.o.Server, Kind: Refused, Err: errors.New("client registration: the answer has no client_id")}
	}
	s.o.AddSecret(reg.ClientSecret)
	c.ClientID, c.ClientSecret = reg.ClientID, reg.ClientSecret
	// RFC 7591 §3.2.1: the server says which method it registered.
	switch reg.AuthMethod {
	case AuthNone, AuthSecretBasic, AuthSecretPost:
		c.AuthMethod = reg.AuthMethod
	}
	if c.ClientSecret == "" {
		c.AuthMethod = AuthNone
	}
	s.o.Logger.Info("mcp client registered", "issuer", d.Issuer, "client_id", reg.ClientID)
	return nil
}

// clientCredentials fetches a token with the client-credentials grant,
// authenticating with the client secret or a signed JWT assertion.
func (s *Source) clientCredentials(ctx context.Context, ch Challenge, want []string) error {
	d, err := s.discovery(ctx, ch)
	if err != nil {
		return err
	}
	if err := s.load(ctx, false); err != nil {
		return err
	}
	cfg := s.o.Config
	s.mu.Lock()
	stored := s.creds
	s.mu.Unlock()
	var (
		tok    *oauth2.Token
		method string
		id     string
		scopes []string
	)
	err = s.withRotation(ctx, func(cs ClientSecrets) error {
		var secret, key string
		id, secret, key = cfg.ClientID, cs.ClientSecret, cs.PrivateKey
		if stored != nil {
			// A secret may hold the client's credentials.
			id = cmp.Or(id, stored.ClientID)
			secret = cmp.Or(secret, stored.ClientSecret)
			key = cmp.Or(key, stored.PrivateKey)
		}
		if id == "" {
			return &Error{Server: s.o.Server, Kind: Refused, Hint: "set auth.client_id in the server's configuration", Err: errors.New("client credentials need a client_id")}
		}
		scopes = s.selectScopes(ch, d, want)
		method = cfg.TokenEndpointAuthMethod
		if method == "" {
			if key != "" {
				method = AuthPrivateKeyJWT
			} else {
				method = chooseAuthMethod("", secret != "", d.Server.TokenEndpointAuthMethodsSupported)
			}
		}
		params := url.Values{"resource": {d.Resource}}
		cc := clientcredentials.Config{ClientID: id, TokenURL: d.Server.TokenEndpoint, Scopes: scopes, EndpointParams: params, AuthStyle: authStyle(method)}
		switch method {
		case AuthPrivateKeyJWT:
			if key == "" {
				return &Error{Server: s.o.Server, Kind: Refused, Hint: "set auth.private_key", Err: errors.New("private_key_jwt needs a private key")}
			}
			assertion, err := signAssertion(key, cfg.SigningAlg, id, d.Issuer, s.o.Now())
			if err != nil {
				return &Error{Server: s.o.Server, Kind: Refused, Err: err}
			}
			s.o.AddSecret(assertion)
			params.Set("client_assertion_type", "urn:ietf:params:oauth:client-assertion-type:jwt-bearer")
			params.Set("client_assertion", assertion)
		default:
			cc.ClientSecret = secret
		}
		var err error
		if tok, err = cc.Token(context.WithValue(ctx, oauth2.HTTPClient, s.hc)); err != nil {
			return tokenError(s.o.Server, s.hint(""), err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.requested = scopes
	s.mu.Unlock()
	c := Credentials{Server: s.o.Server, URL: s.o.URL, Resource: d.Resource, Issuer: d.Issuer, TokenEndpoint: d.Server.TokenEndpoint,
		AuthMethod: method, ClientID: id, Scopes: scopes}
	nc := s.withToken(c, tok)
	// Client-credentials tokens are kept in memory only: any process can
	// fetch one, and the stored client credentials must not be rewritten.
	s.mu.Lock()
	s.creds = nc
	if stored != nil {
		s.creds.ClientSecret, s.creds.PrivateKey = stored.ClientSecret, stored.PrivateKey
	}
	s.mu.Unlock()
	s.o.Logger.Info("mcp client-credentials token obtained", "auth_method", method)
	return nil
}

func randomString() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// callback is the loopback redirect listener (RFC 8252 §7.3).
type callback struct {
	ln          net.Listener
	srv         *http.Server
	redirectURI string
	// state is the one answer the listener accepts.
	state string
	got   chan url.Values
}

func listenCallback(state string) (*callback, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("loopback redirect listener: %w", err)
	}
	cb := &callback{ln: ln, state: state, got: make(chan url.Values, 1),
		redirectURI: "http://127.0.0.1:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port) + "/callback"}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /callback", cb.handle)
	cb.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = cb.srv.Serve(ln) }()
	return cb, nil
}

func (cb *callback) handle(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if q.Get("state") != cb.state {
		// Not the login we started: another page poking the port.
		http.Error(w, "unknown login", http.StatusBadRequest)
		return
	}
	select {
	case cb.got <- q:
	default:
		// Only the first answer counts.
		http.Error(w, "this login is already answered", http.StatusConflict)
		return
	}
	msg := "You are logged in. You can close this tab."
	if e := q.Get("error"); e != "" {
		msg = "The login failed: " + html.EscapeString(e)
	}
	fmt.Fprintf(w, "<!doctype html><title>pml</title><p>%s</p>\n", msg)
}

// wait returns the redirect's query once the answer with the login's
// state arrives.
func (cb *callback) wait(ctx context.Context) (url.Values, error) {
	select {
	case q := <-cb.got:
		return q, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("no authorization answer: %w", context.Cause(ctx))
	}
}

func (cb *callback) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = cb.srv.Shutdown(ctx)
}

// Headless is a UserAgent that fetches the authorization URL itself and
// follows its redirects, the loopback one included: for authorization
// servers that answer at once (a test server, the MCP conformance suite's,
// one that has already been consented to). A server that shows a page
// instead gets an error saying a browser is needed.
type Headless struct{ Client *http.Client }

// Open fetches authURL.
func (h Headless) Open(ctx context.Context, authURL string) error {
	hc := h.Client
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, authURL, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("fetching the authorization page: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if resp.Request == nil || !strings.HasSuffix(resp.Request.URL.Path, "/callback") || !isLoopback(resp.Request.URL.Hostname()) {
		return fmt.Errorf("the authorization server answered with a page (HTTP %d), not a redirect: log in with a browser (pml mcp login without --headless)", resp.StatusCode)
	}
	return nil
}
