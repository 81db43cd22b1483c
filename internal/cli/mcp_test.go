package cli_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/cli"
	"github.com/pml-sandbox/pml/internal/oauthclient"
	"github.com/pml-sandbox/pml/internal/testutil/oauthserver"
)

func runMCP(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := cli.Main(context.Background(), append([]string{"mcp"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestMCPLoginAndStatus: pml mcp login --headless against a server that
// asks for OAuth stores a refresh token; pml mcp status reports each
// server's state and never a token.
func TestMCPLoginAndStatus(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(app.EnvMCPCredsDir, dir)
	as := oauthserver.Start(t, oauthserver.Options{})
	var rs *httptest.Server
	rs = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		as.Protect(rs.URL+"/mcp", http.NotFoundHandler()).ServeHTTP(w, r)
	}))
	t.Cleanup(rs.Close)
	flag := "secure=" + rs.URL + "/mcp"

	if code, out, _ := runMCP("status", "--mcp", flag, "--mcp", "open=http://127.0.0.1:9/mcp"); code != 0 || !strings.Contains(out, `"state": "not logged in"`) {
		t.Fatalf("status before login: %d %s", code, out)
	}
	code, out, errOut := runMCP("login", "secure", "--mcp", flag, "--headless")
	if code != 0 || !strings.Contains(out, `"state": "logged in"`) {
		t.Fatalf("login: %d %s %s", code, out, errOut)
	}
	c, _, err := oauthclient.FileStore{Path: oauthclient.FilePath(dir, "secure")}.Load(context.Background())
	if err != nil || c.RefreshToken == "" {
		t.Fatalf("stored: %v %v", c, err)
	}
	_, status, _ := runMCP("status", "--mcp", flag)
	for _, text := range []string{out, errOut, status} {
		for _, s := range []string{c.RefreshToken, c.AccessToken} {
			if strings.Contains(text, s) {
				t.Errorf("a token was printed: %s", text)
			}
		}
	}
	if !strings.Contains(status, `"refresh_token": true`) || !strings.Contains(status, `"issuer": "`+as.URL) {
		t.Errorf("status after login: %s", status)
	}
}

func TestMCPUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "want a subcommand"},
		{[]string{"logout"}, "unknown subcommand"},
		{[]string{"login"}, "want one server name"},
		{[]string{"login", "nope", "--mcp", "a=http://127.0.0.1:9/mcp"}, `no MCP server named "nope"`},
		{[]string{"login", "a", "--mcp", "a=http://127.0.0.1:9/mcp", "--secret", "pml/x"}, "must be a Secrets Manager ARN"},
	} {
		code, _, errOut := runMCP(tc.args...)
		if code != cli.ExitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("pml mcp %v: exit %d, %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}
