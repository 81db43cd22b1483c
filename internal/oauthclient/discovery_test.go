package oauthclient

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// serve answers GETs with docs by path, "{self}" and "{other}" in them
// standing for this server's URL and the other's, and records the paths
// asked for.
func serve(t *testing.T, docs map[string]string, other func() string) (*httptest.Server, *[]string) {
	t.Helper()
	var hits []string
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits = append(hits, r.URL.Path)
		doc, ok := docs[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		doc = strings.ReplaceAll(doc, "{self}", srv.URL)
		doc = strings.ReplaceAll(doc, "{other}", other())
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(doc))
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

func TestDiscover(t *testing.T) {
	asMeta := `{"issuer": "{self}%s", "authorization_endpoint": "{self}/authorize", "token_endpoint": "{self}/token", "code_challenge_methods_supported": ["S256"]}`
	tests := []struct {
		name      string
		rs, as    map[string]string
		challenge string // resource_metadata path on the resource server
		wantErr   string
		wantRes   string // "{rs}" replaced
		wantPRM   []string
	}{
		{name: "path-inserted PRM, RFC 8414",
			rs:      map[string]string{"/.well-known/oauth-protected-resource/mcp": `{"resource": "{self}/mcp", "authorization_servers": ["{other}"], "scopes_supported": ["a"]}`},
			as:      map[string]string{"/.well-known/oauth-authorization-server": strings.Replace(asMeta, "%s", "", 1)},
			wantRes: "{rs}/mcp", wantPRM: []string{"/.well-known/oauth-protected-resource/mcp"}},
		{name: "root PRM after the path-inserted one, tenant issuer",
			rs:      map[string]string{"/.well-known/oauth-protected-resource": `{"resource": "{self}", "authorization_servers": ["{other}/tenant1"]}`},
			as:      map[string]string{"/.well-known/oauth-authorization-server/tenant1": strings.Replace(asMeta, "%s", "/tenant1", 1)},
			wantRes: "{rs}", wantPRM: []string{"/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"}},
		{name: "PRM named by the challenge, OpenID configuration inside the issuer path",
			rs:        map[string]string{"/custom/prm.json": `{"resource": "{self}/mcp", "authorization_servers": ["{other}/t"]}`},
			as:        map[string]string{"/t/.well-known/openid-configuration": strings.Replace(asMeta, "%s", "/t", 1)},
			challenge: "/custom/prm.json", wantRes: "{rs}/mcp", wantPRM: []string{"/custom/prm.json"}},
		{name: "PRM for another resource is refused",
			rs:      map[string]string{"/.well-known/oauth-protected-resource/mcp": `{"resource": "https://victim.example/mcp", "authorization_servers": ["{other}"]}`},
			as:      map[string]string{"/.well-known/oauth-authorization-server": strings.Replace(asMeta, "%s", "", 1)},
			wantErr: "not"},
		{name: "PRM for a sibling path is refused",
			rs:      map[string]string{"/.well-known/oauth-protected-resource/mcp": `{"resource": "{self}/mc", "authorization_servers": ["{other}"]}`},
			as:      map[string]string{"/.well-known/oauth-authorization-server": strings.Replace(asMeta, "%s", "", 1)},
			wantErr: "not"},
		{name: "metadata naming another issuer is refused",
			rs:      map[string]string{"/.well-known/oauth-protected-resource/mcp": `{"resource": "{self}/mcp", "authorization_servers": ["{other}"]}`},
			as:      map[string]string{"/.well-known/oauth-authorization-server": `{"issuer": "https://evil.example", "token_endpoint": "https://evil.example/token"}`},
			wantErr: "names issuer"},
		{name: "token endpoint in clear text elsewhere is refused",
			rs:      map[string]string{"/.well-known/oauth-protected-resource/mcp": `{"resource": "{self}/mcp", "authorization_servers": ["{other}"]}`},
			as:      map[string]string{"/.well-known/oauth-authorization-server": `{"issuer": "{self}", "token_endpoint": "http://evil.example/token"}`},
			wantErr: "neither https"},
		{name: "no authorization server",
			rs:      map[string]string{"/.well-known/oauth-protected-resource/mcp": `{"resource": "{self}/mcp", "authorization_servers": []}`},
			wantErr: "no authorization server"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rs, as *httptest.Server
			as, _ = serve(t, tt.as, func() string { return rs.URL })
			rs, hits := serve(t, tt.rs, func() string { return as.URL })
			var ch Challenge
			if tt.challenge != "" {
				ch.ResourceMetadata = rs.URL + tt.challenge
			}
			d, err := discover(context.Background(), http.DefaultClient, rs.URL+"/mcp", ch)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v; want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := strings.ReplaceAll(tt.wantRes, "{rs}", rs.URL); d.Resource != want {
				t.Errorf("resource %q; want %q", d.Resource, want)
			}
			if d.Server.TokenEndpoint != as.URL+"/token" {
				t.Errorf("token endpoint %q", d.Server.TokenEndpoint)
			}
			if got, _ := json.Marshal(*hits); string(got) != mustJSON(tt.wantPRM) {
				t.Errorf("resource server saw %s; want %s", got, mustJSON(tt.wantPRM))
			}
		})
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestSecureURL(t *testing.T) {
	for u, ok := range map[string]bool{
		"https://as.example/token": true, "http://127.0.0.1:9/token": true, "http://localhost/x": true, "http://[::1]:8/x": true,
		"http://as.example/token": false, "ftp://127.0.0.1/x": false, "javascript:alert(1)": false,
	} {
		if err := secureURL(u); (err == nil) != ok {
			t.Errorf("secureURL(%q) = %v; want ok=%v", u, err, ok)
		}
	}
}
