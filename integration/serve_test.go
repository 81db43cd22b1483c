package integration

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestServeSafeByDefault runs the real binary as a user would: what a web
// page could send it is refused, a client holding GET /mcp gets 405, and
// SIGTERM stops it at once with exit 0.
func TestServeSafeByDefault(t *testing.T) {
	srv := startServe(t, nil)
	base := srv.base

	const code = `{"code": "return 1"}`
	tests := []struct {
		name, method, path string
		kv                 []string
		status             int
	}{
		{"text/plain body", "POST", "/execute", []string{"Content-Type", "text/plain"}, 415},
		{"form body", "POST", "/execute", []string{"Content-Type", "application/x-www-form-urlencoded"}, 415},
		{"rebinding Host", "POST", "/execute", []string{"Content-Type", "application/json", "Host", "evil.example"}, 403},
		{"cross-site Origin", "POST", "/execute", []string{"Content-Type", "application/json", "Origin", "https://evil.example"}, 403},
		{"JSON from loopback", "POST", "/execute", []string{"Content-Type", "application/json"}, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, tt.method, base+tt.path, strings.NewReader(code))
			for i := 0; i+1 < len(tt.kv); i += 2 {
				req.Header.Set(tt.kv[i], tt.kv[i+1])
			}
			req.Host = req.Header.Get("Host")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, body)
			}
		})
	}

	// A client that opens the MCP event stream and keeps it.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/mcp", nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" {
		t.Errorf("GET /mcp: %d, Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}

	_ = srv.proc.Signal(syscallTERM)
	select {
	case err := <-srv.exited:
		if err != nil {
			t.Fatalf("pml serve exited with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("pml serve did not stop promptly on SIGTERM")
	}
}
