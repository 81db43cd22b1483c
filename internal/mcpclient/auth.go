package mcpclient

import (
	"context"
	"errors"
	"net/http"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/oauthclient"
)

// authOptions are the pool's OAuth settings (see the With options below).
type authOptions struct {
	credentialsDir string
	secrets        func(context.Context) (oauthclient.SecretsAPI, error)
	agent          oauthclient.UserAgent
}

// WithCredentialsDir sets where credentials of servers without an
// auth.secret are kept (one file per server, see oauthclient.FilePath); ""
// keeps them in memory only.
func WithCredentialsDir(dir string) Option {
	return func(o *options) { o.auth.credentialsDir = dir }
}

// WithSecretsManager sets how the pool reaches AWS Secrets Manager for
// servers whose credentials are in a secret (auth.secret). It is called
// once, when the first such server starts.
func WithSecretsManager(f func(context.Context) (oauthclient.SecretsAPI, error)) Option {
	return func(o *options) { o.auth.secrets = f }
}

// WithLoginAgent lets the pool run the authorization-code flow itself
// when a server needs a login or more scopes, through agent (such as
// oauthclient.Headless); without it, such a server is UNAVAILABLE with a
// message that says how to log in.
func WithLoginAgent(agent oauthclient.UserAgent) Option {
	return func(o *options) { o.auth.agent = agent }
}

// setupAuth puts the OAuth transport under the server's HTTP client when
// its config asks for OAuth. A failure (an unset ${env:} in the client
// secret, no AWS client) is kept and fails each connect.
func (s *remote) setupAuth() {
	if !s.cfg.OAuth() {
		return
	}
	o := s.p.opts.auth
	src, err := oauthclient.Build(s.p.ctx, oauthclient.Setup{Name: s.cfg.Name, URL: s.cfg.URL, Config: s.cfg.Auth,
		CredentialsDir: o.credentialsDir, Secrets: o.secrets, Refs: s.p.opts.refs, Agent: o.agent,
		HTTPClient: &http.Client{Transport: s.httpTransport, Timeout: s.connectTimeout() * 3}, AddSecret: s.addSecrets,
		Options: func(mo *oauthclient.Options) { mo.Logger = s.log }})
	if err != nil {
		s.authSetupErr = err
		return
	}
	s.httpClient.Transport = &oauthclient.Transport{Base: s.httpClient.Transport, Source: src}
}

// authError is the oauthclient error in err, if any.
func authError(err error) *oauthclient.Error {
	var ae *oauthclient.Error
	if errors.As(err, &ae) {
		return ae
	}
	return nil
}

// authUnavailable is the error of a call to a server that cannot be
// authorized: UNAVAILABLE, not retryable (retrying will not log anyone
// in), with oauthclient's message, which names the server and what to do.
func authUnavailable(full string, ae *oauthclient.Error) *fault.Error {
	return fault.Wrap(fault.Unavailable, ae, "").WithTool(full)
}
