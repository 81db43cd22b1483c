package mcpclient

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/oauthclient"
	"github.com/pml-sandbox/pml/internal/redact"
	"github.com/pml-sandbox/pml/internal/secretref"
)

// Transport names accepted in ServerConfig.Transport.
const (
	// TransportAuto tries streamable HTTP first and falls back to SSE.
	TransportAuto = "auto"
	// TransportSSE is the HTTP+SSE transport of protocol 2024-11-05.
	TransportSSE = "sse"
	// TransportStreamable is the streamable HTTP transport of 2025-03-26 on.
	TransportStreamable = "streamable"
)

// DefaultCallTimeout bounds one tool call when the server sets none.
const DefaultCallTimeout = 30 * time.Second

// redacted stands in for header values and URL credentials wherever a
// config is printed; the same mask as the pool's redactor, so that one
// search of the logs finds both.
const redacted = redact.Mask

// ServerConfig describes one remote MCP server.
type ServerConfig struct {
	// Name is the `mcp.<name>` the sandbox sees; catalog.ValidName says
	// which names are refused.
	Name string
	// URL is the endpoint: ".../sse" for SSE, ".../mcp" for streamable HTTP.
	URL string
	// Transport is "auto" (the default), "sse" or "streamable".
	Transport string
	// Headers are sent with every HTTP request. A value may reference
	// secrets as ${env:NAME}, ${file:/path} or ${secret:ARN-or-name[#key]}
	// (internal/secretref); references are resolved at connect time, so
	// that rotated secrets are picked up on reconnect, and a Secrets
	// Manager secret again when the server refuses it (401, 403); values
	// are never logged or printed.
	Headers map[string]string
	// CallTimeout bounds one tools/call; zero means DefaultCallTimeout.
	CallTimeout time.Duration
	// ConnectTimeout bounds one connect attempt to this server (stream
	// set-up, discover or initialize, the first tools/list; an OAuth
	// exchange gets three times it); zero means the pool's
	// (WithConnectTimeout, 10 s by default). For a server known to be slow
	// to answer at first.
	ConnectTimeout time.Duration
	// Allow, when not empty, lists the only tool names exposed; Deny lists
	// names never exposed (Deny wins). Each entry is a glob: a '*' matches
	// any run of characters. Deny, which guards, matches without regard to
	// case (catalog.MatchToolGlob: "delete_*" hides "Delete_all"); Allow,
	// which grants, admits only what it spells (catalog.MatchGlob).
	Allow, Deny []string
	// AllowDestructive lets tools annotated destructiveHint=true run at all
	// (a request must still opt in through CallOptions.AllowDestructive).
	AllowDestructive bool
	// RequireApproval lists tools (globs, as Deny: without regard to
	// case) that need the same consent as destructive ones whatever their
	// annotations say: the request's allow_destructive, or a person's
	// approval of the parked call (catalog.Tool.RequireApproval).
	RequireApproval []string
	// AssumeNotDestructive is the deployment's word for a server that
	// under-annotates: a tool of it that does not say whether it is
	// destructive (no destructiveHint, and not readOnlyHint) is taken as
	// not destructive, where MCP's defaults make it destructive. What a
	// tool does say stands.
	AssumeNotDestructive bool
	// Auth is the server's OAuth configuration (oauthclient.Config):
	// ClientSecret and PrivateKey may reference secrets as headers do,
	// resolved when the pool starts. The zero value (TypeAuto) engages the
	// authorization-code grant only when the server challenges with
	// Bearer and no Authorization header is configured.
	Auth oauthclient.Config
}

// OAuth reports whether the pool answers this server's Bearer challenges
// itself: not with auth type none, nor in auto mode when a configured
// Authorization header is the auth.
func (c ServerConfig) OAuth() bool {
	switch c.Auth.Type {
	case oauthclient.TypeNone:
		return false
	case oauthclient.TypeAuto:
		return !c.hasAuthorizationHeader()
	}
	return true
}

// hasAuthorizationHeader reports whether the config sets an Authorization
// header (in any case).
func (c ServerConfig) hasAuthorizationHeader() bool {
	for k := range c.Headers {
		if strings.EqualFold(k, "Authorization") {
			return true
		}
	}
	return false
}

