// Package fronttest is what the tests of PML Sandbox's two front ends —
// the REST API (internal/httpapi) and the MCP server
// (internal/mcpserver) — share: requests sent as a principal, MCP clients
// whose user answers questions, the services and the approval gate they
// are served over. Each front's tests build their own handler over these,
// so that both test their front against the same fixtures.
package fronttest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/execution"
)

// PrincipalHeader carries, in tests, who API Gateway would have verified.
const PrincipalHeader = "X-Test-Principal"

// Agent is the principal whose MCP client the deployments of these tests
// trust to put questions to a person.
const Agent = "jwt:https://idp.example#agent-7"

// ServeAs serves h, each request from the principal its PrincipalHeader
// names (def when it names none), and closes the server when the test
// ends.
func ServeAs(t *testing.T, h http.Handler, def string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.Header.Get(PrincipalHeader)
		if p == "" {
			p = def
		}
		h.ServeHTTP(w, r.WithContext(execution.WithPrincipal(r.Context(), p)))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// Call sends a request as principal and decodes the JSON answer.
func Call(t *testing.T, method, url, principal, body string, hdr ...string) (int, http.Header, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(PrincipalHeader, principal)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s %s: %d %s", method, url, resp.StatusCode, raw)
	}
	return resp.StatusCode, resp.Header, doc
}

// RPC sends one JSON-RPC request to base's /mcp as principal.
func RPC(t *testing.T, base, principal, method string, params any) (result map[string]any, rpcErr map[string]any) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": method, "params": params})
	status, _, doc := Call(t, "POST", base+"/mcp", principal, string(body), "Accept", "application/json, text/event-stream")
	if status != 200 || doc["id"] != 7.0 {
		t.Fatalf("%s: %d %v", method, status, doc)
	}
	result, _ = doc["result"].(map[string]any)
	rpcErr, _ = doc["error"].(map[string]any)
	return result, rpcErr
}

// ToJSON is v as JSON text, for a test to look into.
func ToJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestWriter sends a logger's lines to the test's log.
type TestWriter struct{ T *testing.T }

// Write logs p as one line of the test, so that a failing test shows what
// the server logged beside it.
func (w TestWriter) Write(p []byte) (int, error) {
	w.T.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
