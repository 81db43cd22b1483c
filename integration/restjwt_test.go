package integration

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/golang-jwt/jwt/v5"

	jwtauthorizer "github.com/pml-sandbox/pml/internal/authorizer"
	"github.com/pml-sandbox/pml/internal/testutil/lambdaemu"
)

// TestStreamingAPIWithJWT is AuthMode=JWT on the streaming REST API: the
// real authorize function, behind the Lambda emulator, verifies each
// bearer token against an OpenID provider on loopback (discovery and its
// JWKS), as API Gateway's TOKEN authorizer calls it; the execute function
// makes the token's issuer and subject the caller: its executions are its
// own.
func TestStreamingAPIWithJWT(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	var issuer string
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]string{"issuer": issuer, "jwks_uri": issuer + "/jwks"})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, _ *http.Request) {
		b64 := base64.RawURLEncoding.EncodeToString
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": []any{map[string]string{"kty": "RSA", "kid": "k1", "alg": "RS256",
			"n": b64(key.N.Bytes()), "e": b64(big.NewInt(int64(key.E)).Bytes())}}})
	})
	idp := httptest.NewServer(mux)
	t.Cleanup(idp.Close)
	issuer = idp.URL
	token := func(sub, aud string) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"iss": issuer, "sub": sub, "aud": aud, "exp": time.Now().Add(time.Hour).Unix()})
		tok.Header["kid"] = "k1"
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return "Bearer " + s
	}

	authorize := lambdaemu.Function{Name: "authorize", Binary: bins.authorize, Timeout: 10 * time.Second,
		Env: []string{jwtauthorizer.EnvIssuer + "=" + issuer, jwtauthorizer.EnvAudience + "=pml-app, other"}}
	s := longStack(t, nil, authorize)
	// API Gateway's TOKEN authorizer: the Authorization header goes to the
	// authorize function; an error is 401, an allow policy passes its
	// context on as requestContext.authorizer.
	base := s.restGateway(t, func(r *http.Request) (map[string]any, bool) {
		ev, _ := json.Marshal(events.APIGatewayCustomAuthorizerRequest{Type: "TOKEN", AuthorizationToken: r.Header.Get("Authorization"),
			MethodArn: "arn:aws:execute-api:us-east-1:123456789012:api1/v1/" + r.Method + r.URL.Path})
		out, fnErr, err := s.emu.Invoke(r.Context(), "authorize", ev)
		if err != nil || fnErr {
			return nil, false
		}
		var resp events.APIGatewayCustomAuthorizerResponse
		if json.Unmarshal(out, &resp) != nil || len(resp.PolicyDocument.Statement) != 1 || resp.PolicyDocument.Statement[0].Effect != "Allow" {
			return nil, false
		}
		ctx := map[string]any{"principalId": resp.PrincipalID}
		for k, v := range resp.Context {
			ctx[k] = v
		}
		return ctx, true
	})
	call := func(method, path, auth, body string) (int, runDoc) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusUnauthorized {
			resp.Body.Close()
			return resp.StatusCode, runDoc{}
		}
		return resp.StatusCode, decodeDoc(t, resp)
	}

	agent, other := token("agent-7", "pml-app"), token("someone", "other")
	for name, auth := range map[string]string{"no token": "", "another audience": token("agent-7", "elsewhere"), "garbage": "Bearer x.y.z"} {
		if status, _ := call("POST", "/execute", auth, `{"code": "return 1"}`); status != http.StatusUnauthorized {
			t.Errorf("%s: %d, want 401", name, status)
		}
	}
	status, d := call("POST", "/execute", agent, `{"code": "await mcp.text.sleep({ms: 300}); return 'mine'", "async": true}`)
	if status != 202 || d.ExecutionID == "" {
		t.Fatalf("POST as the agent: %d %+v", status, d)
	}
	if status, _ := call("GET", "/executions/"+d.ExecutionID, other, ""); status != 404 {
		t.Fatalf("another subject read it: %d", status)
	}
	// As for an unknown id: another principal learns nothing of it.
	if status, _ := call("DELETE", "/executions/"+d.ExecutionID, other, ""); status != 404 {
		t.Fatalf("another subject cancelled it: %d", status)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		status, got := call("GET", "/executions/"+d.ExecutionID, agent, "")
		if status != 200 || time.Now().After(deadline) {
			t.Fatalf("GET as the agent: %d %+v", status, got)
		}
		if got.Status != "running" {
			if got.Status != "completed" || string(got.Result) != `"mine"` {
				t.Fatalf("final %+v", got)
			}
			break
		}
	}
	// A streamed answer through the authorizer.
	req, _ := http.NewRequestWithContext(context.Background(), "POST", base+"/execute", strings.NewReader(`{"code": "await mcp.text.sleep({ms: 100}); return 2"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", agent)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events := readSSE(resp.Body)
	if len(events) != 3 || events[2].name != "result" || !strings.Contains(events[2].data, `"result":2`) {
		t.Fatalf("stream %s %+v", fmt.Sprint(resp.StatusCode), events)
	}
}
