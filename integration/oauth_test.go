package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/oauthclient"
	"github.com/pml-sandbox/pml/internal/testutil/lambdaemu"
	"github.com/pml-sandbox/pml/internal/testutil/moto"
	"github.com/pml-sandbox/pml/internal/testutil/oauthserver"
	"github.com/pml-sandbox/pml/internal/testutil/syncbuf"
)

// accessTTL is the access tokens' life: short, so that a script that waits
// a little outlives one.
const accessTTL = 2 * time.Second

// spanningScript calls the protected server, waits past the access
// token's life (the demo server's sleep, behind the same guard), and calls
// it again: the second call needs a refreshed token.
const spanningScript = `
const a = await mcp.secure.echo({n: 1});
await mcp.secure.sleep({ms: 2600});
const b = await mcp.secure.echo({n: 2});
return [a.n, b.n];`

// TestOAuthEndToEnd runs the authorization-code path as a person and a
// deployment meet it, with real parts on loopback: the test authorization
// server, the demo MCP server behind its guard, the pml binary, moto as
// Secrets Manager and the execute function behind the Lambda emulator.
func TestOAuthEndToEnd(t *testing.T) {
	as := oauthserver.Start(t, oauthserver.Options{AccessTTL: accessTTL})
	resource := protectedDemo(t, as)
	work := t.TempDir()
	cfg := filepath.Join(work, "servers.json")
	writeFile(t, cfg, fmt.Sprintf(`{"servers": [{"name": "secure", "url": %q, "transport": "streamable", "auth": {"type": "oauth"}}]}`, resource))
	credsDir := filepath.Join(work, "credentials")
	env := pmlEnv(t, app.EnvMCPCredsDir+"="+credsDir)

	// Before any login, a script's call fails at once, saying what to do.
	out, _ := runPML(t, env, "run", "--config", cfg, "-e", `return await mcp.secure.echo({n: 0})`)
	if !strings.Contains(out, `"UNAVAILABLE"`) || !strings.Contains(out, "pml mcp login secure") {
		t.Fatalf("call before login: %s", out)
	}

	// pml mcp login, with the test in place of the browser: it reads the
	// authorization URL pml prints and follows it to pml's loopback
	// redirect.
	login(t, env, cfg)
	credsFile := oauthclient.FilePath(credsDir, "secure")
	info, err := os.Stat(credsFile)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("credentials file: %v %v", info, err)
	}
	first := readCredsFile(t, credsFile)
	if first.RefreshToken == "" || !as.RefreshTokenValid(first.RefreshToken) {
		t.Fatal("no valid refresh token stored")
	}
	secrets := []string{first.RefreshToken, first.AccessToken}

	status, _ := runPML(t, env, "mcp", "status", "--config", cfg)
	if !strings.Contains(status, `"state": "logged in"`) {
		t.Fatalf("status: %s", status)
	}

	// A script that outlives its access token: the pool refreshes between
	// calls, and the rotated refresh token is stored.
	out, code := runPML(t, env, "run", "--config", cfg, "-e", spanningScript)
	if code != 0 || !strings.Contains(out, `"ok": true`) {
		t.Fatalf("script: exit %d: %s", code, out)
	}
	second := readCredsFile(t, credsFile)
	if c := as.Counts(); c.Refreshes < 1 || c.ReuseDetected != 0 || c.Authorizations != 1 {
		t.Fatalf("counts after the script %+v; want refreshes and a single authorization", c)
	}
	if second.RefreshToken == first.RefreshToken || !as.RefreshTokenValid(second.RefreshToken) || as.RefreshTokenValid(first.RefreshToken) {
		t.Fatal("the rotated refresh token was not stored")
	}
	secrets = append(secrets, second.RefreshToken, second.AccessToken)
	tools, _ := runPML(t, env, "tools", "--config", cfg)
	for _, text := range []string{status, out, tools} {
		noSecret(t, text, secrets)
	}

	// The deployment: the person logs in into a Secrets Manager secret,
	// and the execute function reads it at cold start.
	m := moto.Start(t)
	arn := m.CreateSecret(t, "pml/secure")
	login(t, append(env, m.Env()...), cfg, "--secret", arn)
	stored := secretCreds(t, m, arn)
	if stored.RefreshToken == "" || !as.RefreshTokenValid(stored.RefreshToken) {
		t.Fatal("no valid refresh token in the secret")
	}
	servers := fmt.Sprintf(`{"servers": [{"name": "secure", "url": %q, "transport": "streamable", "auth": {"type": "oauth", "secret": %q}}]}`, resource, arn)
	logs := &syncbuf.Buffer{}
	emu, err := lambdaemu.Start(lambdaemu.Function{Name: "execute", Binary: bins.execute, Stderr: logs,
		Env: append(m.Env(), app.EnvCompileCache+"="+t.TempDir(), app.EnvShippedCache+"=off", app.EnvLogLevel+"=info",
			app.EnvCapFile+"="+filepath.Join(work, "caps.json"), app.EnvMCPServers+"="+servers)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emu.Close)
	res := invokeExecute(t, emu, spanningScript)
	if !strings.Contains(res, `"ok":true`) || !strings.Contains(res, `[1,2]`) {
		t.Fatalf("execute in the function: %s", res)
	}
	// The function refreshed, and wrote the rotated refresh token back.
	after := secretCreds(t, m, arn)
	if after.RefreshToken == stored.RefreshToken || !as.RefreshTokenValid(after.RefreshToken) || after.Lease != nil {
		t.Fatal("the function did not store the rotated refresh token")
	}
	secrets = append(secrets, stored.RefreshToken, after.RefreshToken, after.AccessToken)

	// Revoked: the next refresh fails, and the call is UNAVAILABLE with
	// the command that fixes it; the function keeps serving.
	as.RevokeAll()
	res = invokeExecute(t, emu, `return await mcp.secure.echo({n: 3})`)
	if !strings.Contains(res, `"UNAVAILABLE"`) || !strings.Contains(res, "pml mcp login secure --secret "+arn) {
		t.Fatalf("after revocation: %s", res)
	}
	if res := invokeExecute(t, emu, `return 1 + 1`); !strings.Contains(res, `"result":2`) {
		t.Fatalf("the function no longer serves: %s", res)
	}
	noSecret(t, res, secrets)
	noSecret(t, logs.String(), secrets)
}

