// Package authorizer verifies the bearer tokens of the streaming REST
// API's callers when the deployment authenticates with JWT: a REST API has
// no JWT authorizer of its own (the HTTP API's checks the issuer and
// audiences itself), so a Lambda authorizer (the authorize function) does
// what that one does. It finds the issuer's keys through OpenID discovery
// (<issuer>/.well-known/openid-configuration names its jwks_uri), verifies
// the token's signature with them (asymmetric algorithms only), its issuer,
// its audience (aud, or a Cognito access token's client_id, against the
// accepted audiences), its expiry and not-before time, and answers API
// Gateway with a policy allowing the API and the token's issuer and
// subject, which the execute function makes the caller's principal
// ("jwt:<iss>#<sub>", as behind the HTTP API).
//
// Keys are read with github.com/MicahParks/keyfunc (over jwkset): cached,
// refreshed hourly and when a token names a key the set lacks (at most
// every 5 minutes), and verified with github.com/golang-jwt/jwt.
package authorizer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/aws/aws-lambda-go/events"
	"github.com/golang-jwt/jwt/v5"
)

// The authorize function's environment (template.yaml sets both).
const (
	EnvIssuer   = "PML_JWT_ISSUER"   // the accepted JWT issuer
	EnvAudience = "PML_JWT_AUDIENCE" // the accepted audiences, comma-separated
)

// Config says what tokens are accepted.
type Config struct {
	// Issuer is the identity provider's issuer URL (JwtIssuer): https, or
	// http on a loopback address (tests).
	Issuer string
	// Audiences are the accepted audiences (JwtAudience): a token's aud,
	// or its client_id, must be one of them.
	Audiences []string
	// Client reads the issuer's documents (default: a client with a 10 s
	// timeout).
	Client *http.Client
	Logger *slog.Logger
}

// ParseAudiences splits JwtAudience's comma-separated list.
func ParseAudiences(list string) []string {
	var out []string
	for _, a := range strings.Split(list, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// Verifier checks tokens. It is safe for concurrent use; Close stops its
// key refreshes.
type Verifier struct {
	cfg    Config
	ctx    context.Context
	stop   context.CancelFunc
	mu     sync.Mutex
	keys   keyfunc.Keyfunc
	parser *jwt.Parser
}

// ErrUnauthorized is every refusal: API Gateway answers 401 when an
// authorizer fails with exactly "Unauthorized".
var ErrUnauthorized = errors.New("Unauthorized")

// New returns a Verifier for cfg. The issuer's documents are read on the
// first token, so a cold start does not wait for them.
func New(cfg Config) (*Verifier, error) {
	u, err := url.Parse(cfg.Issuer)
	if err != nil || u.Host == "" || (u.Scheme != "https" && !(u.Scheme == "http" && loopback(u.Hostname()))) {
		return nil, fmt.Errorf("the JWT issuer %q is not an https URL", cfg.Issuer)
	}
	if len(cfg.Audiences) == 0 {
		return nil, errors.New("no JWT audience is accepted: set JwtAudience")
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ctx, stop := context.WithCancel(context.Background())
	return &Verifier{cfg: cfg, ctx: ctx, stop: stop, parser: jwt.NewParser(
		jwt.WithIssuer(cfg.Issuer),
		jwt.WithExpirationRequired(),
		jwt.WithLeeway(30*time.Second),
		// Asymmetric only: an HMAC token "signed" with a public key must
		// never pass.
		jwt.WithValidMethods([]string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}),
	)}, nil
}

func loopback(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}

// Close stops the key set's refreshes.
func (v *Verifier) Close() { v.stop() }

// keySet returns the issuer's keys, found through OpenID discovery the
// first time.
func (v *Verifier) keySet(ctx context.Context) (keyfunc.Keyfunc, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.keys != nil {
		return v.keys, nil
	}
	doc := strings.TrimSuffix(v.cfg.Issuer, "/") + "/.well-known/openid-configuration"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, doc, nil)
	if err != nil {
		return nil, err
	}
	resp, err := v.cfg.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", doc, err)
	}
	defer resp.Body.Close()
	var meta struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("reading %s: %s", doc, resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&meta); err != nil {
		return nil, fmt.Errorf("reading %s: %w", doc, err)
	}
	if meta.Issuer != v.cfg.Issuer || meta.JWKSURI == "" {
		return nil, fmt.Errorf("%s names issuer %q and keys %q: not issuer %q's", doc, meta.Issuer, meta.JWKSURI, v.cfg.Issuer)
	}
	keys, err := keyfunc.NewDefaultOverrideCtx(v.ctx, []string{meta.JWKSURI}, keyfunc.Override{Client: v.cfg.Client,
		RefreshErrorHandlerFunc: func(u string) func(context.Context, error) {
			return func(ctx context.Context, err error) {
				v.cfg.Logger.WarnContext(ctx, "JWKS refresh failed", "url", u, "err", err)
			}
		}})
	if err != nil {
		return nil, fmt.Errorf("reading the keys at %s: %w", meta.JWKSURI, err)
	}
	v.keys = keys
	return keys, nil
}

