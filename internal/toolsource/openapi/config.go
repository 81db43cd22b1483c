package openapi

import (
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/pml-sandbox/pml/internal/oauthclient"
	"github.com/pml-sandbox/pml/internal/redact"
	"github.com/pml-sandbox/pml/internal/secretref"
	"github.com/pml-sandbox/pml/internal/toolsource"
)

// Auth types besides oauthclient's (Auth.Type).
const (
	// AuthSigV4 signs every request with AWS Signature Version 4 using
	// the process's AWS credentials (the function's role), as API
	// Gateway's IAM authorization expects.
	AuthSigV4 = "sigv4"
)

// Auth is how requests are authorised beyond static headers and query
// values: OAuth through oauthclient (its types and fields), or SigV4.
type Auth struct {
	// Config is the OAuth configuration when Type is one of oauthclient's.
	oauthclient.Config
	// Region and Service are SigV4's (Service defaults to execute-api,
	// API Gateway's; Region to the process's).
	Region, Service string
}

// Config describes one OpenAPI service, mcp.<Name>.<operation>: the
// common block (toolsource.Config: its allow, deny, require_approval and
// allow_destructive over operation names; its headers sent with every
// request, bearer tokens and API keys) and the service's own fields.
type Config struct {
	toolsource.Config
	// Spec is the document: an http(s) URL or a file path.
	Spec string
	// BaseURL, when set, is where requests go instead of the document's
	// servers (it may be another host than the document's: the
	// operator says so here).
	BaseURL string
	// Query values are sent with every request, as the headers are: they
	// may reference secrets as ${env:NAME}, ${file:/path} or
	// ${secret:ARN-or-name[#key]} (internal/secretref), resolved for each
	// request (a Secrets Manager secret from the process's cache, and read
	// again when the service refuses it), and are never logged or shown.
	Query map[string]string
	Auth  Auth
	// FetchTimeout bounds fetching Spec; zero means DefaultFetchTimeout.
	FetchTimeout time.Duration
	// ReadOnly and Destructive mark operations (globs) read-only or
	// destructive whatever their method says; Destructive wins.
	ReadOnly, Destructive []string
}

// Base implements toolsource.Spec.
func (c Config) Base() toolsource.Config {
	b := c.Config
	b.Type = Type
	return b
}

// sigV4 reports whether requests are signed.
func (c Config) sigV4() bool { return c.Auth.Type == AuthSigV4 }

// oauth reports whether oauthclient authorises the requests: only when the
// configuration asks for it (an OpenAPI service is not an MCP server, so
// there is no "auto").
func (c Config) oauth() bool {
	return c.Auth.Type == oauthclient.TypeOAuth || c.Auth.Type == oauthclient.TypeClientCredentials
}

// Validate checks one configuration and reports the first problem.
func (c Config) Validate() error {
	if err := c.Config.Validate(); err != nil {
		return err
	}
	if err := c.validateLocations(); err != nil {
		return err
	}
	if c.FetchTimeout < 0 {
		return fmt.Errorf("server %q: negative fetch timeout", c.Name)
	}
	for k, v := range c.Query {
		if k == "" {
			return fmt.Errorf("server %q: invalid query name %q", c.Name, k)
		}
		if err := secretref.Check(v); err != nil {
			return fmt.Errorf("server %q: query %s: %w", c.Name, k, err)
		}
	}
	if err := c.validateAuth(); err != nil {
		return err
	}
	for _, list := range [][]string{c.ReadOnly, c.Destructive} {
		if slices.Contains(list, "") {
			return fmt.Errorf("server %q: empty pattern in read_only/destructive", c.Name)
		}
	}
	return nil
}

// validateLocations checks the document's location and the base URL.
func (c Config) validateLocations() error {
	if c.Spec == "" {
		return fmt.Errorf("server %q: no spec (the OpenAPI document's URL or file)", c.Name)
	}
	if isURL(c.Spec) {
		u, err := url.Parse(c.Spec)
		if err != nil || u.Host == "" {
			return fmt.Errorf("server %q: spec %q is not a URL", c.Name, redact.URL(c.Spec))
		}
		if u.User != nil {
			return fmt.Errorf("server %q: the spec URL may not hold credentials", c.Name)
		}
	} else if strings.Contains(c.Spec, "://") {
		return fmt.Errorf("server %q: spec %q: want an http(s) URL or a file path", c.Name, c.Spec)
	}
	if c.BaseURL != "" {
		u, err := url.Parse(c.BaseURL)
		if err != nil {
			return fmt.Errorf("server %q: base_url: %w", c.Name, unwrapURLError(err))
		}
		if err := checkBase(u); err != nil {
			return fmt.Errorf("server %q: base_url: %w", c.Name, err)
		}
	}
	return nil
}

