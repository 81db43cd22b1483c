package mcpclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/mcpauth"
	"github.com/pml-sandbox/pml/internal/secretref"
)

// authOptions are the pool's OAuth settings (see the With options below).
type authOptions struct {
	credentialsDir string
	secrets        func(context.Context) (mcpauth.SecretsAPI, error)
	agent          mcpauth.UserAgent
}

// WithCredentialsDir sets where credentials of servers without an
// auth.secret are kept (one file per server, see mcpauth.FilePath); ""
// keeps them in memory only.
func WithCredentialsDir(dir string) Option {
	return func(o *options) { o.auth.credentialsDir = dir }
}

// WithSecretsManager sets how the pool reaches AWS Secrets Manager for
// servers whose credentials are in a secret (auth.secret). It is called
// once, when the first such server starts.
func WithSecretsManager(f func(context.Context) (mcpauth.SecretsAPI, error)) Option {
	return func(o *options) { o.auth.secrets = f }
}

// WithLoginAgent lets the pool run the authorization-code flow itself
// when a server needs a login or more scopes, through agent (such as
// mcpauth.Headless); without it, such a server is UNAVAILABLE with a
// message that says how to log in.
func WithLoginAgent(agent mcpauth.UserAgent) Option {
	return func(o *options) { o.auth.agent = agent }
}

// loginHint says how to log in to the server: into its secret, into the
// credentials directory, or, where there is neither (a Lambda function
// keeps nothing on disk), into a secret it should be given.
func loginHint(cfg ServerConfig, credentialsDir string) func(string) string {
	return func(args string) string {
		switch {
		case cfg.Auth.Secret != "":
			return fmt.Sprintf("run `pml mcp login %s --secret %s%s`", cfg.Name, cfg.Auth.Secret, args)
		case credentialsDir != "":
			return fmt.Sprintf("run `pml mcp login %s%s`", cfg.Name, args)
		}
		return fmt.Sprintf("give the server an auth.secret (a Secrets Manager ARN) and run `pml mcp login %s --secret ARN%s`", cfg.Name, args)
	}
}

// NewSource builds the mcpauth.Source of one server: its secrets
// resolved through refs, its store chosen (the secret, else a file in
// credentialsDir, else memory). addSecret learns every secret the source
// handles.
func NewSource(ctx context.Context, cfg ServerConfig, credentialsDir string, secrets func(context.Context) (mcpauth.SecretsAPI, error),
	refs *secretref.Resolver, agent mcpauth.UserAgent, hc *http.Client, addSecret func(...string), o ...func(*mcpauth.Options)) (*mcpauth.Source, error) {
	read := clientSecrets(refs, cfg.Auth)
	cs, _, err := read(ctx, false)
	if err != nil {
		return nil, err
	}
	ac := cfg.Auth
	ac.ClientSecret, ac.PrivateKey = cs.ClientSecret, cs.PrivateKey
	var store mcpauth.Store
	switch {
	case ac.Secret != "":
		if secrets == nil {
			return nil, errors.New("credentials in Secrets Manager, and no AWS client configured")
		}
		api, err := secrets(ctx)
		if err != nil {
			return nil, fmt.Errorf("secrets manager: %w", err)
		}
		store = mcpauth.SecretStore{API: api, ARN: ac.Secret}
	case credentialsDir != "":
		store = mcpauth.FileStore{Path: mcpauth.FilePath(credentialsDir, cfg.Name)}
	}
	opts := mcpauth.Options{Server: cfg.Name, URL: cfg.URL, Config: ac, Store: store, HTTPClient: hc, Agent: agent,
		LoginHint: loginHint(cfg, credentialsDir), AddSecret: addSecret}
	if secretref.HasSecret(cfg.Auth.ClientSecret) || secretref.HasSecret(cfg.Auth.PrivateKey) {
		// Only a Secrets Manager value can change under a running process.
		opts.ClientSecrets = read
	}
	for _, f := range o {
		f(&opts)
	}
	return mcpauth.NewSource(opts), nil
}

// setupAuth puts the OAuth transport under the server's HTTP client when
// its config asks for OAuth. A failure (an unset ${env:} in the client
// secret, no AWS client) is kept and fails each connect.
func (s *remote) setupAuth() {
	if !s.cfg.OAuth() {
		return
	}
	o := s.p.opts.auth
	src, err := NewSource(s.p.ctx, s.cfg, o.credentialsDir, o.secrets, s.p.opts.refs, o.agent,
		&http.Client{Transport: s.httpTransport, Timeout: s.connectTimeout() * 3},
		s.addSecrets, func(mo *mcpauth.Options) { mo.Logger = s.log })
	if err != nil {
		s.authSetupErr = err
		return
	}
	s.httpClient.Transport = &mcpauth.Transport{Base: s.httpClient.Transport, Source: src}
}

// authError is the mcpauth error in err, if any.
func authError(err error) *mcpauth.Error {
	var ae *mcpauth.Error
	if errors.As(err, &ae) {
		return ae
	}
	return nil
}

// authUnavailable is the error of a call to a server that cannot be
// authorized: UNAVAILABLE, not retryable (retrying will not log anyone
// in), with mcpauth's message, which names the server and what to do.
func authUnavailable(full string, ae *mcpauth.Error) *fault.Error {
	return fault.Wrap(fault.Unavailable, ae, "").WithTool(full)
}

// clientSecrets reads a client's secret and private key from their
// references each time (Secrets Manager values from the resolver's cache
// while it is fresh, again when forced, after the authorization server
// refused the client): a rotated secret is picked up without a restart.
func clientSecrets(refs *secretref.Resolver, raw mcpauth.Config) func(context.Context, bool) (mcpauth.ClientSecrets, bool, error) {
	return func(ctx context.Context, force bool) (mcpauth.ClientSecrets, bool, error) {
		var changed bool
		if force {
			var err error
			if changed, err = refs.Refresh(ctx, raw.ClientSecret, raw.PrivateKey); err != nil {
				return mcpauth.ClientSecrets{}, false, err
			}
		}
		secret, err := refs.Resolve(ctx, "auth client_secret", raw.ClientSecret)
		if err != nil {
			return mcpauth.ClientSecrets{}, false, err
		}
		key, err := refs.Resolve(ctx, "auth private_key", raw.PrivateKey)
		if err != nil {
			return mcpauth.ClientSecrets{}, false, err
		}
		return mcpauth.ClientSecrets{ClientSecret: secret, PrivateKey: key}, changed, nil
	}
}