// protectedDemo serves the demo MCP server's streamable endpoint behind
// the authorization server's guard and returns its URL.
func protectedDemo(t *testing.T, as *oauthserver.Server) string {
	t.Helper()
	demo, err := demoserver.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = demo.Close() })
	target, _ := url.Parse("http://" + demo.Addr())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	resource := "http://" + ln.Addr().String() + "/mcp"
	srv := &http.Server{Handler: as.Protect(resource, httputil.NewSingleHostReverseProxy(target)), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return resource
}

// pmlEnv is the environment of a pml process: no PML_ variables but
// extra, and a data directory of the test's own.
func pmlEnv(t *testing.T, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PML_") && !strings.HasPrefix(kv, "XDG_DATA_HOME=") && !strings.HasPrefix(kv, "AWS_") {
			env = append(env, kv)
		}
	}
	return append(env, append([]string{"XDG_DATA_HOME=" + t.TempDir(), app.EnvLogLevel + "=warn"}, extra...)...)
}

func runPML(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(bins.pml, args...)
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), code
}

var authURL = regexp.MustCompile(`https?://127\.0\.0\.1:\d+/authorize\?\S+`)

// login runs pml mcp login and plays the browser.
func login(t *testing.T, env []string, cfg string, extra ...string) {
	t.Helper()
	cmd := exec.Command(bins.pml, append([]string{"mcp", "login", "secure", "--config", cfg, "--no-browser", "--timeout", "60s"}, extra...)...)
	cmd.Env = env
	var stdout bytes.Buffer
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = &stdout, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	printed := &syncbuf.Buffer{}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			_, _ = printed.Write([]byte(sc.Text() + "\n"))
			if u := authURL.FindString(sc.Text()); u != "" {
				select {
				case found <- u:
				default:
				}
			}
		}
	}()
	var u string
	select {
	case u = <-found:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("pml mcp login printed no authorization URL: %s", printed.String())
	}
	// The browser: follow the authorization server's redirect to pml.
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "logged in") {
		t.Fatalf("the redirect to pml answered %d: %s", resp.StatusCode, body)
	}
	err = cmd.Wait()
	pw.Close()
	if err != nil {
		t.Fatalf("pml mcp login: %v: %s %s", err, stdout.String(), printed.String())
	}
	if !strings.Contains(stdout.String(), `"state": "logged in"`) {
		t.Fatalf("pml mcp login printed %s", stdout.String())
	}
}

func readCredsFile(t *testing.T, path string) *oauthclient.Credentials {
	t.Helper()
	c, _, err := oauthclient.FileStore{Path: path}.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func secretCreds(t *testing.T, m *moto.Server, arn string) *oauthclient.Credentials {
	t.Helper()
	out, err := m.Client().GetSecretValue(context.Background(), &secretsmanager.GetSecretValueInput{SecretId: aws.String(arn)})
	if err != nil {
		t.Fatal(err)
	}
	var c oauthclient.Credentials
	if err := json.Unmarshal([]byte(aws.ToString(out.SecretString)), &c); err != nil {
		t.Fatal(err)
	}
	return &c
}

func invokeExecute(t *testing.T, emu *lambdaemu.Emulator, code string) string {
	t.Helper()
	payload, _ := json.Marshal(map[string]any{"code": code})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, fnErr, err := emu.Invoke(ctx, "execute", payload)
	if err != nil || fnErr {
		t.Fatalf("invoke: %v %s", err, out)
	}
	return string(out)
}

func noSecret(t *testing.T, text string, secrets []string) {
	t.Helper()
	for _, s := range secrets {
		if s != "" && strings.Contains(text, s) {
			t.Errorf("a token (%.6s…) was shown: %.300s", s, text)
		}
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}