// Identity is who a verified token names.
type Identity struct {
	Issuer, Subject string
}

// Verify checks token and returns who it names, or ErrUnauthorized
// (wrapping why, for the log).
func (v *Verifier) Verify(ctx context.Context, token string) (Identity, error) {
	keys, err := v.keySet(ctx)
	if err != nil {
		return Identity{}, fmt.Errorf("%w: %w", ErrUnauthorized, err)
	}
	claims := jwt.MapClaims{}
	if _, err := v.parser.ParseWithClaims(token, claims, keys.KeyfuncCtx(ctx)); err != nil {
		return Identity{}, fmt.Errorf("%w: %w", ErrUnauthorized, err)
	}
	aud, _ := claims.GetAudience()
	clientID, _ := claims["client_id"].(string)
	if !slices.ContainsFunc(v.cfg.Audiences, func(a string) bool { return slices.Contains(aud, a) || a == clientID }) {
		return Identity{}, fmt.Errorf("%w: audience %v (client_id %q) is not accepted", ErrUnauthorized, aud, clientID)
	}
	sub, _ := claims.GetSubject()
	if sub == "" {
		return Identity{}, fmt.Errorf("%w: the token names no subject", ErrUnauthorized)
	}
	return Identity{Issuer: v.cfg.Issuer, Subject: sub}, nil
}

// Handler is the authorize function's handler: a TOKEN authorizer. A
// verified token gets a policy allowing every method of the API's stage
// (API Gateway caches it by token for the authorizer's TTL, for all of
// them) and its issuer and subject as context; anything else is 401.
func Handler(v *Verifier) func(ctx context.Context, req events.APIGatewayCustomAuthorizerRequest) (events.APIGatewayCustomAuthorizerResponse, error) {
	return func(ctx context.Context, req events.APIGatewayCustomAuthorizerRequest) (events.APIGatewayCustomAuthorizerResponse, error) {
		scheme, token, ok := strings.Cut(req.AuthorizationToken, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
			v.cfg.Logger.InfoContext(ctx, "refused", "reason", "no bearer token")
			return events.APIGatewayCustomAuthorizerResponse{}, ErrUnauthorized
		}
		id, err := v.Verify(ctx, strings.TrimSpace(token))
		if err != nil {
			v.cfg.Logger.InfoContext(ctx, "refused", "reason", err.Error())
			return events.APIGatewayCustomAuthorizerResponse{}, ErrUnauthorized
		}
		return events.APIGatewayCustomAuthorizerResponse{
			PrincipalID: id.Subject,
			PolicyDocument: events.APIGatewayCustomAuthorizerPolicy{Version: "2012-10-17", Statement: []events.IAMPolicyStatement{
				{Action: []string{"execute-api:Invoke"}, Effect: "Allow", Resource: []string{stageResource(req.MethodArn)}}}},
			Context: map[string]any{"iss": id.Issuer, "sub": id.Subject},
		}, nil
	}
}

// stageResource is every method of the stage methodArn is in:
// arn:…:execute-api:region:account:api/stage/METHOD/path → …/api/stage/*.
func stageResource(methodArn string) string {
	arn, rest, ok := strings.Cut(methodArn, ":execute-api:")
	if !ok {
		return methodArn
	}
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) < 2 {
		return methodArn
	}
	return arn + ":execute-api:" + parts[0] + "/" + parts[1] + "/*"
}
