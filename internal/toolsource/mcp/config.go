package mcp

import (
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/pml-sandbox/pml/internal/oauthclient"
	"github.com/pml-sandbox/pml/internal/redact"
	"github.com/pml-sandbox/pml/internal/secretref"
	"github.com/pml-sandbox/pml/internal/toolsource"
)

// Transport names accepted in Config.Transport.
const (
	// TransportAuto tries streamable HTTP first and falls back to SSE.
	TransportAuto = "auto"
	// TransportSSE is the HTTP+SSE transport of protocol 2024-11-05.
	TransportSSE = "sse"
	// TransportStreamable is the streamable HTTP transport of 2025-03-26 on.
	TransportStreamable = "streamable"
)

// redacted stands in for header values and URL credentials wherever a
// config is printed; the same mask as the redactors', so that one search
// of the logs finds both.
const redacted = redact.Mask

// Config describes one remote MCP server: the common block (name,
// allow/deny globs over tool names, allow_destructive, require_approval,
// call_timeout, headers) and the protocol's own fields. Header values may
// reference secrets (internal/secretref); references are resolved at
// connect time, so that rotated secrets are picked up on reconnect, and a
// Secrets Manager secret again when the server refuses it (401, 403);
// values are never logged or printed.
type Config struct {
	toolsource.Config
	// URL is the endpoint: ".../sse" for SSE, ".../mcp" for streamable HTTP.
	URL string
	// Transport is "auto" (the default), "sse" or "streamable".
	Transport string
	// ConnectTimeout bounds one connect attempt to this server (stream
	// set-up, discover or initialize, the first tools/list; an OAuth
	// exchange gets three times it); zero means the Kind's
	// (Kind.ConnectTimeout). For a server known to be slow to answer at
	// first.
	ConnectTimeout time.Duration
	// AssumeNotDestructive is the deployment's word for a server that
	// under-annotates: a tool of it that does not say whether it is
	// destructive (no destructiveHint, and not readOnlyHint) is taken as
	// not destructive, where MCP's defaults make it destructive. What a
	// tool does say stands.
	AssumeNotDestructive bool
	// Auth is the server's OAuth configuration (oauthclient.Config):
	// ClientSecret and PrivateKey may reference secrets as headers do,
	// resolved when the server is opened. The zero value (TypeAuto)
	// engages the authorization-code grant only when the server
	// challenges with Bearer and no Authorization header is configured.
	Auth oauthclient.Config
}

// Base implements toolsource.Spec.
func (c Config) Base() toolsource.Config {
	b := c.Config
	b.Type = Type
	return b
}

// OAuth reports whether the client answers this server's Bearer challenges
// itself: not with auth type none, nor in auto mode when a configured
// Authorization header is the auth.
func (c Config) OAuth() bool {
	switch c.Auth.Type {
	case oauthclient.TypeNone:
		return false
	case oauthclient.TypeAuto:
		return !c.HasHeader("Authorization")
	}
	return true
}