// String prints the config with header values and URL passwords redacted.
func (c ServerConfig) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s=%s (transport=%s", c.Name, redactURL(c.URL), c.transport())
	if len(c.Headers) > 0 {
		fmt.Fprintf(&b, " headers=%s", strings.Join(c.headerNames(), ","))
	}
	if c.CallTimeout > 0 {
		fmt.Fprintf(&b, " call_timeout=%s", c.CallTimeout)
	}
	if c.ConnectTimeout > 0 {
		fmt.Fprintf(&b, " connect_timeout=%s", c.ConnectTimeout)
	}
	if len(c.Allow) > 0 {
		fmt.Fprintf(&b, " allow=%s", strings.Join(c.Allow, ","))
	}
	if len(c.Deny) > 0 {
		fmt.Fprintf(&b, " deny=%s", strings.Join(c.Deny, ","))
	}
	if c.AllowDestructive {
		b.WriteString(" allow_destructive")
	}
	if len(c.RequireApproval) > 0 {
		fmt.Fprintf(&b, " require_approval=%s", strings.Join(c.RequireApproval, ","))
	}
	if c.AssumeNotDestructive {
		b.WriteString(" assume_not_destructive")
	}
	if c.Auth.Type != oauthclient.TypeAuto {
		fmt.Fprintf(&b, " auth=%s", c.Auth.Type)
	}
	if c.Auth.Secret != "" {
		fmt.Fprintf(&b, " secret=%s", c.Auth.Secret)
	}
	b.WriteString(")")
	return b.String()
}

// LogValue makes slog print the config without header values.
func (c ServerConfig) LogValue() slog.Value {
	headers := make([]slog.Attr, 0, len(c.Headers))
	for _, k := range c.headerNames() {
		headers = append(headers, slog.String(k, redacted))
	}
	return slog.GroupValue(
		slog.String("name", c.Name),
		slog.String("url", redactURL(c.URL)),
		slog.String("transport", c.transport()),
		slog.Attr{Key: "headers", Value: slog.GroupValue(headers...)},
		slog.Duration("call_timeout", c.callTimeout()),
		slog.Any("allow", c.Allow),
		slog.Any("deny", c.Deny),
		slog.Bool("allow_destructive", c.AllowDestructive),
		slog.Any("require_approval", c.RequireApproval),
		slog.Bool("assume_not_destructive", c.AssumeNotDestructive),
		slog.String("auth", oauthclient.TypeName(c.Auth.Type)),
	)
}

// GoString keeps %#v from printing header values either.
func (c ServerConfig) GoString() string { return "mcpclient.ServerConfig{" + c.String() + "}" }

func (c ServerConfig) headerNames() []string {
	names := make([]string, 0, len(c.Headers))
	for k := range c.Headers {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

func (c ServerConfig) transport() string {
	if c.Transport == "" {
		return TransportAuto
	}
	return c.Transport
}

func (c ServerConfig) callTimeout() time.Duration {
	if c.CallTimeout <= 0 {
		return DefaultCallTimeout
	}
	return c.CallTimeout
}

// redactURL shows a URL without its credentials: userinfo and every query
// value are masked, keys and the rest are kept so that an operator can
// still tell the URLs apart.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	hasUser, query := u.User != nil, u.RawQuery
	u.User, u.RawQuery, u.ForceQuery = nil, "", false
	out := u.String()
	if hasUser {
		out = strings.Replace(out, "://", "://"+redacted+"@", 1)
	}
	if query != "" {
		parts := strings.Split(query, "&")
		for i, kv := range parts {
			if k, _, ok := strings.Cut(kv, "="); ok {
				parts[i] = k + "=" + redacted
			}
		}
		// The fragment, if any, went out with u.String(); put the query
		// before it.
		frag := ""
		if i := strings.IndexByte(out, '#'); i >= 0 {
			out, frag = out[:i], out[i:]
		}
		out += "?" + strings.Join(parts, "&") + frag
	}
	return out
}

// secrets lists what the config holds that must never be shown: header
// values without secret references (resolved values are added at connect
// time, see secretref.HeaderSecrets), the URL's userinfo and every query value, both
// decoded and as written.
func (c ServerConfig) secrets() []string {
	var out []string
	for _, v := range c.Headers {
		if !secretref.Has(v) {
			out = append(out, secretref.HeaderSecrets(v)...)
		}
	}
	for _, v := range []string{c.Auth.ClientSecret, c.Auth.PrivateKey} {
		if v != "" && !secretref.Has(v) {
			out = append(out, v)
		}
	}
	u, err := url.Parse(c.URL)
	if err != nil {
		return out
	}
	if u.User != nil {
		// net/http sends userinfo as a Basic Authorization header, which a
		// refusal may echo.
		p, hasPass := u.User.Password()
		out = append(out, base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+p)))
		if hasPass {
			out = append(out, p)
		} else {
			// A bare username is a token (https://TOKEN@host); beside a
			// password it is an identifier, and masking a name like
			// "admin" everywhere would shred messages for nothing.
			out = append(out, u.User.Username())
		}
		// As written in the URL, which may escape differently.
		if _, rest, ok := strings.Cut(c.URL, "://"); ok {
			if i := strings.IndexAny(rest, "/?#"); i >= 0 {
				rest = rest[:i]
			}
			if at := strings.LastIndexByte(rest, '@'); at >= 0 {
				user, pass, hasPass := strings.Cut(rest[:at], ":")
				if hasPass {
					out = append(out, pass)
				} else {
					out = append(out, user)
				}
			}
		}
	}
	for _, kv := range strings.Split(u.RawQuery, "&") {
		_, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		out = append(out, v)
		if dec, err := url.QueryUnescape(v); err == nil {
			out = append(out, dec)
		}
	}
	return out
}

