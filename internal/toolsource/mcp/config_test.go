package mcp

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/pml-sandbox/pml/internal/redact"
	"github.com/pml-sandbox/pml/internal/toolsource"
)

func TestParseServerFlag(t *testing.T) {
	cases := []struct {
		in      string
		want    Config
		wantErr string
	}{
		{in: "demo=http://127.0.0.1:8080/sse", want: Config{Config: toolsource.Config{Name: "demo", AllowDestructive: true}, URL: "http://127.0.0.1:8080/sse", Transport: TransportAuto}},
		{in: "ev=https://example.com/mcp?x=a=b", want: Config{Config: toolsource.Config{Name: "ev", AllowDestructive: true}, URL: "https://example.com/mcp?x=a=b", Transport: TransportAuto}},
		{in: "get-sum=http://h/mcp", want: Config{Config: toolsource.Config{Name: "get-sum", AllowDestructive: true}, URL: "http://h/mcp", Transport: TransportAuto}},
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

// parseConfig reads a server list of MCP servers only, as
// internal/serverconfig does (which tests the list as a whole).
func parseConfig(data []byte) ([]Config, error) {
	var doc struct {
		Servers []yaml.Node `yaml:"servers"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	var out []Config
	for i := range doc.Servers {
		c, err := decode(&doc.Servers[i])
		if err != nil {
			return nil, fmt.Errorf("servers[%d]: %w", i, err)
		}
		out = append(out, c)
	}
	return out, nil
}

func TestConfigNeverPrintsHeaderValues(t *testing.T) {
	c := Config{Config: toolsource.Config{Name: "gh", Headers: map[string]string{"Authorization": "Bearer literal-secret"}}, URL: "https://user:pw@api.example.com/mcp"}
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
		cfg := Config{Config: toolsource.Config{Name: "s"}, URL: c.url}
		var buf bytes.Buffer
		slog.New(slog.NewJSONHandler(&buf, nil)).Info("cfg", "server", cfg)
		for _, out := range []string{cfg.String(), fmt.Sprintf("%#v", cfg), buf.String()} {
			if strings.Contains(out, "SECRET") {
				t.Errorf("%s: secret printed: %s", c.url, out)
			}
		}
		if got := redact.URL(c.url); got != c.want {
			t.Errorf("redact.URL(%s) = %s; want %s", c.url, got, c.want)
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
		r := redact.New(Config{Config: toolsource.Config{Name: "s"}, URL: u}.secrets()...)
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
	err := Config{Config: toolsource.Config{Name: "s"}, URL: "http://u:pw-SECRET@h:port-SECRET/x"}.Validate()
	if err == nil || strings.Contains(err.Error(), "pw-SECRET") {
		t.Errorf("Validate: %v; want an error without the password", err)
	}
}