// String prints the config with header values and URL passwords redacted.
func (c Config) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s=%s (transport=%s", c.Name, redact.URL(c.URL), c.transport())
	if len(c.Headers) > 0 {
		fmt.Fprintf(&b, " headers=%s", strings.Join(c.HeaderNames(), ","))
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
	if c.IdempotencyKeys {
		b.WriteString(" idempotency_keys")
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
func (c Config) LogValue() slog.Value {
	headers := make([]slog.Attr, 0, len(c.Headers))
	for _, k := range c.HeaderNames() {
		headers = append(headers, slog.String(k, redacted))
	}
	return slog.GroupValue(
		slog.String("name", c.Name),
		slog.String("url", redact.URL(c.URL)),
		slog.String("transport", c.transport()),
		slog.Attr{Key: "headers", Value: slog.GroupValue(headers...)},
		slog.Duration("call_timeout", c.Timeout()),
		slog.Any("allow", c.Allow),
		slog.Any("deny", c.Deny),
		slog.Bool("allow_destructive", c.AllowDestructive),
		slog.Any("require_approval", c.RequireApproval),
		slog.Bool("assume_not_destructive", c.AssumeNotDestructive),
		slog.Bool("idempotency_keys", c.IdempotencyKeys),
		slog.String("auth", oauthclient.TypeName(c.Auth.Type)),
	)
}

// GoString keeps %#v from printing header values either.
func (c Config) GoString() string { return "mcp.Config{" + c.String() + "}" }

func (c Config) transport() string {
	if c.Transport == "" {
		return TransportAuto
	}
	return c.Transport
}

// secrets lists what the config holds that must never be shown: header
// values without secret references (resolved values are added at connect
// time, see secretref.HeaderSecrets), the URL's userinfo and every query value, both
// decoded and as written.
func (c Config) secrets() []string {
	var out []string
	for _, v := range c.Headers {
		if !secretref.Has(v) {
			out = append(out, secretref.HeaderSecrets(v)...)
		}
	}
	out = append(out, c.Auth.Literals()...)
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
func (c Config) Validate() error {
	if err := c.Config.Validate(); err != nil {
		return err
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
		return fmt.Errorf("server %q: URL %q must be absolute http(s)", c.Name, redact.URL(c.URL))
	}
	switch c.transport() {
	case TransportAuto, TransportSSE, TransportStreamable:
	default:
		return fmt.Errorf("server %q: unknown transport %q (want auto, sse or streamable)", c.Name, c.Transport)
	}
	if c.ConnectTimeout < 0 {
		return fmt.Errorf("server %q: negative connect timeout", c.Name)
	}
	if err := c.Auth.Validate(); err != nil {
		return fmt.Errorf("server %q: auth: %w", c.Name, err)
	}
	for name, v := range map[string]string{"client_secret": c.Auth.ClientSecret, "private_key": c.Auth.PrivateKey} {
		if err := secretref.Check(v); err != nil {
			return fmt.Errorf("server %q: auth: %s: %w", c.Name, name, err)
		}
	}
	if (c.Auth.Type == oauthclient.TypeOAuth || c.Auth.Type == oauthclient.TypeClientCredentials) && c.HasHeader("Authorization") {
		return fmt.Errorf("server %q: auth %s and an Authorization header: choose one", c.Name, c.Auth.Type)
	}
	return nil
}

// ParseServerFlag parses the `--mcp NAME=URL` form: transport auto, and
// AllowDestructive set, because the flag is the operator's own command line
// and mcp-go servers mark every tool destructiveHint=true unless told
// otherwise (the MCP default); the request's allow_destructive remains the
// gate. A config file can say allow_destructive: false.
func ParseServerFlag(s string) (Config, error) {
	name, rawURL, ok := strings.Cut(s, "=")
	if !ok {
		return Config{}, fmt.Errorf("--mcp %q: want NAME=URL", s)
	}
	c := Config{Config: toolsource.Config{Name: strings.TrimSpace(name), AllowDestructive: true},
		URL: strings.TrimSpace(rawURL), Transport: TransportAuto}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("--mcp: %w", err)
	}
	return c, nil
}

// entry is the on-disk shape of one server in the server list: the
// common block and the protocol's fields. Durations are strings ("30s")
// so that files stay readable.
type entry struct {
	toolsource.Fields `yaml:",inline"`
	URL               string `yaml:"url"`
	Transport         string `yaml:"transport"`
	ConnectTimeout    string `yaml:"connect_timeout"`
	// AssumeNotDestructive: see Config.
	AssumeNotDestructive bool `yaml:"assume_not_destructive"`
	// Auth is decoded on its own, as strictly as the entry (zero when
	// absent).
	Auth yaml.Node `yaml:"auth"`
}

// decode reads one entry of the server list, strictly (an unknown field,
// in the entry or its auth, is an error, so that a typo in
// "allow_destructive" cannot silently change what runs), and validates
// it.
func decode(n *yaml.Node) (Config, error) {
	var e entry
	if err := toolsource.DecodeEntry(n, &e); err != nil {
		return Config{}, err
	}
	common, err := e.Fields.Config()
	if err != nil {
		return Config{}, err
	}
	c := Config{Config: common, URL: e.URL, Transport: e.Transport, AssumeNotDestructive: e.AssumeNotDestructive}
	if c.ConnectTimeout, err = toolsource.Duration(e.Name, "connect_timeout", e.ConnectTimeout); err != nil {
		return Config{}, err
	}
	if e.Auth.Kind != 0 && e.Auth.Tag != "!!null" {
		var a oauthclient.Fields
		if err := toolsource.DecodeEntry(&e.Auth, &a); err != nil {
			return Config{}, fmt.Errorf("server %q: auth: %w", e.Name, err)
		}
		c.Auth = a.Config()
	}
	return c, c.Validate()
}
