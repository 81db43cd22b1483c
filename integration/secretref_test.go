package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/pml-sandbox/pml/internal/testutil/moto"
)

// keyDoc is an OpenAPI service with one read operation.
const keyDoc = `{"openapi": "3.0.3", "info": {"title": "keyed", "version": "1"},
 "paths": {"/whoami": {"get": {"operationId": "whoami", "responses": {"200": {"description": "who",
  "content": {"application/json": {"schema": {"type": "object"}}}}}}}}}`

// TestSecretReferencesThroughPML: pml run reads a server list whose MCP
// server and OpenAPI service take their keys by reference from Secrets
// Manager (moto, reached as the AWS SDK's default configuration finds
// it): both real servers on loopback check the key they get, both echo
// it, and the script sees neither key, only the mask; nor does anything
// pml prints.
func TestSecretReferencesThroughPML(t *testing.T) {
	m := moto.Start(t)
	arn := m.PutSecret(t, "pml/keys", `{"mcp": "mcp-key-SECRET-41", "api": "api-key-SECRET-42"}`)
	check := func(want string, next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Api-Key") != want {
				http.Error(w, "bad key", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	ms := server.NewMCPServer("keyed", "1.0", server.WithToolCapabilities(true))
	ms.AddTool(mcp.NewTool("whoami", mcp.WithReadOnlyHintAnnotation(true)), func(_ context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("key " + r.Header.Get("X-Api-Key")), nil
	})
	mcpSrv := httptest.NewServer(check("mcp-key-SECRET-41", server.NewStreamableHTTPServer(ms)))
	t.Cleanup(mcpSrv.Close)
	api := http.NewServeMux()
	api.HandleFunc("/openapi.json", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, keyDoc) })
	api.Handle("/whoami", check("api-key-SECRET-42", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"key": %q}`, r.Header.Get("X-Api-Key"))
	})))
	apiSrv := httptest.NewServer(api)
	t.Cleanup(apiSrv.Close)
	cfg := filepath.Join(t.TempDir(), "servers.json")
	doc := fmt.Sprintf(`{"servers": [
		{"name": "m", "url": %q, "transport": "streamable", "headers": {"X-Api-Key": "${secret:%s#mcp}"}},
		{"name": "o", "type": "openapi", "spec": %q, "headers": {"X-Api-Key": "${secret:pml/keys#api}"}}]}`,
		mcpSrv.URL+"/mcp", arn, apiSrv.URL+"/openapi.json")
	if err := os.WriteFile(cfg, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	out, code := runPML(t, pmlEnv(t, m.Env()...), "run", "--config", cfg, "--demo", "off",
		"-e", `return [await mcp.m.whoami({}), await mcp.o.whoami({})]`)
	if code != 0 || strings.Contains(out, "SECRET") || strings.Count(out, "[REDACTED]") < 2 {
		t.Fatalf("exit %d: %s; want both calls through, their keys masked", code, out)
	}
	if !strings.Contains(out, `"key [REDACTED]"`) || !strings.Contains(out, `"key": "[REDACTED]"`) {
		t.Errorf("the results: %s", out)
	}

	// pml tools lists both servers' tools and their health beside a
	// server whose secret does not exist: that one's health names the
	// reference, and nothing printed holds a key.
	doc = fmt.Sprintf(`{"servers": [
		{"name": "m", "url": %q, "transport": "streamable", "headers": {"X-Api-Key": "${secret:%s#mcp}"}},
		{"name": "o", "type": "openapi", "spec": %q, "headers": {"X-Api-Key": "${secret:pml/keys#api}"}},
		{"name": "gone", "url": %q, "transport": "streamable", "headers": {"X-Api-Key": "${secret:pml/none}"}}]}`,
		mcpSrv.URL+"/mcp", arn, apiSrv.URL+"/openapi.json", mcpSrv.URL+"/mcp")
	if err := os.WriteFile(cfg, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	out, code = runPML(t, pmlEnv(t, m.Env()...), "tools", "--config", cfg, "--demo", "off")
	if code != 0 || strings.Contains(out, "SECRET") {
		t.Fatalf("pml tools: exit %d: %s", code, out)
	}
	if !strings.Contains(out, `"reading secret pml/none`) && !strings.Contains(out, "header X-Api-Key: reading secret pml/none") {
		t.Errorf("pml tools does not name the missing secret: %s", out)
	}
	if strings.Count(out, `"whoami"`) < 2 {
		t.Errorf("pml tools does not list both servers' tools: %s", out)
	}
}
