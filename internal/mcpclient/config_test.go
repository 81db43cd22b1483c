package mcpclient

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/redact"
)

func TestParseServerFlag(t *testing.T) {
	cases := []struct {
		in      string
		want    ServerConfig
		wantErr string
	}{
		{in: "demo=http://127.0.0.1:8080/sse", want: ServerConfig{Name: "demo", URL: "http://127.0.0.1:8080/sse", Transport: TransportAuto, AllowDestructive: true}},
		{in: "ev=https://example.com/mcp?x=a=b", want: ServerConfig{Name: "ev", URL: "https://example.com/mcp?x=a=b", Transport: TransportAuto, AllowDestructive: true}},
		{in: "get-sum=http://h/mcp", want: ServerConfig{Name: "get-sum", URL: "http://h/mcp", Transport: TransportAuto, AllowDestructive: true}},
		{in: "demo", wantErr: "NAME=URL"},
		{in: "=http://h/mcp", wantErr: "empty"},
		{in: "__proto__=http://h/mcp", wantErr: "reserved"},
		{in: "constructor=http://h/mcp", wantErr: "reserved"},
		{in: "prototype=http://h/mcp", wantErr: "reserved"},
		{in: "a:b=http://h/mcp", wantErr: "':'"},
		{in: "then=http://h/mcp", wantErr: "reserved"},
		{in: "toJSON=http://h/mcp", wantErr: "reserved"},
		{in: "demo=127.0.0.1:8080", wantErr: "URL"},
		{in: "demo=file:///etc/passwd", wantErr: "http"},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseServerFlag(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v; want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.String() != tc.want.String() {
				t.Errorf("got %s; want %s", got, tc.want)
			}
		})
	}
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	want := []ServerConfig{
		{Name: "github", URL: "https://api.example.com/mcp", Transport: "streamable",
			Headers:     map[string]string{"Authorization": "Bearer ${env:GITHUB_TOKEN}"},
			CallTimeout: 10 * time.Second, ConnectTimeout: 45 * time.Second, Allow: []string{"get_*"}, Deny: []string{"get_secret"}},
		{Name: "ev", URL: "http://127.0.0.1:9/sse", AllowDestructive: true, RequireApproval: []string{"send_*", "pay"}, AssumeNotDestructive: true},
	}
	yamlBody := `servers:
  - name: github
    url: https://api.example.com/mcp
    transport: streamable
    headers:
      Authorization: "Bearer ${env:GITHUB_TOKEN}"
    call_timeout: 10s
    connect_timeout: 45s
    allow: ["get_*"]
    deny: [get_secret]
  - name: ev
    url: http://127.0.0.1:9/sse
    allow_destructive: true
    require_approval: ["send_*", pay]
    assume_not_destructive: true
`
	jsonBody := `{"servers":[
  {"name":"github","url":"https://api.example.com/mcp","transport":"streamable",
   "headers":{"Authorization":"Bearer ${env:GITHUB_TOKEN}"},"call_timeout":"10s","connect_timeout":"45s",
   "allow":["get_*"],"deny":["get_secret"]},
  {"name":"ev","url":"http://127.0.0.1:9/sse","allow_destructive":true,"require_approval":["send_*","pay"],"assume_not_destructive":true}]}`

	for _, f := range []string{write("servers.yaml", yamlBody), write("servers.json", jsonBody)} {
		got, err := LoadConfig(f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s:\n got %v\nwant %v", f, got, want)
		}
		if got[0].Headers["Authorization"] != "Bearer ${env:GITHUB_TOKEN}" {
			t.Errorf("header reference resolved at load time: %q", got[0].Headers["Authorization"])
		}
	}

	bad := []struct{ name, body, want string }{
		{"typo.yaml", "servers:\n  - name: a\n    url: http://h/mcp\n    allow_destructiv: true\n", "allow_destructiv"},
		{"typo.json", `{"servers":[{"name":"a","url":"http://h/mcp","allowDestructive":true}]}`, "allowDestructive"},
		{"dup.yaml", "servers:\n  - {name: a, url: http://h/mcp}\n  - {name: a, url: http://h/sse}\n", "duplicate"},
		{"proto.yaml", "servers:\n  - {name: __proto__, url: http://h/mcp}\n", "reserved"},
		{"then.yaml", "servers:\n  - {name: then, url: http://h/mcp}\n", "reserved"},
		{"timeout.yaml", "servers:\n  - {name: a, url: http://h/mcp, call_timeout: soon}\n", "call_timeout"},
		{"connect.yaml", "servers:\n  - {name: a, url: http://h/mcp, connect_timeout: soon}\n", "connect_timeout"},
		{"connect-negative.yaml", "servers:\n  - {name: a, url: http://h/mcp, connect_timeout: -1s}\n", "negative connect timeout"},
		{"relative-secret.yaml", "servers:\n  - name: a\n    url: http://h/mcp\n    headers: {X-Key: '${file:key.txt}'}\n", "absolute"},
		{"transport.yaml", "servers:\n  - {name: a, url: http://h/mcp, transport: ws}\n", "transport"},
		{"approval.yaml", "servers:\n  - {name: a, url: http://h/mcp, require_approval: [\"\"]}\n", "require_approval"},
		{"broken.json", `{"servers":[`, "broken.json"},
	}
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			p := write(b.name, b.body)
			_, err := LoadConfig(p)
			if err == nil || !strings.Contains(err.Error(), b.want) || !strings.Contains(err.Error(), p) {
				t.Errorf("err %v; want one naming %s and %q", err, p, b.want)
			}
		})
	}
	if _, err := LoadConfig(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: %v", err)
	}
}

