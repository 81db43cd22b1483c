package openapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/toolsource"
)

// payments is an API whose charge operation takes an Idempotency-Key
// header parameter of its own, as Stripe's does.
const payments = `openapi: 3.0.3
info: {title: payments, version: "1"}
paths:
  /charges:
    post:
      operationId: createCharge
      parameters:
        - {name: Idempotency-Key, in: header, schema: {type: string}}
      requestBody:
        content:
          application/json:
            schema: {type: object}
      responses:
        "200": {description: ok}
`

// TestIdempotencyKeySent: an effect's key goes as the Idempotency-Key
// header, the only one, over what an argument bound to that header says
// (a script cannot choose its key) and over a configured header; a call
// without one sends what the arguments say, as before. The server's
// idempotency_keys is on its tools.
func TestIdempotencyKeySent(t *testing.T) {
	var mu sync.Mutex
	var got [][]string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Values("Idempotency-Key"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"ch_1"}`))
	}))
	defer srv.Close()
	spec := filepath.Join(t.TempDir(), "payments.yaml")
	if err := os.WriteFile(spec, []byte(payments), 0o600); err != nil {
		t.Fatal(err)
	}
	src := newSource(t, Config{Config: toolsource.Config{Name: "pay", AllowDestructive: true, IdempotencyKeys: true,
		Headers: map[string]string{"Idempotency-Key": "configured"}}, Spec: spec, BaseURL: srv.URL})
	tool := toolOf(t, src, "createCharge")
	if !tool.IdempotencyKeys || !tool.HonoursKeys() || !tool.IsEffect() {
		t.Fatalf("tool %+v", tool)
	}
	args := json.RawMessage(`{"Idempotency-Key": "forged", "body": {"amount": 100}}`)
	opts := execution.CallOptions{Lineage: execution.Lineage{AllowDestructive: true}}
	effect := opts
	effect.IdempotencyKey = "pml-key"
	for _, o := range []execution.CallOptions{effect, opts} {
		if _, err := src.Call(context.Background(), tool, args, o); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || !slices.Equal(got[0], []string{"pml-key"}) {
		t.Fatalf("the effect sent Idempotency-Key %q", got)
	}
	if len(got[1]) != 1 || got[1][0] == "pml-key" {
		t.Fatalf("the call without a key sent %q", got[1])
	}
}
