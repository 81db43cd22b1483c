package openapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/oauthclient"
	"github.com/pml-sandbox/pml/internal/secretref"
	"github.com/pml-sandbox/pml/internal/testutil/moto"
	"github.com/pml-sandbox/pml/internal/toolsource"
)

// secretsEnv reads secret references from moto's Secrets Manager, as
// the app's one resolver reads the real one.
func secretsEnv(m *moto.Server) toolsource.Env {
	return toolsource.Env{Refs: secretref.New(func(context.Context) (secretref.API, error) { return m.Client(), nil }, secretref.Options{}),
		OAuth: toolsource.OAuth{Secrets: func(context.Context) (oauthclient.SecretsAPI, error) { return m.Client(), nil }}}
}

// TestSecretsManagerCredentials: an OpenAPI service's bearer token and
// API key come from moto's Secrets Manager (${secret:name},
// ${secret:name#key}); the service checks both, and its echo of them is
// masked. When the key is rotated and the service refuses the old one
// (403), the call is sent once more with the new key and succeeds; a
// service that refuses whatever it gets fails the call with its status,
// after one more read of the secret, never a loop.
func TestSecretsManagerCredentials(t *testing.T) {
	m := moto.Start(t)
	m.PutSecret(t, "shop/token", "tok-SECRET-77")
	m.PutSecret(t, "shop/keys", `{"api_key": "key-SECRET-1"}`)
	var wantKey atomic.Value
	wantKey.Store("key-SECRET-1")
	srv := newShop(t)
	srv.answer = func(w http.ResponseWriter, r *http.Request) bool {
		if r.Header.Get("Authorization") != "Bearer tok-SECRET-77" || r.Header.Get("X-Api-Key") != wantKey.Load().(string) {
			http.Error(w, "forbidden", http.StatusForbidden)
			return true
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"auth": r.Header.Get("Authorization"), "key": r.Header.Get("X-Api-Key")})
		return true
	}
	src := newSourceWith(t, secretsEnv(m), Config{Config: toolsource.Config{Name: "shop",
		Headers: map[string]string{"Authorization": "Bearer ${secret:shop/token}", "X-Api-Key": "${secret:shop/keys#api_key}"}},
		Spec: "testdata/shop.yaml", BaseURL: srv.URL + "/api"})
	list := func() (string, error) {
		out, err := src.Call(context.Background(), catalog.Tool{Server: "shop", Name: "listOrders"}, nil, execution.CallOptions{})
		return string(out), err
	}
	out, err := list()
	if err != nil || strings.Contains(out, "SECRET") || !strings.Contains(out, "[REDACTED]") {
		t.Fatalf("call: %s, %v; want the credentials accepted and masked in the result", out, err)
	}

	m.Rotate(t, "shop/keys", `{"api_key": "key-SECRET-2"}`)
	wantKey.Store("key-SECRET-2")
	before := srv.count()
	if out, err = list(); err != nil || strings.Contains(out, "SECRET") {
		t.Fatalf("after the rotation: %s, %v", out, err)
	}
	if n := srv.count() - before; n != 2 {
		t.Errorf("%d requests for the call after the rotation; want the refused one and one more", n)
	}

	wantKey.Store("a key nobody has")
	before = srv.count()
	_, err = list()
	if fault.CodeOf(err) != fault.ToolError || !strings.Contains(err.Error(), "403") || strings.Contains(err.Error(), "SECRET") {
		t.Fatalf("refused: %v; want TOOL_ERROR with the status", err)
	}
	if n := srv.count() - before; n != 1 {
		t.Errorf("%d requests for a call refused with an unrotated key; want 1", n)
	}
}

// TestSecretReferenceRefusals: a reference to a secret that does not
// exist, one whose value holds a line break, and one to a key the secret
// lacks each fail the call UNAVAILABLE with an error naming the header
// and the reference, before any request reaches the service; no error
// quotes a value, and the source stays usable.
func TestSecretReferenceRefusals(t *testing.T) {
	m := moto.Start(t)
	m.PutSecret(t, "shop/crlf", "tok-SECRET\r\nX-Injected: 1")
	m.PutSecret(t, "shop/json", `{"api_key": "key-SECRET-3"}`)
	srv := newShop(t)
	for _, tc := range []struct{ ref, want string }{
		{"${secret:shop/none}", "reading secret shop/none"},
		{"${secret:shop/crlf}", "line break"},
		{"${secret:shop/json#nope}", `secret shop/json has no key "nope"`},
	} {
		src, err := open(secretsEnv(m), Config{Config: toolsource.Config{Name: "shop", Headers: map[string]string{"X-Api-Key": tc.ref}},
			Spec: "testdata/shop.yaml", BaseURL: srv.URL + "/api"})
		if err != nil {
			t.Fatal(err)
		}
		before := srv.count()
		_, err = src.Call(context.Background(), catalog.Tool{Server: "shop", Name: "listOrders"}, nil, execution.CallOptions{})
		if fault.CodeOf(err) != fault.Unavailable || !strings.Contains(err.Error(), tc.want) ||
			!strings.Contains(err.Error(), "header X-Api-Key") || strings.Contains(err.Error(), "SECRET") {
			t.Errorf("%s: %v; want UNAVAILABLE naming the header and %q, quoting nothing", tc.ref, err, tc.want)
		}
		if n := srv.count() - before; n != 0 {
			t.Errorf("%s: %d requests reached the service; want none", tc.ref, n)
		}
		_ = src.Close()
	}
}
