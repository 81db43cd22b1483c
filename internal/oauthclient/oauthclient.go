// Package oauthclient is the OAuth 2.1 client of every HTTP tool source (MCP servers, OpenAPI services), as the MCP
// authorization specification (2025-11-25) asks of a client: it reads the
// protected resource's challenge (WWW-Authenticate, RFC 9728), discovers
// the authorization server (RFC 8414 or OpenID Connect discovery),
// registers the client (pre-registered, client ID metadata document, or
// dynamic registration, RFC 7591), runs the authorization-code grant with
// PKCE S256 and resource indicators (RFC 8707) through a loopback redirect
// (RFC 8252), refreshes tokens, steps up scopes on insufficient_scope, and
// runs the client-credentials grant with a client secret or a signed JWT
// assertion (RFC 7523).
//
// A Source holds one server's credentials and hands out access tokens;
// Transport puts them on every request to the server and answers the
// server's challenges. Credentials persist in a Store: a file in the
// user's data directory (mode 0600), or an AWS Secrets Manager secret that
// several Lambda containers share, written with a version check so that
// concurrent refreshes never lose a rotated refresh token.
//
// What is taken from libraries: golang.org/x/oauth2 builds the
// authorization URL, makes PKCE verifiers and S256 challenges, and makes
// every token request (code exchange, refresh, client credentials through
// its clientcredentials package) in the client authentication style the
// server supports; github.com/golang-jwt/jwt signs client assertions;
// mcp-go supplies the authorization server metadata type. What is written
// here is what they leave out: mcp-go v1.2.1's OAuthHandler discovers only
// the path-inserted resource metadata (not the root one MCP 2025-11-25
// asks for next), selects no scopes from the challenge or
// scopes_supported, has no step-up, no client ID metadata documents and
// no client credentials, and its transport turns a 401 into an error
// without the challenge's scope and a 403 into a plain HTTP error; so the
// challenge handling sits in an http.RoundTripper under mcp-go's
// transports instead. x/oauth2's refresh sends no resource parameter, so
// its HTTP client adds one.
//
// Nothing here logs or returns a token, secret, code or assertion: each
// is handed to Options.AddSecret before it is sent anywhere, so the
// caller's redactor masks it wherever a server or library quotes it.
package oauthclient

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
)

// protocolVersion is sent with metadata requests, which come before any
// MCP handshake.
const protocolVersion = "2025-11-25"

// Auth types of a server (Config.Type).
const (
	// TypeAuto: OAuth with the authorization-code grant once the server
	// asks for it (a Bearer challenge), using credentials stored by a
	// login; nothing until then.
	TypeAuto = ""
	// TypeNone: never OAuth (static headers, if any, are the auth).
	TypeNone = "none"
	// TypeOAuth: the authorization-code grant; a person logs in once
	// (pml mcp login) and the refresh token is stored.
	TypeOAuth = "oauth"
	// TypeClientCredentials: the client-credentials grant, with a client
	// secret or a private key signing JWT assertions.
	TypeClientCredentials = "client_credentials"
)

// TypeName names an auth type for people: "auto" for TypeAuto.
func TypeName(t string) string {
	if t == TypeAuto {
		return "auto"
	}
	return t
}

// Client authentication methods at the token endpoint.
const (
	AuthNone          = "none"
	AuthSecretBasic   = "client_secret_basic"
	AuthSecretPost    = "client_secret_post"
	AuthPrivateKeyJWT = "private_key_jwt"
)

// Config is one server's auth configuration. Secret values (ClientSecret,
// PrivateKey) arrive resolved.
type Config struct {
	Type string
	// Scopes are requested besides those the server asks for.
	Scopes []string
	// ClientID and ClientSecret are a pre-registered client.
	ClientID     string
	ClientSecret string
	// ClientMetadataURL is an HTTPS URL serving this client's metadata
	// document, used as client_id where the server supports it.
	ClientMetadataURL string
	// TokenEndpointAuthMethod overrides the method chosen from the
	// server's metadata.
	TokenEndpointAuthMethod string
	// PrivateKey is a PEM private key (PKCS#8, SEC 1 or PKCS#1) signing
	// client assertions (private_key_jwt); SigningAlg names the algorithm
	// (default: ES256 for P-256 keys, RS256 for RSA, EdDSA for Ed25519).
	PrivateKey string
	SigningAlg string
	// Secret is the ARN of the AWS Secrets Manager secret holding the
	// credentials, else they are in the user's data directory.
	Secret string
}

// Validate checks the fields that do not depend on the server.
func (c Config) Validate() error {
	switch c.Type {
	case TypeAuto, TypeNone, TypeOAuth, TypeClientCredentials:
	default:
		return fmt.Errorf("unknown auth type %q (want none, oauth or client_credentials)", c.Type)
	}
	switch c.TokenEndpointAuthMethod {
	case "", AuthNone, AuthSecretBasic, AuthSecretPost, AuthPrivateKeyJWT:
	default:
		return fmt.Errorf("unknown token_endpoint_auth_method %q", c.TokenEndpointAuthMethod)
	}
	if c.Type == TypeNone && (c.ClientID != "" || c.ClientSecret != "" || c.Secret != "" || c.PrivateKey != "") {
		return errors.New("auth type none takes no client or secret")
	}
	if c.ClientMetadataURL != "" && !strings.HasPrefix(c.ClientMetadataURL, "https://") {
		return fmt.Errorf("client_metadata_url %q must be an https URL", c.ClientMetadataURL)
	}
	if c.Secret != "" && !strings.HasPrefix(c.Secret, "arn:") {
		return fmt.Errorf("secret %q must be a Secrets Manager ARN", c.Secret)
	}
	for _, s := range c.Scopes {
		if s == "" || strings.ContainsAny(s, " \t\"\\") {
			return fmt.Errorf("invalid scope %q", s)
		}
	}
	return nil
}

