package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/server"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/oauthclient"
	"github.com/pml-sandbox/pml/internal/testutil/oauthserver"
	"github.com/pml-sandbox/pml/internal/toolsource"
)

// protectedServer is a real mcp-go streamable HTTP server behind the test
// authorization server's guard.
func protectedServer(t *testing.T, as *oauthserver.Server) string {
	t.Helper()
	m := server.NewMCPServer("secure", "1.0", server.WithToolCapabilities(true))
	quit := make(chan struct{})
	addTestTools(m, quit, nil)
	sh := server.NewStreamableHTTPServer(m)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String() + "/mcp"
	hs := &http.Server{Handler: as.Protect(url, sh), ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = hs.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = hs.Close()
		<-done
		close(quit)
		_ = sh.Shutdown(context.Background())
	})
	return url
}

// TestOAuthNeedsLogin: a server that asks for OAuth, and no stored
// login: calls fail at once with UNAVAILABLE naming the server and the
// command to run, and nothing is sent to the authorization server.
func TestOAuthNeedsLogin(t *testing.T) {
	as := oauthserver.Start(t, oauthserver.Options{})
	url := protectedServer(t, as)
	dir := t.TempDir()
	for _, tc := range []struct {
		name, hint string
		cfg        Config
		opts       []option
	}{
		{"auto", "run `pml mcp login secure`", Config{Config: toolsource.Config{Name: "secure"}, URL: url}, []option{withCredentialsDir(dir)}},
		{"oauth", "run `pml mcp login secure`", Config{Config: toolsource.Config{Name: "secure"}, URL: url, Auth: oauthclient.Config{Type: oauthclient.TypeOAuth}}, []option{withCredentialsDir(dir)}},
		{"no credentials directory", "give the server an auth.secret", Config{Config: toolsource.Config{Name: "secure"}, URL: url}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newTestPool(t, []Config{tc.cfg}, tc.opts...)
			start := time.Now()
			_, err := call(t, p, "secure", "echo", `{"text":"x"}`, CallOptions{})
			fe := fault.As(err)
			if fe.Code != fault.Unavailable || fe.Retryable || !strings.Contains(fe.Message, `MCP server "secure" needs a login`) || !strings.Contains(fe.Message, tc.hint) {
				t.Fatalf("call: %v (retryable %v); want a non-retryable UNAVAILABLE naming the server and %q", err, fe.Retryable, tc.hint)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("the call took %v", d)
			}
			h := p.Health()[0]
			if h.State != toolsource.StateUnavailable || !strings.Contains(h.LastError, "needs a login") {
				t.Errorf("health %+v", h)
			}
			if c := as.Counts(); c.Registrations+c.Authorizations != 0 {
				t.Errorf("the authorization server was contacted: %+v", c)
			}
		})
	}
}

// TestOAuthLoginAndRefreshThroughThePool: with a login agent the pool logs
// in when the server asks, keeps the credentials in the directory (0600),
// and refreshes the short-lived access token between calls; no token
// reaches a log line, an error or Health.
func TestOAuthLoginAndRefreshThroughThePool(t *testing.T) {
	as := oauthserver.Start(t, oauthserver.Options{AccessTTL: 2 * time.Second})
	url := protectedServer(t, as)
	dir := t.TempDir()
	l := &leakCheck{t: t}
	p := newTestPool(t, []Config{{Config: toolsource.Config{Name: "secure"}, URL: url, Transport: TransportStreamable}},
		withLogger(newLockedLogger(&l.logs, &l.mu)), withCredentialsDir(dir), withLoginAgent(oauthclient.Headless{}))
	if _, err := call(t, p, "secure", "echo", `{"text":"one"}`, CallOptions{}); err != nil {
		t.Fatal(err)
	}
	path := oauthclient.FilePath(dir, "secure")
	info, err := os.Stat(path)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("credentials file: %v, %v", info, err)
	}
	// Past the access token's life (less the quarter kept in reserve).
	time.Sleep(2 * time.Second)
	if _, err := call(t, p, "secure", "echo", `{"text":"two"}`, CallOptions{}); err != nil {
		t.Fatal(err)
	}
	if c := as.Counts(); c.Authorizations != 1 || c.Refreshes < 1 || c.ReuseDetected != 0 {
		t.Fatalf("counts %+v; want one login and a refresh", c)
	}
	data, _ := os.ReadFile(path)
	var creds oauthclient.Credentials
	_ = json.Unmarshal(data, &creds)
	if !as.RefreshTokenValid(creds.RefreshToken) {
		t.Fatal("the stored refresh token is not the rotated one")
	}
	b, _ := json.Marshal(p.Health())
	l.mu.Lock()
	logs := l.logs.String()
	l.mu.Unlock()
	for _, s := range []string{creds.AccessToken, creds.RefreshToken} {
		if strings.Contains(logs, s) || strings.Contains(string(b), s) {
			t.Errorf("a token (%.6s…) left the pool", s)
		}
	}
	l.closeAndCheckLogs(p)
}

