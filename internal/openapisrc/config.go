package openapisrc

import (
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/oauthclient"
	"github.com/pml-sandbox/pml/internal/redact"
	"github.com/pml-sandbox/pml/internal/secretref"
)

// DefaultCallTimeout bounds one request when the configuration sets none.
const DefaultCallTimeout = 30 * time.Second

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

// Config describes one OpenAPI service: mcp.<Name>.<operation>.
type Config struct {
	Name string
	// Spec is the document: an http(s) URL or a file path.
	Spec string
	// BaseURL, when set, is where requests go instead of the document's
	// servers (it may be another host than the document's: the
	// operator says so here).
	BaseURL string
	// Headers and Query are sent with every request (bearer tokens, API
	// keys); values may reference secrets as ${env:NAME}, ${file:/path}
	// or ${secret:ARN-or-name[#key]} (internal/secretref), resolved for
	// each request (a Secrets Manager secret from the process's cache, and
	// read again when the service refuses it), and are never logged or
	// shown.
	Headers, Query map[string]string
	Auth           Auth
	// CallTimeout bounds one request; zero means DefaultCallTimeout.
	CallTimeout time.Duration
	// FetchTimeout bounds fetching Spec; zero means DefaultFetchTimeout.
	FetchTimeout time.Duration
	// Allow, Deny, AllowDestructive and RequireApproval are an MCP
	// server's (internal/toolsource/mcp's Config), over operation names.
	Allow, Deny      []string
	AllowDestructive bool
	RequireApproval  []string
	// ReadOnly and Destructive mark operations (globs) read-only or
	// destructive whatever their method says; Destructive wins.
	ReadOnly, Destructive []string
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
	if err := catalog.ValidName(c.Name); err != nil {
		return fmt.Errorf("server name: %w", err)
	}
	if c.Spec == "" {
		return fmt.Errorf("server %q: no spec (the OpenAPI document's URL or file)", c.Name)
	}
	if isURL(c.Spec) {
		u, err := url.Parse(c.Spec)
		if err != nil || u.Host == "" {
			return fmt.Errorf("server %q: spec %q is not a URL", c.Name, redactURL(c.Spec))
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
	if c.CallTimeout < 0 || c.FetchTimeout < 0 {
		return fmt.Errorf("server %q: negative timeout", c.Name)
	}
	for what, m := range map[string]map[string]string{"header": c.Headers, "query": c.Query} {
		for k, v := range m {
			if k == "" || (what == "header" && strings.ContainsAny(k, " \t\r\n:")) {
				return fmt.Errorf("server %q: invalid %s name %q", c.Name, what, k)
			}
			if err := secretref.Check(v); err != nil {
				return fmt.Errorf("server %q: %s %s: %w", c.Name, what, k, err)
			}
		}
	}
	switch c.Auth.Type {
	case oauthclient.TypeAuto, oauthclient.TypeNone:
	case AuthSigV4:
		if c.hasAuthorizationHeader() {
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
		if c.hasAuthorizationHeader() {
			return fmt.Errorf("server %q: auth %s and an Authorization header: choose one", c.Name, c.Auth.Type)
		}
	default:
		return fmt.Errorf("server %q: auth type %q (want none, oauth, client_credentials or sigv4)", c.Name, c.Auth.Type)
	}
	for _, list := range [][]string{c.Allow, c.Deny, c.RequireApproval, c.ReadOnly, c.Destructive} {
		if slices.Contains(list, "") {
			return fmt.Errorf("server %q: empty pattern", c.Name)
		}
	}
	return nil
}

func (c Config) hasAuthorizationHeader() bool {
	for k := range c.Headers {
		if strings.EqualFold(k, "Authorization") {
			return true
		}
	}
	return false
}

func (c Config) callTimeout() time.Duration {
	if c.CallTimeout <= 0 {
		return DefaultCallTimeout
	}
	return c.CallTimeout
}

// secrets is what the configuration holds that must never be shown:
// header and query values written without references (resolved ones are
// added when the source starts).
func (c Config) secrets() []string {
	var out []string
	for _, m := range []map[string]string{c.Headers, c.Query} {
		for _, v := range m {
			if !secretref.Has(v) {
				out = append(out, secretref.HeaderSecrets(v)...)
			}
		}
	}
	for _, v := range []string{c.Auth.ClientSecret, c.Auth.PrivateKey} {
		if v != "" && !secretref.Has(v) {
			out = append(out, v)
		}
	}
	return out
}

// String prints the configuration without header or query values.
func (c Config) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s=openapi:%s (", c.Name, redactURL(c.Spec))
	var parts []string
	if c.BaseURL != "" {
		parts = append(parts, "base_url="+redactURL(c.BaseURL))
	}
	if len(c.Headers) > 0 {
		parts = append(parts, "headers="+strings.Join(sortedNames(c.Headers), ","))
	}
	if len(c.Query) > 0 {
		parts = append(parts, "query="+strings.Join(sortedNames(c.Query), ","))
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
func (c Config) GoString() string { return "openapisrc.Config{" + c.String() + "}" }

func sortedNames(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// redactURL shows a URL without userinfo and query values.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			q[k] = []string{redact.Mask}
		}
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// ParseFlag parses `--openapi NAME=URL|FILE`. As for --mcp, the flag is
// the operator's own command line, so destructive operations may run at
// all (AllowDestructive); each call still needs the request's
// allow_destructive or a person's approval.
func ParseFlag(s string) (Config, error) {
	name, spec, ok := strings.Cut(s, "=")
	if !ok {
		return Config{}, fmt.Errorf("--openapi %q: want NAME=URL or NAME=FILE", s)
	}
	c := Config{Name: strings.TrimSpace(name), Spec: strings.TrimSpace(spec), AllowDestructive: true}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("--openapi: %w", err)
	}
	return c, nil
}

// FileConfig is the on-disk shape of one OpenAPI server in the server
// list (`"type": "openapi"`); durations are strings ("30s").
type FileConfig struct {
	Name             string            `json:"name" yaml:"name"`
	Type             string            `json:"type" yaml:"type"`
	Spec             string            `json:"spec" yaml:"spec"`
	BaseURL          string            `json:"base_url" yaml:"base_url"`
	Headers          map[string]string `json:"headers" yaml:"headers"`
	Query            map[string]string `json:"query" yaml:"query"`
	Auth             *FileAuth         `json:"auth" yaml:"auth"`
	CallTimeout      string            `json:"call_timeout" yaml:"call_timeout"`
	FetchTimeout     string            `json:"fetch_timeout" yaml:"fetch_timeout"`
	Allow            []string          `json:"allow" yaml:"allow"`
	Deny             []string          `json:"deny" yaml:"deny"`
	AllowDestructive bool              `json:"allow_destructive" yaml:"allow_destructive"`
	RequireApproval  []string          `json:"require_approval" yaml:"require_approval"`
	ReadOnly         []string          `json:"read_only" yaml:"read_only"`
	Destructive      []string          `json:"destructive" yaml:"destructive"`
}

// FileAuth is the on-disk shape of Auth: oauthclient's fields, and SigV4's.
type FileAuth struct {
	Type                    string   `json:"type" yaml:"type"`
	Scopes                  []string `json:"scopes" yaml:"scopes"`
	ClientID                string   `json:"client_id" yaml:"client_id"`
	ClientSecret            string   `json:"client_secret" yaml:"client_secret"`
	ClientMetadataURL       string   `json:"client_metadata_url" yaml:"client_metadata_url"`
	TokenEndpointAuthMethod string   `json:"token_endpoint_auth_method" yaml:"token_endpoint_auth_method"`
	PrivateKey              string   `json:"private_key" yaml:"private_key"`
	SigningAlg              string   `json:"signing_alg" yaml:"signing_alg"`
	Secret                  string   `json:"secret" yaml:"secret"`
	Region                  string   `json:"region" yaml:"region"`
	Service                 string   `json:"service" yaml:"service"`
}

// Config converts the on-disk shape, and validates it.
func (f FileConfig) Config() (Config, error) {
	c := Config{Name: f.Name, Spec: f.Spec, BaseURL: f.BaseURL, Headers: f.Headers, Query: f.Query,
		Allow: f.Allow, Deny: f.Deny, AllowDestructive: f.AllowDestructive, RequireApproval: f.RequireApproval,
		ReadOnly: f.ReadOnly, Destructive: f.Destructive}
	if a := f.Auth; a != nil {
		c.Auth = Auth{Config: oauthclient.Config{Type: a.Type, Scopes: a.Scopes, ClientID: a.ClientID, ClientSecret: a.ClientSecret,
			ClientMetadataURL: a.ClientMetadataURL, TokenEndpointAuthMethod: a.TokenEndpointAuthMethod,
			PrivateKey: a.PrivateKey, SigningAlg: a.SigningAlg, Secret: a.Secret}, Region: a.Region, Service: a.Service}
		if c.Auth.Type == "auto" {
			c.Auth.Type = oauthclient.TypeAuto
		}
	}
	for _, d := range []struct {
		s   string
		out *time.Duration
		key string
	}{{f.CallTimeout, &c.CallTimeout, "call_timeout"}, {f.FetchTimeout, &c.FetchTimeout, "fetch_timeout"}} {
		if d.s == "" {
			continue
		}
		v, err := time.ParseDuration(d.s)
		if err != nil {
			return Config{}, fmt.Errorf("server %q: %s: %w", f.Name, d.key, err)
		}
		*d.out = v
	}
	return c, c.Validate()
}
