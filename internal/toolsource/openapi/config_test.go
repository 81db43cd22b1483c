package openapi

import (
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// TestDecode: an entry is read as strictly as before the kernel, its auth
// block included, and names the line of what it refuses.
func TestDecode(t *testing.T) {
	tests := []struct{ doc, want string }{
		{"name: shop\ntype: openapi\nspec: https://shop.test/openapi.json\nbase_url: https://shop.test/api\n" +
			"headers: {X-Api-Key: '${env:K}'}\nquery: {k: '${env:Q}'}\ncall_timeout: 2s\nfetch_timeout: 3s\n" +
			"auth: {type: client_credentials, client_id: c, client_secret: '${env:S}'}\nread_only: [find*]\ndestructive: [nuke]\n", ""},
		{"name: shop\nspec: x.json\nauth: null\n", ""},
		{"name: shop\nspec: x.json\nauth:\n  type: sigv4\n  regoin: eu-west-1\n", `auth: line 5: unknown field "regoin"`},
		{"name: shop\nspec: x.json\nfetch_timeout: soon\n", `server "shop": fetch_timeout`},
		{"name: shop\nspec: x.json\nquery: {'': v}\n", "invalid query name"},
		{"name: shop\nspec: x.json\nread_only: ['']\n", "empty pattern"},
		{"name: shop\nspec: x.json\nauth: {type: oauth}\n", "needs base_url"},
	}
	for _, tc := range tests {
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(tc.doc), &n); err != nil {
			t.Fatal(err)
		}
		spec, err := Kind{}.Decode(n.Content[0])
		if tc.want != "" {
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%q: err %v, want %q", tc.doc, err, tc.want)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.doc, err)
			continue
		}
		c := spec.(Config)
		if b := spec.Base(); b.Type != Type || b.Name != "shop" {
			t.Errorf("base %+v", b)
		}
		if strings.HasPrefix(c.Spec, "https") && (c.CallTimeout != 2*time.Second || c.FetchTimeout != 3*time.Second ||
			c.Auth.ClientSecret != "${env:S}" || c.Query["k"] != "${env:Q}" || c.ReadOnly[0] != "find*" || c.Destructive[0] != "nuke") {
			t.Errorf("decoded %#v", c)
		}
	}
}
