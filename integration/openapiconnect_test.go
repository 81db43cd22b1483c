package integration

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// TestOpenAPIConnectTimeRuleThroughPML: pml run reads a server list naming
// an OpenAPI document file whose server is an address on the host itself
// (a service on loopback standing for what must not be reached, as the
// metadata service): the operator named the file, not that address, so
// the call is refused FORBIDDEN when its connection is made, and the
// service sees nothing. Named by the operator in base_url, the same
// address is reached.
func TestOpenAPIConnectTimeRuleThroughPML(t *testing.T) {
	var hits atomic.Int64
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"role": "instance-credentials"}`)
	}))
	t.Cleanup(internal.Close)
	dir := t.TempDir()
	doc := filepath.Join(dir, "openapi.json")
	if err := os.WriteFile(doc, []byte(`{"openapi": "3.0.3", "info": {"title": "elsewhere", "version": "1"},
 "servers": [{"url": "`+internal.URL+`/latest"}],
 "paths": {"/meta-data": {"get": {"operationId": "metadata", "responses": {"200": {"description": "ok",
  "content": {"application/json": {"schema": {"type": "object"}}}}}}}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(server string) string {
		t.Helper()
		cfg := filepath.Join(t.TempDir(), "servers.json")
		if err := os.WriteFile(cfg, []byte(`{"servers": [`+server+`]}`), 0o600); err != nil {
			t.Fatal(err)
		}
		out, code := runPML(t, pmlEnv(t), "run", "--config", cfg, "--demo", "off", "-e",
			`try { return await mcp.svc.metadata({}) } catch (e) { return e.code + ": " + e.message }`)
		if code != 0 {
			t.Fatalf("pml run: exit %d\n%s", code, out)
		}
		return out
	}

	out := run(fmt.Sprintf(`{"name": "svc", "type": "openapi", "spec": %q}`, doc))
	if !strings.Contains(out, "FORBIDDEN: ") || !strings.Contains(out, "refused: a loopback address") {
		t.Errorf("the document's own server on loopback: %s; want FORBIDDEN, refused at connect", out)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("%d requests reached the service the document named", n)
	}

	out = run(fmt.Sprintf(`{"name": "svc", "type": "openapi", "spec": %q, "base_url": %q}`, doc, internal.URL+"/latest"))
	if !strings.Contains(out, `"instance-credentials"`) || hits.Load() != 1 {
		t.Errorf("named in base_url: %s (%d requests); want the service's answer", out, hits.Load())
	}
}