func TestConfigNeverPrintsHeaderValues(t *testing.T) {
	c := ServerConfig{Name: "gh", URL: "https://user:pw@api.example.com/mcp",
		Headers: map[string]string{"Authorization": "Bearer literal-secret"}}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("cfg", "server", c)
	for _, out := range []string{c.String(), fmt.Sprintf("%v", c), fmt.Sprintf("%+v", c), fmt.Sprintf("%#v", c), buf.String()} {
		if strings.Contains(out, "literal-secret") || strings.Contains(out, "pw@") {
			t.Errorf("secret printed: %s", out)
		}
		if !strings.Contains(out, "Authorization") {
			t.Errorf("header name missing: %s", out)
		}
	}
}

func TestConfigNeverPrintsURLCredentials(t *testing.T) {
	cases := []struct{ url, want string }{
		{"https://user:pw-SECRET@h.example/mcp?api_key=SECRET1&x", "https://[REDACTED]@h.example/mcp?api_key=[REDACTED]&x"},
		{"https://tok-SECRET@h.example/sse", "https://[REDACTED]@h.example/sse"},
		{"https://h.example/mcp?a=SECRET%2F1&b=SECRET2#frag", "https://h.example/mcp?a=[REDACTED]&b=[REDACTED]#frag"},
	}
	for _, c := range cases {
		cfg := ServerConfig{Name: "s", URL: c.url}
		var buf bytes.Buffer
		slog.New(slog.NewJSONHandler(&buf, nil)).Info("cfg", "server", cfg)
		for _, out := range []string{cfg.String(), fmt.Sprintf("%#v", cfg), buf.String()} {
			if strings.Contains(out, "SECRET") {
				t.Errorf("%s: secret printed: %s", c.url, out)
			}
		}
		if got := redactURL(c.url); got != c.want {
			t.Errorf("redactURL(%s) = %s; want %s", c.url, got, c.want)
		}
		// Whatever quotes the URL as written is scrubbed too.
		r := redact.New(cfg.secrets()...)
		if got := r.String("Post " + c.url + ": refused"); strings.Contains(got, "SECRET") {
			t.Errorf("%s: the redactor missed a secret: %s", c.url, got)
		}
	}
	// net/http turns userinfo into a Basic Authorization header, which a
	// refusal may echo.
	for _, u := range []string{"https://user:pw-SECRET@h.example/mcp", "https://tok-SECRET@h.example/mcp"} {
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		r := redact.New(ServerConfig{Name: "s", URL: u}.secrets()...)
		sent := req.URL.User.String()
		user, pass := req.URL.User.Username(), ""
		if p, ok := req.URL.User.Password(); ok {
			pass = p
		}
		echo := "denied: Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
		if got := r.String(echo); strings.Contains(got, base64.StdEncoding.EncodeToString([]byte(user+":"+pass))) {
			t.Errorf("%s (userinfo %s): the Basic credentials were not scrubbed: %s", u, sent, got)
		}
	}
	// A URL that does not parse is not quoted whole in the error.
	err := ServerConfig{Name: "s", URL: "http://u:pw-SECRET@h:port-SECRET/x"}.Validate()
	if err == nil || strings.Contains(err.Error(), "pw-SECRET") {
		t.Errorf("Validate: %v; want an error without the password", err)
	}
}
