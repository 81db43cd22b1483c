package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/toolsource"
)

// padEchoServer is a real mcp-go streamable HTTP server whose tools fail
// quoting the request's X-Api-Key after pad bytes of the script's
// choosing: in an isError result (pad_error), in a JSON-RPC error
// (pad_rpc) and, for pad_http, in the body of an HTTP 500 that a proxy in
// front of the server answers instead.
func padEchoServer(t *testing.T) string {
	t.Helper()
	m := server.NewMCPServer("pad", "1.0", server.WithToolCapabilities(true))
	ro := mcpgo.WithReadOnlyHintAnnotation(true)
	text := func(r mcpgo.CallToolRequest) string {
		return strings.Repeat("x", r.GetInt("pad", 0)) + r.Header.Get("X-Api-Key") + strings.Repeat("y", 100)
	}
	m.AddTool(mcpgo.NewTool("pad_error", ro, mcpgo.WithNumber("pad")),
		func(_ context.Context, r mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			return mcpgo.NewToolResultError(text(r)), nil
		})
	m.AddTool(mcpgo.NewTool("pad_rpc", ro, mcpgo.WithNumber("pad")),
		func(_ context.Context, r mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			return nil, errors.New(text(r))
		})
	m.AddTool(mcpgo.NewTool("pad_http", ro, mcpgo.WithNumber("pad")),
		func(context.Context, mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			return mcpgo.NewToolResultText("never reached"), nil
		})
	sh := server.NewStreamableHTTPServer(m)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var msg struct {
			Method string `json:"method"`
			Params struct {
				Name      string `json:"name"`
				Arguments struct {
					Pad int `json:"pad"`
				} `json:"arguments"`
			} `json:"params"`
		}
		if json.Unmarshal(body, &msg) == nil && msg.Method == "tools/call" && msg.Params.Name == "pad_http" {
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, strings.Repeat("x", msg.Params.Arguments.Pad)+r.Header.Get("X-Api-Key")+strings.Repeat("y", 100))
			return
		}
		sh.ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = hs.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = hs.Close()
		<-done
		_ = sh.Shutdown(context.Background())
	})
	return "http://" + ln.Addr().String() + "/mcp"
}

// keyStart is the longest start of key that s holds right after the
// padding: what of the key a cut left.
func keyStart(s, key string) string {
	for k := len(key); k > 0; k-- {
		if strings.Contains(s, "x"+key[:k]) {
			return key[:k]
		}
	}
	return ""
}

// TestErrorCutLeavesNoSecret: a script that pads a tool's echo of the
// configured key so that the cut of the error text falls anywhere in the
// key (all but its last character kept, and every other split) reads no
// part of it: in an isError result's text and a JSON-RPC error (cut at
// 4,096 bytes), and in an HTTP error body (cut at 256).
func TestErrorCutLeavesNoSecret(t *testing.T) {
	url := padEchoServer(t)
	cfg := Config{Config: toolsource.Config{Name: "pad", Headers: map[string]string{"X-Api-Key": apiKeySecret}}, URL: url, Transport: TransportStreamable}
	p := newTestPool(t, []Config{cfg})
	waitTools(t, p, "pad", "pad_error", "pad_rpc", "pad_http")
	for _, tc := range []struct {
		tool string
		cut  int
	}{{"pad_error", maxErrorText}, {"pad_rpc", maxErrorText}, {"pad_http", maxErrorBody}} {
		t.Run(tc.tool, func(t *testing.T) {
			// The text before the pad (mcp-go's own words) moves the cut
			// by a few bytes: cover them.
			for pad := tc.cut - len(apiKeySecret) - 64; pad <= tc.cut+2; pad++ {
				_, err := call(t, p, "pad", tc.tool, fmt.Sprintf(`{"pad": %d}`, pad), CallOptions{})
				if err == nil {
					t.Fatalf("pad %d: the call succeeded", pad)
				}
				msg := fault.As(err).Message
				if strings.Contains(msg, secretMarker) {
					t.Errorf("pad %d: the message holds the key", pad)
				}
				if s := keyStart(msg, apiKeySecret); s != "" {
					t.Errorf("pad %d: the message holds %q, the start of the key", pad, s)
				}
			}
		})
	}
}
