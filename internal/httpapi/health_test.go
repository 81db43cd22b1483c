package httpapi_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/httpapi"
)

// upstream is what /healthz's details say of a server: its host and port
// must reach nobody but those the deployment trusts with them.
const upstream = "http://10.1.2.3:8931/mcp"

func healthDetails() any {
	return map[string]any{"mcp_servers": []map[string]any{{"name": "kv", "url": upstream, "transport": "streamable", "tools": 7}}}
}

// healthServer is the handler with /healthz details, behind g (nil: the
// Lambda's shape, where API Gateway's authorizer names the principal,
// which the X-Test-Principal header stands in for here).
func healthServer(t *testing.T, g *httpapi.Guard) string {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	svc := executor.New(engine, executor.Options{Sources: []execution.ToolSource{demoserver.Source{}}, Logger: log})
	h := httpapi.New(httpapi.Options{Service: svc, Logger: log, Guard: g, Health: healthDetails,
		Policy: approval.Policy{Approvers: []string{"root"}}})
	var handler http.Handler = h
	if g == nil {
		handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.ServeHTTP(w, r.WithContext(execution.WithPrincipal(r.Context(), r.Header.Get("X-Test-Principal"))))
		})
	}
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestHealthzTellsOnlyWhoMayKnow: without the token /healthz says the
// server is up and nothing else (no upstream's URL, transport or tool
// count, no runtime figures); with it, or where the server has no token
// (every route is open to the caller anyway), the details stay. Behind
// API Gateway (no guard) an approver reads the details and anyone else
// the bare answer.
func TestHealthzTellsOnlyWhoMayKnow(t *testing.T) {
	guarded := healthServer(t, &httpapi.Guard{Token: "tok"})
	open := healthServer(t, &httpapi.Guard{})
	lambda := healthServer(t, nil)
	for _, tc := range []struct {
		name, base string
		header     []string
		details    bool
	}{
		{"no token", guarded, nil, false},
		{"wrong token", guarded, []string{"Authorization", "Bearer nope"}, false},
		{"the token", guarded, []string{"Authorization", "Bearer tok"}, true},
		{"a server without a token", open, nil, true},
		{"behind API Gateway, no principal", lambda, nil, false},
		{"behind API Gateway, a caller", lambda, []string{"X-Test-Principal", "agent"}, false},
		{"behind API Gateway, an approver", lambda, []string{"X-Test-Principal", "root"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", tc.base+"/healthz", nil)
			for i := 0; i+1 < len(tc.header); i += 2 {
				req.Header.Set(tc.header[i], tc.header[i+1])
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			body := string(raw)
			if resp.StatusCode != 200 || !strings.Contains(body, `"ok":true`) {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			leaks := strings.Contains(body, "10.1.2.3") || strings.Contains(body, "8931") || strings.Contains(body, "streamable") ||
				strings.Contains(body, "details") || strings.Contains(body, "runtime")
			if tc.details != leaks {
				t.Fatalf("details shown %v, want %v: %s", leaks, tc.details, body)
			}
			if tc.details && (!strings.Contains(body, upstream) || !strings.Contains(body, `"runtime":{"goroutines":`)) {
				t.Fatalf("the details lack the upstream: %s", body)
			}
		})
	}
}