// validateAuth checks the auth block against the rest.
func (c Config) validateAuth() error {
	switch c.Auth.Type {
	case oauthclient.TypeAuto, oauthclient.TypeNone:
	case AuthSigV4:
		if c.HasHeader("Authorization") {
			return fmt.Errorf("server %q: auth sigv4 and an Authorization header: choose one", c.Name)
		}
	case oauthclient.TypeOAuth, oauthclient.TypeClientCredentials:
		if c.BaseURL == "" {
			// The tokens are bound to the resource they are for, which
			// must be known before the document is.
			return fmt.Errorf("server %q: auth %s needs base_url", c.Name, c.Auth.Type)
		}
		if err := c.Auth.Config.Validate(); err != nil {
			return fmt.Errorf("server %q: auth: %w", c.Name, err)
		}
		if c.HasHeader("Authorization") {
			return fmt.Errorf("server %q: auth %s and an Authorization header: choose one", c.Name, c.Auth.Type)
		}
	default:
		return fmt.Errorf("server %q: auth type %q (want none, oauth, client_credentials or sigv4)", c.Name, c.Auth.Type)
	}
	return nil
}

// literals is what the configuration holds, beyond the headers the Set
// learns itself, that must never be shown: query values and OAuth client
// secrets written without references (resolved ones are learned when
// they are read).
func (c Config) literals() []string {
	var out []string
	for _, v := range c.Query {
		if !secretref.Has(v) {
			out = append(out, secretref.HeaderSecrets(v)...)
		}
	}
	out = append(out, c.Auth.Literals()...)
	return out
}

// String prints the configuration without header or query values.
func (c Config) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s=openapi:%s (", c.Name, redact.URL(c.Spec))
	var parts []string
	if c.BaseURL != "" {
		parts = append(parts, "base_url="+redact.URL(c.BaseURL))
	}
	if len(c.Headers) > 0 {
		parts = append(parts, "headers="+strings.Join(c.HeaderNames(), ","))
	}
	if len(c.Query) > 0 {
		parts = append(parts, "query="+strings.Join(slices.Sorted(maps.Keys(c.Query)), ","))
	}
	if c.Auth.Type != "" {
		parts = append(parts, "auth="+c.Auth.Type)
	}
	if c.AllowDestructive {
		parts = append(parts, "allow_destructive")
	}
	b.WriteString(strings.Join(parts, " "))
	b.WriteString(")")
	return b.String()
}

// LogValue makes slog print the configuration without secrets.
func (c Config) LogValue() slog.Value { return slog.StringValue(c.String()) }

// GoString keeps %#v from printing secrets either.
func (c Config) GoString() string { return "openapi.Config{" + c.String() + "}" }

// ParseFlag parses `--openapi NAME=URL|FILE`. As for --mcp, the flag is
// the operator's own command line, so destructive operations may run at
// all (AllowDestructive); each call still needs the request's
// allow_destructive or a person's approval.
func ParseFlag(s string) (Config, error) {
	name, spec, ok := strings.Cut(s, "=")
	if !ok {
		return Config{}, fmt.Errorf("--openapi %q: want NAME=URL or NAME=FILE", s)
	}
	c := Config{Config: toolsource.Config{Name: strings.TrimSpace(name), Type: Type, AllowDestructive: true},
		Spec: strings.TrimSpace(spec)}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("--openapi: %w", err)
	}
	return c, nil
}

// entry is the on-disk shape of one OpenAPI server in the server list
// (`"type": "openapi"`); durations are strings ("30s"). Auth is decoded
// on its own, as strictly as the entry.
type entry struct {
	toolsource.Fields `yaml:",inline"`
	Spec              string            `yaml:"spec"`
	BaseURL           string            `yaml:"base_url"`
	Query             map[string]string `yaml:"query"`
	Auth              yaml.Node         `yaml:"auth"`
	FetchTimeout      string            `yaml:"fetch_timeout"`
	ReadOnly          []string          `yaml:"read_only"`
	Destructive       []string          `yaml:"destructive"`
}

// fileAuth is the on-disk shape of Auth: oauthclient's fields, and SigV4's.
type fileAuth struct {
	oauthclient.Fields `yaml:",inline"`
	Region             string `yaml:"region"`
	Service            string `yaml:"service"`
}

// decode reads one entry of the server list, strictly, and validates it.
func decode(n *yaml.Node) (Config, error) {
	var f entry
	common, err := toolsource.Decode(n, &f, &f.Fields)
	if err != nil {
		return Config{}, err
	}
	c := Config{Config: common, Spec: f.Spec, BaseURL: f.BaseURL, Query: f.Query, ReadOnly: f.ReadOnly, Destructive: f.Destructive}
	if f.Auth.Kind != 0 && f.Auth.Tag != "!!null" {
		var a fileAuth
		if err := toolsource.DecodeEntry(&f.Auth, &a); err != nil {
			return Config{}, fmt.Errorf("server %q: auth: %w", f.Name, err)
		}
		c.Auth = Auth{Config: a.Fields.Config(), Region: a.Region, Service: a.Service}
	}
	if c.FetchTimeout, err = toolsource.Duration(f.Name, "fetch_timeout", f.FetchTimeout); err != nil {
		return Config{}, err
	}
	return c, c.Validate()
}
