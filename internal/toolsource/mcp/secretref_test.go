package mcp

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/pml-sandbox/pml/internal/oauthclient"
	"github.com/pml-sandbox/pml/internal/testutil/moto"
	"github.com/pml-sandbox/pml/internal/testutil/oauthserver"
	"github.com/pml-sandbox/pml/internal/toolsource"
)

// TestSecretsManagerHeader: a header from ${secret:NAME#key}, read through
// moto's Secrets Manager, reaches a real MCP server that checks it; a tool
// that echoes it gives the script the mask, never the key; when the
// secret is rotated and the server starts refusing the old key (401), the
// pool reads the secret again and the next call goes through with the new
// one, on the same connection.
func TestSecretsManagerHeader(t *testing.T) {
	m := moto.Start(t)
	m.PutSecret(t, "mcp/keys", `{"api": "key-`+secretMarker+`-1"}`)
	var want atomic.Value
	want.Store("key-" + secretMarker + "-1")
	var refused atomic.Int64
	ms := server.NewMCPServer("keyed", "1.0", server.WithToolCapabilities(true))
	ms.AddTool(mcpgo.NewTool("echo_key", readOnly), func(_ context.Context, r mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
		return mcpgo.NewToolResultText("you sent " + r.Header.Get("X-Api-Key")), nil
	})
	sh := server.NewStreamableHTTPServer(ms)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Api-Key") != want.Load().(string) {
			refused.Add(1)
			http.Error(w, "bad key", http.StatusUnauthorized)
			return
		}
		sh.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
	})
	cfg := Config{Config: toolsource.Config{Name: "k", Headers: map[string]string{"X-Api-Key": "${secret:mcp/keys#api}"}}, URL: hs.URL + "/mcp", Transport: TransportStreamable}
	p := newTestPool(t, []Config{cfg},
		withSecretsManager(func(context.Context) (oauthclient.SecretsAPI, error) { return m.Client(), nil }))
	waitTools(t, p, "k", "echo_key")
	out, err := call(t, p, "k", "echo_key", `{}`, CallOptions{})
	if err != nil || strings.Contains(out, secretMarker) || !strings.Contains(out, "[REDACTED]") {
		t.Fatalf("echo: %s, %v; want the key masked", out, err)
	}

	m.Rotate(t, "mcp/keys", `{"api": "key-`+secretMarker+`-2"}`)
	want.Store("key-" + secretMarker + "-2")
	out, err = call(t, p, "k", "echo_key", `{}`, CallOptions{})
	if err != nil || strings.Contains(out, secretMarker) {
		t.Fatalf("after the rotation: %s, %v", out, err)
	}
	if refused.Load() != 1 {
		t.Errorf("the server refused %d requests; want the one with the old key", refused.Load())
	}
	if h := p.Health()[0]; h.State != toolsource.StateHealthy || strings.Contains(h.LastError, secretMarker) {
		t.Errorf("health %+v", h)
	}
}