// Credentials is what a Store keeps for one server. It is the document in
// the credentials file or the secret; tokens and keys in it are secrets,
// which String and LogValue never print.
type Credentials struct {
	// Server and URL bind the credentials to the server they were made
	// for: a config that points the name elsewhere does not get them.
	Server string `json:"server"`
	URL    string `json:"url"`
	// Resource is the RFC 8707 resource indicator the tokens are for.
	Resource      string `json:"resource,omitempty"`
	Issuer        string `json:"issuer,omitempty"`
	TokenEndpoint string `json:"token_endpoint,omitempty"`
	AuthMethod    string `json:"token_endpoint_auth_method,omitempty"`
	ClientID      string `json:"client_id,omitempty"`
	ClientSecret  string `json:"client_secret,omitempty"`
	// PrivateKey lets a secret hold a client-credentials key.
	PrivateKey   string    `json:"private_key,omitempty"`
	Scopes       []string  `json:"scopes,omitempty"`
	RefreshToken string    `json:"refresh_token,omitempty"`
	AccessToken  string    `json:"access_token,omitempty"`
	TokenType    string    `json:"token_type,omitempty"`
	Expiry       time.Time `json:"expiry,omitzero"`
	ObtainedAt   time.Time `json:"obtained_at,omitzero"`
	// Lease marks a refresh in progress: the process that wrote it trades
	// the refresh token, the others wait for its result instead of
	// trading the same token again (which a server that rotates refresh
	// tokens may take for theft and answer by revoking them all).
	Lease *Lease `json:"lease,omitempty"`
}

// Lease is a claim on the next refresh, until a time.
type Lease struct {
	By    string    `json:"by"`
	Until time.Time `json:"until"`
}

func (c *Credentials) secrets() []string {
	if c == nil {
		return nil
	}
	return []string{c.ClientSecret, c.PrivateKey, c.RefreshToken, c.AccessToken}
}

// String shows what the credentials are without any secret. Value
// receivers, so that a Credentials printed by value is masked too.
func (c Credentials) String() string {
	return fmt.Sprintf("credentials for %s (client %s, issuer %s, refresh token %v, access token %v, expiry %s)",
		c.Server, c.ClientID, c.Issuer, c.RefreshToken != "", c.AccessToken != "", c.Expiry.Format(time.RFC3339))
}

// GoString keeps %#v from printing secrets too.
func (c Credentials) GoString() string { return c.String() }

// LogValue makes slog print the credentials without secrets.
func (c Credentials) LogValue() slog.Value { return slog.StringValue(c.String()) }

// Kind says what an Error needs.
type Kind int

// Error kinds.
const (
	// LoginRequired: no usable credentials; a person must log in.
	LoginRequired Kind = iota + 1
	// StepUpRequired: the server wants scopes the credentials lack.
	StepUpRequired
	// Refused: the authorization server refused the client.
	Refused
	// StoreFailed: the credentials could not be read or written.
	StoreFailed
)

// Error is a failure to authorize with one server. Its message names the
// server and says what to do; it never holds a secret.
type Error struct {
	Server string
	Kind   Kind
	// Hint is the command that fixes it, when there is one.
	Hint string
	// Scopes are the scopes a step-up needs.
	Scopes []string
	Err    error
}

func (e *Error) Error() string {
	var b strings.Builder
	switch e.Kind {
	case LoginRequired:
		fmt.Fprintf(&b, "MCP server %q needs a login", e.Server)
	case StepUpRequired:
		fmt.Fprintf(&b, "MCP server %q asks for scope %q, which its login lacks", e.Server, strings.Join(e.Scopes, " "))
	case Refused:
		fmt.Fprintf(&b, "the authorization server of MCP server %q refused the client", e.Server)
	case StoreFailed:
		fmt.Fprintf(&b, "the credentials of MCP server %q could not be read or written", e.Server)
	}
	if e.Err != nil {
		fmt.Fprintf(&b, " (%v)", e.Err)
	}
	if e.Hint != "" {
		fmt.Fprintf(&b, ": %s", e.Hint)
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// union adds b's scopes missing from a, keeping a's order.
func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, s := range b {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// Fields is Config as a server list writes it (an entry's `auth` block):
// the same fields for every HTTP tool source, so that a kind embeds it
// (inline, beside fields of its own) instead of spelling it again.
type Fields struct {
	Type                    string   `yaml:"type"`
	Scopes                  []string `yaml:"scopes"`
	ClientID                string   `yaml:"client_id"`
	ClientSecret            string   `yaml:"client_secret"`
	ClientMetadataURL       string   `yaml:"client_metadata_url"`
	TokenEndpointAuthMethod string   `yaml:"token_endpoint_auth_method"`
	PrivateKey              string   `yaml:"private_key"`
	SigningAlg              string   `yaml:"signing_alg"`
	Secret                  string   `yaml:"secret"`
}

// Config is the written block as a Config ("auto" is TypeAuto). Validate
// checks it.
func (f Fields) Config() Config {
	c := Config(f)
	if c.Type == "auto" {
		c.Type = TypeAuto
	}
	return c
}