// Validate checks one config and reports the first problem.
func (c ServerConfig) Validate() error {
	if err := catalog.ValidName(c.Name); err != nil {
		return fmt.Errorf("server name: %w", err)
	}
	u, err := url.Parse(c.URL)
	if err != nil {
		// *url.Error quotes the whole URL, credentials and all.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("server %q: invalid URL: %w", c.Name, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("server %q: URL %q must be absolute http(s)", c.Name, redactURL(c.URL))
	}
	switch c.transport() {
	case TransportAuto, TransportSSE, TransportStreamable:
	default:
		return fmt.Errorf("server %q: unknown transport %q (want auto, sse or streamable)", c.Name, c.Transport)
	}
	if c.CallTimeout < 0 {
		return fmt.Errorf("server %q: negative call timeout", c.Name)
	}
	if c.ConnectTimeout < 0 {
		return fmt.Errorf("server %q: negative connect timeout", c.Name)
	}
	for k, v := range c.Headers {
		if k == "" || strings.ContainsAny(k, " \t\r\n:") {
			return fmt.Errorf("server %q: invalid header name %q", c.Name, k)
		}
		if err := secretref.Check(v); err != nil {
			return fmt.Errorf("server %q: header %s: %w", c.Name, k, err)
		}
	}
	if err := c.Auth.Validate(); err != nil {
		return fmt.Errorf("server %q: auth: %w", c.Name, err)
	}
	for name, v := range map[string]string{"client_secret": c.Auth.ClientSecret, "private_key": c.Auth.PrivateKey} {
		if err := secretref.Check(v); err != nil {
			return fmt.Errorf("server %q: auth: %s: %w", c.Name, name, err)
		}
	}
	if (c.Auth.Type == oauthclient.TypeOAuth || c.Auth.Type == oauthclient.TypeClientCredentials) && c.hasAuthorizationHeader() {
		return fmt.Errorf("server %q: auth %s and an Authorization header: choose one", c.Name, c.Auth.Type)
	}
	for _, p := range append(slices.Clone(c.Allow), c.Deny...) {
		if p == "" {
			return fmt.Errorf("server %q: empty pattern in allow/deny", c.Name)
		}
	}
	if slices.Contains(c.RequireApproval, "") {
		return fmt.Errorf("server %q: empty pattern in require_approval", c.Name)
	}
	return nil
}

// validateConfigs checks every config and that names are unique.
func validateConfigs(cfgs []ServerConfig) error {
	seen := make(map[string]bool, len(cfgs))
	for i, c := range cfgs {
		if err := c.Validate(); err != nil {
			return fmt.Errorf("servers[%d]: %w", i, err)
		}
		if seen[c.Name] {
			return fmt.Errorf("servers[%d]: duplicate server name %q", i, c.Name)
		}
		seen[c.Name] = true
	}
	return nil
}

// ParseServerFlag parses the `--mcp NAME=URL` form: transport auto, and
// AllowDestructive set, because the flag is the operator's own command line
// and mcp-go servers mark every tool destructiveHint=true unless told
// otherwise (the MCP default); the request's CallOptions.AllowDestructive
// remains the gate. A config file can say allow_destructive: false.
func ParseServerFlag(s string) (ServerConfig, error) {
	name, rawURL, ok := strings.Cut(s, "=")
	if !ok {
		return ServerConfig{}, fmt.Errorf("--mcp %q: want NAME=URL", s)
	}
	c := ServerConfig{Name: strings.TrimSpace(name), URL: strings.TrimSpace(rawURL),
		Transport: TransportAuto, AllowDestructive: true}
	if err := c.Validate(); err != nil {
		return ServerConfig{}, fmt.Errorf("--mcp: %w", err)
	}
	return c, nil
}

