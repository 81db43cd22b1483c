package oauthclient

import (
	"net/http"
	"slices"
	"testing"
)

func TestParseChallenge(t *testing.T) {
	tests := []struct {
		name   string
		header []string
		want   Challenge
	}{
		{"none", nil, Challenge{}},
		{"basic only", []string{`Basic realm="x"`}, Challenge{}},
		{"bearer bare", []string{`Bearer`}, Challenge{Bearer: true}},
		{"bearer params", []string{`Bearer resource_metadata="https://a.example/.well-known/oauth-protected-resource/mcp", scope="a b", error="invalid_token"`},
			Challenge{Bearer: true, ResourceMetadata: "https://a.example/.well-known/oauth-protected-resource/mcp", Scope: []string{"a", "b"}, Error: "invalid_token"}},
		{"token values and case", []string{`bearer Error=insufficient_scope, SCOPE="mcp:write"`},
			Challenge{Bearer: true, Scope: []string{"mcp:write"}, Error: "insufficient_scope"}},
		{"after basic with token68", []string{`Basic YWxhZGRpbjpvcGVuc2VzYW1l==, Bearer scope="x"`}, Challenge{Bearer: true, Scope: []string{"x"}}},
		{"second header line", []string{`Basic realm="a"`, `Bearer resource_metadata="https://m.example/x"`},
			Challenge{Bearer: true, ResourceMetadata: "https://m.example/x"}},
		{"escaped quote", []string{`Bearer scope="a\"b"`}, Challenge{Bearer: true, Scope: []string{`a"b`}}},
		{"first bearer wins", []string{`Bearer scope="one", Bearer scope="two"`}, Challenge{Bearer: true, Scope: []string{"one"}}},
		{"garbage", []string{`=,,"" ,= Bearer`}, Challenge{Bearer: true}},
		{"unterminated quote", []string{`Bearer scope="abc`}, Challenge{Bearer: true, Scope: []string{"abc"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for _, v := range tt.header {
				h.Add("WWW-Authenticate", v)
			}
			got := ParseChallenge(h)
			if got.Bearer != tt.want.Bearer || got.ResourceMetadata != tt.want.ResourceMetadata || got.Error != tt.want.Error || !slices.Equal(got.Scope, tt.want.Scope) {
				t.Errorf("ParseChallenge(%q) = %+v; want %+v", tt.header, got, tt.want)
			}
		})
	}
}

func FuzzParseChallenge(f *testing.F) {
	f.Add(`Bearer resource_metadata="https://a/x", scope="a b"`)
	f.Add(`Basic abc==, Bearer error=insufficient_scope`)
	f.Fuzz(func(t *testing.T, s string) {
		h := http.Header{}
		h.Set("WWW-Authenticate", s)
		_ = ParseChallenge(h) // must not hang or panic
	})
}