// TestAuthSecretsRedacted: a client secret configured in the server's
// auth, quoted back by an authorization server that refuses it, never
// reaches the error a script sees, Health, or a log line.
func TestAuthSecretsRedacted(t *testing.T) {
	const secret = "cs-SECRET-quoted-99"
	t.Setenv("MCPCLIENT_TEST_CLIENT_SECRET", secret)
	var srv *http.Server
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/oauth-protected-resource/mcp", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"resource": %q, "authorization_servers": [%q]}`, base+"/mcp", base)
	})
	mux.HandleFunc("/.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"issuer": %q, "token_endpoint": %q}`, base, base+"/token")
	})
	mux.HandleFunc("/token", func(w http.ResponseWriter, r *http.Request) {
		id, sec, _ := r.BasicAuth()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"error": "invalid_client", "error_description": "client %s with secret %s is unknown"}`, id, sec)
	})
	mux.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer resource_metadata=%q`, base+"/.well-known/oauth-protected-resource/mcp"))
		w.WriteHeader(http.StatusUnauthorized)
	})
	srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	l := &leakCheck{t: t}
	p := l.pool(Config{Config: toolsource.Config{Name: "svc"}, URL: base + "/mcp", Transport: TransportStreamable, Auth: oauthclient.Config{Type: oauthclient.TypeClientCredentials, ClientID: "svc", ClientSecret: "${env:MCPCLIENT_TEST_CLIENT_SECRET}"}})
	_, err = call(t, p, "svc", "echo", `{"text":"x"}`, CallOptions{})
	if codeOf(err) != fault.Unavailable || !strings.Contains(err.Error(), "refused the client") {
		t.Fatalf("call: %v; want UNAVAILABLE saying the client was refused", err)
	}
	l.err("refused client", err)
	b, _ := json.Marshal(p.Health())
	if strings.Contains(string(b), secretMarker) {
		t.Errorf("Health holds the secret: %s", b)
	}
	l.closeAndCheckLogs(p)
}

func TestAuthConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "servers.yaml")
	doc := `servers:
  - name: gh
    url: https://api.example/mcp
    auth:
      type: oauth
      scopes: [repo, read]
      client_id: pml-client
      client_secret: literal-SECRET-value
      secret: arn:aws:secretsmanager:us-east-1:123456789012:secret:pml/gh-AbCdEf
  - name: svc
    url: https://svc.example/mcp
    auth:
      type: client_credentials
      client_id: svc
      private_key: ${file:/etc/pml/key.pem}
`
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfgs, err := parseConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	gh := cfgs[0]
	if gh.Auth.Type != oauthclient.TypeOAuth || strings.Join(gh.Auth.Scopes, ",") != "repo,read" || gh.Auth.ClientID != "pml-client" ||
		!strings.HasPrefix(gh.Auth.Secret, "arn:aws:secretsmanager:") || cfgs[1].Auth.PrivateKey != "${file:/etc/pml/key.pem}" {
		t.Fatalf("parsed %+v", cfgs)
	}
	// Printing a config never shows a secret value.
	var logs strings.Builder
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("cfg", "server", gh)
	for _, s := range []string{gh.String(), fmt.Sprintf("%v %+v %#v", gh, gh, gh), logs.String()} {
		if strings.Contains(s, secretMarker) {
			t.Errorf("a printed config holds the client secret: %s", s)
		}
	}
	if !strings.Contains(strings.Join(gh.secrets(), "\n"), "literal-SECRET-value") {
		t.Error("the literal client secret is not among the config's secrets")
	}
	for _, bad := range []struct{ doc, want string }{
		{`{"servers": [{"name": "a", "url": "https://a/mcp", "auth": {"type": "magic"}}]}`, "unknown auth type"},
		{`{"servers": [{"name": "a", "url": "https://a/mcp", "headers": {"Authorization": "Bearer x"}, "auth": {"type": "oauth"}}]}`, "choose one"},
		{`{"servers": [{"name": "a", "url": "https://a/mcp", "auth": {"type": "client_credentials", "private_key": "${file:key.pem}"}}]}`, "must be absolute"},
		{`{"servers": [{"name": "a", "url": "https://a/mcp", "auth": {"secret": "pml/gh"}}]}`, "must be a Secrets Manager ARN"},
		{`{"servers": [{"name": "a", "url": "https://a/mcp", "auth": {"client_metadata_url": "http://a/c.json"}}]}`, "https"},
		{`{"servers": [{"name": "a", "url": "https://a/mcp", "auth": {"type": "none", "client_id": "x"}}]}`, "takes no client"},
		{`{"servers": [{"name": "a", "url": "https://a/mcp", "auth": {"scopes": ["a b"]}}]}`, "invalid scope"},
		{`{"servers": [{"name": "a", "url": "https://a/mcp", "auth": {"typo": 1}}]}`, "unknown field"},
	} {
		if _, err := parseConfig([]byte(bad.doc)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v; want an error containing %q", bad.doc, err, bad.want)
		}
	}
}
