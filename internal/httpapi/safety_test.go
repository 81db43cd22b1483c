package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/httpapi"
	"github.com/pml-sandbox/pml/internal/lambdaevents"
)

// hostileCase is one request a web page (or a rebinding attacker) could
// make, and what the server must answer.
type hostileCase struct {
	name, method, path string
	header             http.Header
	body               string
	status             int
	code               string // the fault code in the JSON error, "" for a success
}

// do sends tc to base and checks its status and, for a failure, the JSON
// error shape and code.
func (tc hostileCase) do(t *testing.T, base string) *http.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, tc.method, base+tc.path, strings.NewReader(tc.body))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range tc.header {
		req.Header[k] = vs
	}
	if h := tc.header.Get("Host"); h != "" {
		req.Host = h
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	if resp.StatusCode != tc.status {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, raw)
	}
	if tc.code == "" {
		return resp
	}
	var e struct {
		OK    *bool `json:"ok"`
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(raw, &e); err != nil || e.OK == nil || *e.OK || e.Error.Code != tc.code || e.Error.Message == "" {
		t.Fatalf("body %s is not a JSON error with code %s (%v)", raw, tc.code, err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("error Content-Type %q", ct)
	}
	return resp
}

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

// TestJSONBodiesOnly: a web page can POST text/plain, form or multipart
// bodies cross-site without a CORS preflight, so every POST route must
// refuse them. This holds with or without the serve guard.
func TestJSONBodiesOnly(t *testing.T) {
	srv := newServer(t)
	exec := `{"code": "return 1"}`
	mcpCall := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"execute_code","arguments":{"code":"return 1"}}}`
	tests := []hostileCase{
		{"text/plain execute", "POST", "/execute", hdr("Content-Type", "text/plain"), exec, 415, "INVALID_REQUEST"},
		{"text/plain with charset", "POST", "/execute", hdr("Content-Type", "text/plain;charset=UTF-8"), exec, 415, "INVALID_REQUEST"},
		{"form execute", "POST", "/execute", hdr("Content-Type", "application/x-www-form-urlencoded"), exec, 415, "INVALID_REQUEST"},
		{"multipart execute", "POST", "/execute", hdr("Content-Type", "multipart/form-data; boundary=x"), exec, 415, "INVALID_REQUEST"},
		{"no content type", "POST", "/execute", nil, exec, 415, "INVALID_REQUEST"},
		{"malformed content type", "POST", "/execute", hdr("Content-Type", "application/json; ="), exec, 415, "INVALID_REQUEST"},
		{"text/plain capability", "POST", "/capabilities", hdr("Content-Type", "text/plain"), `{"name": "a:b", "code": "return 1"}`, 415, "INVALID_REQUEST"},
		{"text/plain MCP call", "POST", "/mcp", hdr("Content-Type", "text/plain"), mcpCall, 415, "INVALID_REQUEST"},
		{"text/plain resume", "POST", "/executions/ex_1/resume", hdr("Content-Type", "text/plain"), `{"decisions": {"2": "approve"}}`, 415, "INVALID_REQUEST"},
		{"form resume", "POST", "/executions/ex_1/resume", hdr("Content-Type", "application/x-www-form-urlencoded"), `{"decisions": {"2": "approve"}}`, 415, "INVALID_REQUEST"},
		{"JSON", "POST", "/execute", hdr("Content-Type", "application/json"), exec, 200, ""},
		{"JSON with charset", "POST", "/execute", hdr("Content-Type", "application/json; charset=utf-8"), exec, 200, ""},
		{"JSON in capitals", "POST", "/execute", hdr("Content-Type", "Application/JSON"), exec, 200, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.do(t, srv.URL) })
	}
}

// TestGetMCPIsRefused: the endpoint is stateless and sends nothing
// unprompted, so GET /mcp must answer at once instead of holding an event
// stream open (which kept `pml serve` from shutting down).
func TestGetMCPIsRefused(t *testing.T) {
	srv := newServer(t)
	for _, method := range []string{"GET", "DELETE"} {
		tc := hostileCase{method + " /mcp", method, "/mcp", hdr("Accept", "text/event-stream"), "", 405, "INVALID_REQUEST"}
		t.Run(tc.name, func(t *testing.T) {
			resp := tc.do(t, srv.URL)
			if allow := resp.Header.Get("Allow"); allow != "POST" {
				t.Fatalf("Allow %q, want POST", allow)
			}
		})
	}
}

func newGuardedServer(t *testing.T, g *httpapi.Guard) *httptest.Server {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	svc := executor.New(engine, executor.Options{Sources: []execution.ToolSource{demoserver.Source{}}, Logger: log})
	h := httpapi.New(httpapi.Options{Service: svc, Capabilities: testCaps(t), Logger: log, Guard: g})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// TestGuard: what `pml serve` must refuse from a browser on the same
// machine (cross-site requests, DNS rebinding) and from the network
// (requests without the token), and what it must still accept.
func TestGuard(t *testing.T) {
	const token = "s3cret-token"
	srv := newGuardedServer(t, &httpapi.Guard{
		AllowedHosts:   []string{"pml.test", "API.test:8443"},
		AllowedOrigins: []string{"https://app.test"},
		Token:          token,
	})
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	exec := `{"code": "return 1"}`
	auth := "Bearer " + token
	// post is a JSON execute request with the right token plus kv.
	post := func(kv ...string) http.Header {
		return hdr(append([]string{"Content-Type", "application/json", "Authorization", auth}, kv...)...)
	}
	tests := []hostileCase{
		// DNS rebinding: the attacker's name resolves to 127.0.0.1, so the
		// browser sends its Host, and as a same-origin request no Origin.
		{"rebinding Host", "POST", "/execute", post("Host", "evil.example:"+port), exec, 403, "FORBIDDEN"},
		{"rebinding Host without port", "POST", "/execute", post("Host", "evil.example"), exec, 403, "FORBIDDEN"},
		{"rebinding Host on healthz", "GET", "/healthz", hdr("Host", "evil.example:"+port), "", 403, "FORBIDDEN"},
		{"rebinding Host on MCP", "POST", "/mcp", post("Host", "evil.example:"+port), `{}`, 403, "FORBIDDEN"},
		{"rebinding Host on unknown route", "GET", "/nowhere", hdr("Host", "evil.example"), "", 403, "FORBIDDEN"},
		{"loopback-looking name", "GET", "/healthz", hdr("Host", "localhost.evil.example"), "", 403, "FORBIDDEN"},
		{"loopback-looking IP name", "GET", "/healthz", hdr("Host", "127.0.0.1.evil.example"), "", 403, "FORBIDDEN"},
		{"allowed host on another port", "GET", "/healthz", hdr("Host", "api.test:9999"), "", 403, "FORBIDDEN"},
		// Cross-site requests carry the page's Origin.
		{"cross-site Origin", "POST", "/execute", post("Origin", "https://evil.example"), exec, 403, "FORBIDDEN"},
		{"cross-site Origin on GET", "GET", "/capabilities", hdr("Authorization", auth, "Origin", "https://evil.example"), "", 403, "FORBIDDEN"},
		{"opaque Origin", "POST", "/execute", post("Origin", "null"), exec, 403, "FORBIDDEN"},
		{"allowed origin's lookalike", "POST", "/execute", post("Origin", "https://app.test.evil.example"), exec, 403, "FORBIDDEN"},
		{"allowed origin over http", "POST", "/execute", post("Origin", "http://app.test"), exec, 403, "FORBIDDEN"},
		{"preflight from cross-site Origin", "OPTIONS", "/execute", hdr("Origin", "https://evil.example", "Access-Control-Request-Method", "POST"), "", 403, "FORBIDDEN"},
		// The token.
		{"no token", "POST", "/execute", hdr("Content-Type", "application/json"), exec, 401, "UNAUTHORIZED"},
		{"wrong token", "POST", "/execute", hdr("Content-Type", "application/json", "Authorization", "Bearer nope"), exec, 401, "UNAUTHORIZED"},
		{"token prefix", "POST", "/execute", hdr("Content-Type", "application/json", "Authorization", "Bearer s3cret"), exec, 401, "UNAUTHORIZED"},
		{"token with a suffix", "POST", "/execute", hdr("Content-Type", "application/json", "Authorization", auth+"x"), exec, 401, "UNAUTHORIZED"},
		{"token without scheme", "POST", "/execute", hdr("Content-Type", "application/json", "Authorization", token), exec, 401, "UNAUTHORIZED"},
		{"basic auth", "POST", "/execute", hdr("Content-Type", "application/json", "Authorization", "Basic czNjcmV0LXRva2Vu"), exec, 401, "UNAUTHORIZED"},
		{"no token on GET", "GET", "/tools", nil, "", 401, "UNAUTHORIZED"},
		{"no token on MCP", "POST", "/mcp", hdr("Content-Type", "application/json"), `{}`, 401, "UNAUTHORIZED"},
		{"no token on resume", "POST", "/executions/ex_1/resume", hdr("Content-Type", "application/json"), `{"decisions": {"2": "approve"}}`, 401, "UNAUTHORIZED"},
		{"rebinding Host on resume", "POST", "/executions/ex_1/resume", post("Host", "evil.example:"+port), `{"decisions": {"2": "approve"}}`, 403, "FORBIDDEN"},
		{"cross-site Origin on resume", "POST", "/executions/ex_1/resume", post("Origin", "https://evil.example"), `{"decisions": {"2": "approve"}}`, 403, "FORBIDDEN"},
		{"no token on unknown route", "GET", "/nowhere", nil, "", 401, "UNAUTHORIZED"},
		// The guard does not lift the JSON rule.
		{"text/plain with token", "POST", "/execute", hdr("Content-Type", "text/plain", "Authorization", auth), exec, 415, "INVALID_REQUEST"},
		// What must still work.
		{"right token", "POST", "/execute", post(), exec, 200, ""},
		// Past the guard: this service keeps no suspended executions.
		{"right token on resume", "POST", "/executions/ex_1/resume", post(), `{"decisions": {"2": "approve"}}`, 404, "NOT_FOUND"},
		{"scheme in lower case", "POST", "/execute", hdr("Content-Type", "application/json", "Authorization", "bearer "+token), exec, 200, ""},
		{"localhost", "POST", "/execute", post("Host", "localhost:"+port), exec, 200, ""},
		{"LOCALHOST without port", "POST", "/execute", post("Host", "LOCALHOST"), exec, 200, ""},
		{"IPv6 loopback", "POST", "/execute", post("Host", "[::1]:"+port), exec, 200, ""},
		{"another 127/8 address", "POST", "/execute", post("Host", "127.0.0.2:"+port), exec, 200, ""},
		{"allowed host, any port", "POST", "/execute", post("Host", "pml.test:1234"), exec, 200, ""},
		{"allowed host in capitals", "POST", "/execute", post("Host", "PML.test"), exec, 200, ""},
		{"allowed host with its port", "POST", "/execute", post("Host", "api.test:8443"), exec, 200, ""},
		{"allowed origin", "POST", "/execute", post("Origin", "https://app.test"), exec, 200, ""},
		{"allowed origin without token", "POST", "/execute", hdr("Content-Type", "application/json", "Origin", "https://app.test"), exec, 401, "UNAUTHORIZED"},
		{"healthz without token", "GET", "/healthz", nil, "", 200, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := tc.do(t, srv.URL)
			switch {
			case tc.status == 401 && resp.Header.Get("WWW-Authenticate") == "":
				t.Fatal("a 401 without WWW-Authenticate")
			case tc.header.Get("Origin") == "https://app.test" && resp.Header.Get("Access-Control-Allow-Origin") != "https://app.test":
				t.Fatalf("an allowed origin gets no Access-Control-Allow-Origin: %v", resp.Header)
			case tc.header.Get("Origin") != "https://app.test" && resp.Header.Get("Access-Control-Allow-Origin") != "":
				t.Fatalf("CORS headers for an origin not allowed: %v", resp.Header)
			}
		})
	}
}

// TestGuardPreflight: the allowed origin's page sends JSON with a token,
// so its browser asks first; the preflight carries no token.
func TestGuardPreflight(t *testing.T) {
	srv := newGuardedServer(t, &httpapi.Guard{AllowedOrigins: []string{"https://app.test"}, Token: "t"})
	tc := hostileCase{"preflight", "OPTIONS", "/execute", hdr("Origin", "https://app.test",
		"Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "authorization,content-type"), "", 204, ""}
	resp := tc.do(t, srv.URL)
	h := resp.Header
	if h.Get("Access-Control-Allow-Origin") != "https://app.test" || !strings.Contains(h.Get("Access-Control-Allow-Methods"), "POST") ||
		!strings.Contains(strings.ToLower(h.Get("Access-Control-Allow-Headers")), "authorization") ||
		!strings.Contains(strings.ToLower(h.Get("Access-Control-Allow-Headers")), "content-type") || h.Get("Vary") == "" {
		t.Fatalf("preflight headers %v", h)
	}
}

// TestGuardWithoutToken: on loopback the token is optional.
func TestGuardWithoutToken(t *testing.T) {
	srv := newGuardedServer(t, &httpapi.Guard{})
	for _, tc := range []hostileCase{
		{"loopback, no token", "POST", "/execute", hdr("Content-Type", "application/json"), `{"code": "return 1"}`, 200, ""},
		{"rebinding Host", "POST", "/execute", hdr("Content-Type", "application/json", "Host", "evil.example"), `{"code": "return 1"}`, 403, "FORBIDDEN"},
		{"any Origin", "POST", "/execute", hdr("Content-Type", "application/json", "Origin", "https://evil.example"), `{"code": "return 1"}`, 403, "FORBIDDEN"},
		// A page served from this machine (an MCP inspector on localhost)
		// may call; names that only start like loopback ones may not.
		{"loopback Origin", "POST", "/execute", hdr("Content-Type", "application/json", "Origin", "http://localhost:3000"), `{"code": "return 1"}`, 200, ""},
		{"loopback address Origin", "POST", "/execute", hdr("Content-Type", "application/json", "Origin", "http://127.0.0.1:6274"), `{"code": "return 1"}`, 200, ""},
		{"loopback lookalike Origin", "POST", "/execute", hdr("Content-Type", "application/json", "Origin", "http://localhost.evil.example"), `{"code": "return 1"}`, 403, "FORBIDDEN"},
		{"loopback userinfo Origin", "POST", "/execute", hdr("Content-Type", "application/json", "Origin", "http://localhost@evil.example"), `{"code": "return 1"}`, 403, "FORBIDDEN"},
		{"loopback Host, foreign Origin", "POST", "/execute", hdr("Content-Type", "application/json", "Host", "localhost", "Origin", "http://evil.example"), `{"code": "return 1"}`, 403, "FORBIDDEN"},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.do(t, srv.URL) })
	}
}

// TestGuardedMCP: an MCP client works through the guard with the token and
// an allowed host name, even though the listener is on loopback (the MCP
// library's own rebinding check would refuse that name).
func TestGuardedMCP(t *testing.T) {
	srv := newGuardedServer(t, &httpapi.Guard{AllowedHosts: []string{"pml.test"}, Token: "t"})
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	for _, tc := range []hostileCase{
		{"loopback", "POST", "/mcp", hdr("Content-Type", "application/json", "Accept", "application/json, text/event-stream", "Authorization", "Bearer t"), init, 200, ""},
		{"allowed host", "POST", "/mcp", hdr("Content-Type", "application/json", "Accept", "application/json, text/event-stream", "Authorization", "Bearer t", "Host", "pml.test"), init, 200, ""},
		{"no token", "POST", "/mcp", hdr("Content-Type", "application/json", "Accept", "application/json, text/event-stream"), init, 401, "UNAUTHORIZED"},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.do(t, srv.URL) })
	}
}

// TestAPIGatewayUnguarded: behind API Gateway the Host is the API's domain
// and browsers may call with their Origin (API Gateway's CORS and auth
// decide), so the handler built without a Guard must not check them. The
// JSON rule still holds there.
func TestAPIGatewayUnguarded(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	svc := executor.New(engine, executor.Options{Sources: []execution.ToolSource{demoserver.Source{}}, Logger: log})
	handler := lambdaevents.Handler(lambdaevents.Options{HTTP: httpapi.New(httpapi.Options{Service: svc, Logger: log}), Service: svc, Logger: log})
	event := func(contentType string) json.RawMessage {
		ev := events.APIGatewayV2HTTPRequest{
			Version: "2.0", RouteKey: "POST /execute", RawPath: "/execute", Body: `{"code": "return 1"}`,
			Headers: map[string]string{
				"host": "abc123xyz.execute-api.eu-west-1.amazonaws.com", "origin": "https://console.example",
				"content-type": contentType,
			},
		}
		ev.RequestContext.HTTP.Method = "POST"
		ev.RequestContext.HTTP.Path = "/execute"
		ev.RequestContext.Stage = "$default"
		raw, _ := json.Marshal(ev)
		return raw
	}
	for _, tt := range []struct {
		contentType string
		status      int
	}{{"application/json", 200}, {"text/plain", 415}} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := handler(ctx, event(tt.contentType))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		resp, ok := out.(events.APIGatewayV2HTTPResponse)
		if !ok || resp.StatusCode != tt.status {
			t.Fatalf("%s: %#v, want status %d", tt.contentType, out, tt.status)
		}
	}
}
