package authorizer_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/golang-jwt/jwt/v5"
	"go.uber.org/goleak"

	"github.com/pml-sandbox/pml/internal/authorizer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// issuer is an OpenID provider on loopback: discovery and a JWKS with one
// RSA key (kid "r1"); it signs tokens.
type issuer struct {
	url  string
	key  *rsa.PrivateKey
	hits int
}

func newIssuer(t *testing.T) *issuer {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	is := &issuer{key: key}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		is.hits++
		_ = json.NewEncoder(w).Encode(map[string]string{"issuer": is.url, "jwks_uri": is.url + "/jwks.json"})
	})
	mux.HandleFunc("GET /jwks.json", func(w http.ResponseWriter, _ *http.Request) {
		b64 := base64.RawURLEncoding.EncodeToString
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": []any{map[string]string{
			"kty": "RSA", "kid": "r1", "use": "sig", "alg": "RS256",
			"n": b64(key.N.Bytes()), "e": b64(big.NewInt(int64(key.E)).Bytes())}}})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	is.url = srv.URL
	return is
}

func (is *issuer) sign(t *testing.T, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
	tok.Header["kid"] = "r1"
	s, err := tok.SignedString(is.key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (is *issuer) claims(mod func(jwt.MapClaims)) jwt.MapClaims {
	c := jwt.MapClaims{"iss": is.url, "sub": "agent-7", "aud": "app-client", "exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix()}
	if mod != nil {
		mod(c)
	}
	return c
}

const methodArn = "arn:aws:execute-api:eu-west-1:123456789012:abc123/v1/POST/execute"

// TestAuthorizer: exactly the tokens the HTTP API's JWT authorizer would
// accept pass, with the stage's methods allowed and the issuer and subject
// handed on; every other is 401.
func TestAuthorizer(t *testing.T) {
	is := newIssuer(t)
	v, err := authorizer.New(authorizer.Config{Issuer: is.url, Audiences: authorizer.ParseAudiences(" app-client , other "), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	h := authorizer.Handler(v)
	stranger, _ := rsa.GenerateKey(rand.Reader, 2048)
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	signWith := func(method jwt.SigningMethod, key any, kid string, c jwt.MapClaims) string {
		tok := jwt.NewWithClaims(method, c)
		tok.Header["kid"] = kid
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	pub, _ := json.Marshal(is.key.Public())
	tests := []struct {
		name, header string
		ok           bool
	}{
		{"valid", "Bearer " + is.sign(t, is.claims(nil)), true},
		{"lower-case scheme", "bearer " + is.sign(t, is.claims(nil)), true},
		{"another accepted audience in a list", "Bearer " + is.sign(t, is.claims(func(c jwt.MapClaims) { c["aud"] = []string{"x", "other"} })), true},
		{"a Cognito access token's client_id", "Bearer " + is.sign(t, is.claims(func(c jwt.MapClaims) { delete(c, "aud"); c["client_id"] = "app-client" })), true},
		{"no scheme", is.sign(t, is.claims(nil)), false},
		{"empty", "", false},
		{"basic auth", "Basic YWxhZGRpbjpvcGVuc2VzYW1l", false},
		{"another audience", "Bearer " + is.sign(t, is.claims(func(c jwt.MapClaims) { c["aud"] = "someone-else" })), false},
		{"another issuer", "Bearer " + is.sign(t, is.claims(func(c jwt.MapClaims) { c["iss"] = "https://evil.example" })), false},
		{"expired", "Bearer " + is.sign(t, is.claims(func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Hour).Unix() })), false},
		{"no expiry", "Bearer " + is.sign(t, is.claims(func(c jwt.MapClaims) { delete(c, "exp") })), false},
		{"not yet valid", "Bearer " + is.sign(t, is.claims(func(c jwt.MapClaims) { c["nbf"] = time.Now().Add(time.Hour).Unix() })), false},
		{"no subject", "Bearer " + is.sign(t, is.claims(func(c jwt.MapClaims) { delete(c, "sub") })), false},
		{"signed by another key", "Bearer " + signWith(jwt.SigningMethodRS256, stranger, "r1", is.claims(nil)), false},
		{"an unknown key", "Bearer " + signWith(jwt.SigningMethodES256, ec, "e9", is.claims(nil)), false},
		{"HMAC with the public key as secret", "Bearer " + signWith(jwt.SigningMethodHS256, pub, "r1", is.claims(nil)), false},
		{"alg none", "Bearer " + signWith(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "r1", is.claims(nil)), false},
		{"garbage", "Bearer not.a.jwt", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := h(context.Background(), events.APIGatewayCustomAuthorizerRequest{Type: "TOKEN", AuthorizationToken: tc.header, MethodArn: methodArn})
			if !tc.ok {
				if err == nil || err.Error() != "Unauthorized" {
					t.Fatalf("accepted: %+v %v", resp, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			st := resp.PolicyDocument.Statement
			if resp.PrincipalID != "agent-7" || resp.Context["iss"] != is.url || resp.Context["sub"] != "agent-7" || len(st) != 1 || st[0].Effect != "Allow" ||
				strings.Join(st[0].Resource, ",") != "arn:aws:execute-api:eu-west-1:123456789012:abc123/v1/*" {
				t.Fatalf("%+v", resp)
			}
		})
	}
	if is.hits != 1 {
		t.Errorf("discovery read %d times, want once", is.hits)
	}
}

// TestConfig: the issuer must be https (http on loopback for tests), and
// some audience accepted; a discovery document naming another issuer is
// refused.
func TestConfig(t *testing.T) {
	for _, c := range []authorizer.Config{
		{Issuer: "http://idp.example", Audiences: []string{"a"}},
		{Issuer: "not a url", Audiences: []string{"a"}},
		{Issuer: "https://idp.example"},
	} {
		if v, err := authorizer.New(c); err == nil {
			v.Close()
			t.Errorf("%+v accepted", c)
		}
	}
	is := newIssuer(t)
	v, err := authorizer.New(authorizer.Config{Issuer: is.url + "/", Audiences: []string{"app-client"}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if _, err := v.Verify(context.Background(), is.sign(t, is.claims(nil))); !errors.Is(err, authorizer.ErrUnauthorized) || !strings.Contains(err.Error(), "not issuer") {
		t.Fatalf("a discovery document of another issuer: %v", err)
	}
}