// TestSecretsManagerReferenceRefusals: a header referencing a secret that
// does not exist, or one whose value holds a line break, leaves its server
// unavailable with a last error naming the header and the reference, and
// no request reaches it; a server that refuses a key read from Secrets
// Manager and quotes it back has its quote masked. Nothing the pool says
// (errors, health, logs) holds a secret, and the pool stays live.
func TestSecretsManagerReferenceRefusals(t *testing.T) {
	m := moto.Start(t)
	m.PutSecret(t, "mcp/crlf", "key-"+secretMarker+"\r\nX-Injected: 1")
	m.PutSecret(t, "mcp/good", "key-"+secretMarker+"-ok")
	var reached atomic.Int64
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Api-Key") != "" {
			reached.Add(1)
		}
		http.Error(w, "bad key "+r.Header.Get("X-Api-Key"), http.StatusUnauthorized)
	}))
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
	})
	l := &leakCheck{t: t}
	cfg := func(name, ref string) Config {
		return Config{Config: toolsource.Config{Name: name, Headers: map[string]string{"X-Api-Key": ref}}, URL: hs.URL + "/mcp", Transport: TransportStreamable}
	}
	p := newTestPool(t, []Config{cfg("gone", "${secret:mcp/none}"), cfg("crlf", "${secret:mcp/crlf}"), cfg("quoting", "${secret:mcp/good}")},
		withLogger(newLockedLogger(&l.logs, &l.mu)), withReconnectBackoff(20*time.Millisecond, 50*time.Millisecond, 3),
		withSecretsManager(func(context.Context) (oauthclient.SecretsAPI, error) { return m.Client(), nil }))
	for name, want := range map[string]string{"gone": "header X-Api-Key: reading secret mcp/none", "crlf": "header X-Api-Key: resolved value contains a line break", "quoting": "authorization required"} {
		deadline := time.Now().Add(30 * time.Second)
		for {
			h := p.Health()
			i := slices.IndexFunc(h, func(h toolsource.Health) bool { return h.Name == name })
			if strings.Contains(h[i].LastError, want) {
				if h[i].State == toolsource.StateHealthy {
					t.Errorf("%s: %+v; want it unavailable", name, h[i])
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: last error never mentioned %q: %+v", name, want, h[i])
			}
			time.Sleep(20 * time.Millisecond)
		}
		_, err := call(t, p, name, "anything", `{}`, CallOptions{})
		if err == nil {
			t.Errorf("%s: a call went through", name)
		}
		l.err(name, err)
	}
	if n := reached.Load(); n == 0 {
		t.Error("the quoting server was never reached: the test proves nothing about its quote")
	}
	b, _ := json.Marshal(p.Health())
	if strings.Contains(string(b), secretMarker) {
		t.Errorf("health holds a secret: %s", b)
	}
	l.closeAndCheckLogs(p)
}

// TestRotatedClientSecret: an OAuth client secret given as
// ${secret:NAME#key} is read through moto's Secrets Manager; when it is
// rotated (the authorization server refusing the old one from then on),
// the next token request — a new client-credentials token, or a refresh
// of an authorization-code login — is refused once, the secret is read
// again, and the call goes through with the new one, without a restart.
func TestRotatedClientSecret(t *testing.T) {
	tests := []struct {
		name string
		auth oauthclient.Config
		// expire makes the pool need a new token: revoke them all (the
		// client-credentials case), or wait past the access token's life.
		expire  func(as *oauthserver.Server)
		counted func(c oauthserver.Counts) int
	}{
		{"client credentials", oauthclient.Config{Type: oauthclient.TypeClientCredentials},
			func(as *oauthserver.Server) { as.RevokeAll() },
			func(c oauthserver.Counts) int { return c.ClientCredentials }},
		{"refresh of a login", oauthclient.Config{},
			func(*oauthserver.Server) { time.Sleep(2 * time.Second) },
			func(c oauthserver.Counts) int { return c.Refreshes }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := moto.Start(t)
			m.PutSecret(t, "mcp/oauth", `{"secret": "cs-`+secretMarker+`-1"}`)
			as := oauthserver.Start(t, oauthserver.Options{AccessTTL: 2 * time.Second,
				Clients: map[string]string{"svc": "cs-" + secretMarker + "-1"}})
			url := protectedServer(t, as)
			auth := tt.auth
			auth.ClientID, auth.ClientSecret = "svc", "${secret:mcp/oauth#secret}"
			l := &leakCheck{t: t}
			p := newTestPool(t, []Config{{Config: toolsource.Config{Name: "secure"}, URL: url, Transport: TransportStreamable, Auth: auth}},
				withLogger(newLockedLogger(&l.logs, &l.mu)), withCredentialsDir(t.TempDir()), withLoginAgent(oauthclient.Headless{}),
				withSecretsManager(func(context.Context) (oauthclient.SecretsAPI, error) { return m.Client(), nil }))
			if _, err := call(t, p, "secure", "echo", `{"text":"one"}`, CallOptions{}); err != nil {
				t.Fatal(err)
			}
			before := tt.counted(as.Counts())

			m.Rotate(t, "mcp/oauth", `{"secret": "cs-`+secretMarker+`-2"}`)
			as.SetClientSecret("svc", "cs-"+secretMarker+"-2")
			tt.expire(as)
			if out, err := call(t, p, "secure", "echo", `{"text":"two"}`, CallOptions{}); err != nil || !strings.Contains(out, "two") {
				t.Fatalf("after the rotation: %s, %v", out, err)
			}
			if got := tt.counted(as.Counts()); got != before+1 {
				t.Errorf("%d token grants after the rotation; want one, with the new secret", got-before)
			}
			l.closeAndCheckLogs(p)
		})
	}
}
