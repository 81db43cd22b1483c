package oauthclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/pml-sandbox/pml/internal/secretref"
)

// Setup is what one server's Source is built from: the server, its OAuth
// configuration, and the process's places to keep credentials. Every HTTP
// tool source that speaks OAuth (MCP servers, OpenAPI services) builds its
// Source here, so that credentials are stored, named and refreshed alike.
type Setup struct {
	// Name and URL are the server's: the credentials file's name, and the
	// resource its tokens are for.
	Name, URL string
	// Config is the server's auth configuration as written: its client
	// secret and private key may be secret references.
	Config Config
	// CredentialsDir keeps the credentials of a server without a secret
	// (one file per server, FilePath); "" keeps them in memory.
	CredentialsDir string
	// Secrets reaches Secrets Manager, for a server whose credentials are
	// in a secret (Config.Secret).
	Secrets func(context.Context) (SecretsAPI, error)
	// Refs resolves the client secret's and private key's references.
	Refs *secretref.Resolver
	// Agent, when set, runs the authorization-code flow (Options.Agent).
	Agent UserAgent
	// HTTPClient makes the requests to authorization servers.
	HTTPClient *http.Client
	// AddSecret learns every secret the source handles (Options.AddSecret).
	AddSecret func(...string)
	// Options adjusts the Source's options last (a logger, a clock).
	Options func(*Options)
}

// Build makes the Source of one server: its secrets resolved, its store
// chosen (the secret, else a file in the credentials directory, else
// memory).
func Build(ctx context.Context, s Setup) (*Source, error) {
	read := clientSecrets(s.Refs, s.Config)
	cs, _, err := read(ctx, false)
	if err != nil {
		return nil, err
	}
	ac := s.Config
	ac.ClientSecret, ac.PrivateKey = cs.ClientSecret, cs.PrivateKey
	var store Store
	switch {
	case ac.Secret != "":
		if s.Secrets == nil {
			return nil, errors.New("credentials in Secrets Manager, and no AWS client configured")
		}
		api, err := s.Secrets(ctx)
		if err != nil {
			return nil, fmt.Errorf("secrets manager: %w", err)
		}
		store = SecretStore{API: api, ARN: ac.Secret}
	case s.CredentialsDir != "":
		store = FileStore{Path: FilePath(s.CredentialsDir, s.Name)}
	}
	opts := Options{Server: s.Name, URL: s.URL, Config: ac, Store: store, HTTPClient: s.HTTPClient, Agent: s.Agent,
		LoginHint: loginHint(s), AddSecret: s.AddSecret}
	if secretref.HasSecret(s.Config.ClientSecret) || secretref.HasSecret(s.Config.PrivateKey) {
		// Only a Secrets Manager value can change under a running process.
		opts.ClientSecrets = read
	}
	if s.Options != nil {
		s.Options(&opts)
	}
	return NewSource(opts), nil
}

// loginHint says how to log in to the server: into its secret, into the
// credentials directory, or, where there is neither (a Lambda function
// keeps nothing on disk), into a secret it should be given.
func loginHint(s Setup) func(string) string {
	return func(args string) string {
		switch {
		case s.Config.Secret != "":
			return fmt.Sprintf("run `pml mcp login %s --secret %s%s`", s.Name, s.Config.Secret, args)
		case s.CredentialsDir != "":
			return fmt.Sprintf("run `pml mcp login %s%s`", s.Name, args)
		}
		return fmt.Sprintf("give the server an auth.secret (a Secrets Manager ARN) and run `pml mcp login %s --secret ARN%s`", s.Name, args)
	}
}

// clientSecrets reads a client's secret and private key from their
// references each time (Secrets Manager values from the resolver's cache
// while it is fresh, again when forced, after the authorization server
// refused the client): a rotated secret is picked up without a restart.
func clientSecrets(refs *secretref.Resolver, raw Config) func(context.Context, bool) (ClientSecrets, bool, error) {
	return func(ctx context.Context, force bool) (ClientSecrets, bool, error) {
		var changed bool
		if force {
			var err error
			if changed, err = refs.Refresh(ctx, raw.ClientSecret, raw.PrivateKey); err != nil {
				return ClientSecrets{}, false, err
			}
		}
		secret, err := refs.Resolve(ctx, "auth client_secret", raw.ClientSecret)
		if err != nil {
			return ClientSecrets{}, false, err
		}
		key, err := refs.Resolve(ctx, "auth private_key", raw.PrivateKey)
		if err != nil {
			return ClientSecrets{}, false, err
		}
		return ClientSecrets{ClientSecret: secret, PrivateKey: key}, changed, nil
	}
}

// Literals are the client secret and private key as configured when
// written without a secret reference: secrets themselves, which whoever
// prints or logs the configuration must mask (referenced ones are learned
// once resolved).
func (c Config) Literals() []string {
	var out []string
	for _, v := range []string{c.ClientSecret, c.PrivateKey} {
		if v != "" && !secretref.Has(v) {
			out = append(out, v)
		}
	}
	return out
}
