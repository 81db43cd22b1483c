package mcp

import (
	"errors"
	"net/http"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/oauthclient"
)

// setupAuth puts the OAuth transport under the server's HTTP client when
// its config asks for OAuth, with the process's credential store and
// login agent (toolsource.Env.OAuth). A failure (an unset ${env:} in the
// client secret, no AWS client) is kept and fails each connect.
func (s *remote) setupAuth() {
	if !s.cfg.OAuth() {
		return
	}
	env := s.h.Env()
	src, err := oauthclient.Build(s.h.Context(), oauthclient.Setup{Name: s.cfg.Name, URL: s.cfg.URL, Config: s.cfg.Auth,
		CredentialsDir: env.OAuth.CredentialsDir, Secrets: env.OAuth.Secrets, Refs: env.Refs, Agent: env.OAuth.Agent,
		HTTPClient: &http.Client{Transport: s.httpTransport, Timeout: s.connectTimeout() * 3}, AddSecret: s.h.Learn,
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