// fileServer is the on-disk shape of one server; durations are strings
// ("30s") so that files stay readable.
type fileServer struct {
	Name             string            `json:"name" yaml:"name"`
	URL              string            `json:"url" yaml:"url"`
	Transport        string            `json:"transport" yaml:"transport"`
	Headers          map[string]string `json:"headers" yaml:"headers"`
	CallTimeout      string            `json:"call_timeout" yaml:"call_timeout"`
	ConnectTimeout   string            `json:"connect_timeout" yaml:"connect_timeout"`
	Allow            []string          `json:"allow" yaml:"allow"`
	Deny             []string          `json:"deny" yaml:"deny"`
	AllowDestructive bool              `json:"allow_destructive" yaml:"allow_destructive"`
	RequireApproval  []string          `json:"require_approval" yaml:"require_approval"`
	// AssumeNotDestructive: see ServerConfig.
	AssumeNotDestructive bool      `json:"assume_not_destructive" yaml:"assume_not_destructive"`
	Auth                 *fileAuth `json:"auth" yaml:"auth"`
}

// fileAuth is the on-disk shape of ServerConfig.Auth.
type fileAuth struct {
	Type                    string   `json:"type" yaml:"type"`
	Scopes                  []string `json:"scopes" yaml:"scopes"`
	ClientID                string   `json:"client_id" yaml:"client_id"`
	ClientSecret            string   `json:"client_secret" yaml:"client_secret"`
	ClientMetadataURL       string   `json:"client_metadata_url" yaml:"client_metadata_url"`
	TokenEndpointAuthMethod string   `json:"token_endpoint_auth_method" yaml:"token_endpoint_auth_method"`
	PrivateKey              string   `json:"private_key" yaml:"private_key"`
	SigningAlg              string   `json:"signing_alg" yaml:"signing_alg"`
	Secret                  string   `json:"secret" yaml:"secret"`
}

type fileConfig struct {
	Servers []fileServer `json:"servers" yaml:"servers"`
}

// LoadConfig reads {"servers": [...]} from a JSON (.json) or YAML (.yaml,
// .yml, or anything else) file. Unknown fields are errors, so that a typo in
// "allow_destructive" cannot silently change what runs.
func LoadConfig(path string) ([]ServerConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("mcp config: %w", err)
	}
	return ParseConfig(path, data)
}

// ParseConfig parses a configuration document; name is used in errors and,
// when it ends in .json, selects strict JSON (else YAML, a superset of
// JSON). The execute Lambda reads its server list this way from an
// environment variable or an SSM parameter.
func ParseConfig(name string, data []byte) ([]ServerConfig, error) {
	path := name
	var fc fileConfig
	if strings.EqualFold(filepath.Ext(path), ".json") {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&fc); err != nil {
			return nil, fmt.Errorf("mcp config %s: %w", path, err)
		}
	} else {
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&fc); err != nil {
			return nil, fmt.Errorf("mcp config %s: %w", path, err)
		}
	}
	cfgs := make([]ServerConfig, 0, len(fc.Servers))
	for i, fs := range fc.Servers {
		c := ServerConfig{
			Name: fs.Name, URL: fs.URL, Transport: fs.Transport, Headers: fs.Headers,
			Allow: fs.Allow, Deny: fs.Deny, AllowDestructive: fs.AllowDestructive,
			RequireApproval: fs.RequireApproval, AssumeNotDestructive: fs.AssumeNotDestructive,
		}
		if a := fs.Auth; a != nil {
			c.Auth = oauthclient.Config{Type: a.Type, Scopes: a.Scopes, ClientID: a.ClientID, ClientSecret: a.ClientSecret,
				ClientMetadataURL: a.ClientMetadataURL, TokenEndpointAuthMethod: a.TokenEndpointAuthMethod,
				PrivateKey: a.PrivateKey, SigningAlg: a.SigningAlg, Secret: a.Secret}
			if c.Auth.Type == "auto" {
				c.Auth.Type = oauthclient.TypeAuto
			}
		}
		if fs.CallTimeout != "" {
			d, err := time.ParseDuration(fs.CallTimeout)
			if err != nil {
				return nil, fmt.Errorf("mcp config %s: servers[%d] (%q): call_timeout: %w", path, i, fs.Name, err)
			}
			c.CallTimeout = d
		}
		if fs.ConnectTimeout != "" {
			d, err := time.ParseDuration(fs.ConnectTimeout)
			if err != nil {
				return nil, fmt.Errorf("mcp config %s: servers[%d] (%q): connect_timeout: %w", path, i, fs.Name, err)
			}
			c.ConnectTimeout = d
		}
		cfgs = append(cfgs, c)
	}
	if err := validateConfigs(cfgs); err != nil {
		return nil, fmt.Errorf("mcp config %s: %w", path, err)
	}
	return cfgs, nil
}

// requiresApproval reports whether the require_approval list names tool,
// in any case.
func (c ServerConfig) requiresApproval(tool string) bool {
	return catalog.MatchAnyToolGlob(c.RequireApproval, tool)
}

// refusal says why the allow/deny lists hide a tool, "" when they let it
// through.
func (c ServerConfig) refusal(tool string) string { return catalog.Refusal(c.Allow, c.Deny, tool) }
