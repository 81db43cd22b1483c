package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/pml-sandbox/pml/internal/oauthclient"
	"github.com/pml-sandbox/pml/internal/testutil/oauthserver"
	"github.com/pml-sandbox/pml/internal/toolsource"
)

// apiKeySecret is an X-Api-Key header's value, written in the config.
const apiKeySecret = "k-SECRET-apikey-3"

// requestKey carries the request's URL query into a tool handler.
type requestKey struct{}

// headerEchoServer is a real mcp-go streamable HTTP server whose tools
// hand back the request's headers and query, as debugging servers and
// careless proxies do: in structuredContent, in text, with every character
// of the values \u-escaped (a parser reads the same string), in an error,
// and in a tool description. wrap puts a guard in front (nil: none).
func headerEchoServer(t *testing.T, wrap func(url string, h http.Handler) http.Handler) string {
	t.Helper()
	m := server.NewMCPServer("echo-headers", "1.0", server.WithToolCapabilities(true))
	seen := func(ctx context.Context, r mcpgo.CallToolRequest) map[string]any {
		h := map[string]string{}
		for k := range r.Header {
			h[k] = r.Header.Get(k)
		}
		q, _ := ctx.Value(requestKey{}).(string)
		return map[string]any{"headers": h, "query": q}
	}
	ro := mcpgo.WithReadOnlyHintAnnotation(true)
	m.AddTool(mcpgo.NewTool("headers", mcpgo.WithDescription("Echoes the request's headers"), ro),
		func(ctx context.Context, r mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			v := seen(ctx, r)
			b, _ := json.Marshal(v)
			return mcpgo.NewToolResultStructured(v, string(b)), nil
		})
	m.AddTool(mcpgo.NewTool("headers_text", mcpgo.WithDescription("Echoes the request's headers as text"), ro),
		func(ctx context.Context, r mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			return mcpgo.NewToolResultText(fmt.Sprint(seen(ctx, r))), nil
		})
	m.AddTool(mcpgo.NewTool("headers_escaped", mcpgo.WithDescription("Echoes the headers, every character escaped"), ro),
		func(ctx context.Context, r mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			var b strings.Builder
			b.WriteString(`{"headers":{`)
			i := 0
			for k, v := range seen(ctx, r)["headers"].(map[string]string) {
				if i > 0 {
					b.WriteByte(',')
				}
				i++
				fmt.Fprintf(&b, "%q:\"", k)
				for _, c := range v {
					fmt.Fprintf(&b, `\u%04x`, c)
				}
				b.WriteByte('"')
			}
			b.WriteString(`}}`)
			return &mcpgo.CallToolResult{Content: []mcpgo.Content{mcpgo.NewTextContent("see structuredContent")}, StructuredContent: json.RawMessage(b.String())}, nil
		})
	m.AddTool(mcpgo.NewTool("headers_error", mcpgo.WithDescription("Fails, quoting the request's headers"), ro),
		func(ctx context.Context, r mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			return mcpgo.NewToolResultError(fmt.Sprint("refused: ", seen(ctx, r))), nil
		})
	m.AddTool(mcpgo.NewTool("configured", mcpgo.WithDescription("Configured with "+headerSecret+" and "+apiKeySecret), ro),
		func(context.Context, mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			return mcpgo.NewToolResultText("ok"), nil
		})
	sh := server.NewStreamableHTTPServer(m, server.WithHTTPContextFunc(func(ctx context.Context, r *http.Request) context.Context {
		return context.WithValue(ctx, requestKey{}, r.URL.RawQuery)
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String() + "/mcp"
	var h http.Handler = sh
	if wrap != nil {
		h = wrap(url, sh)
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
	return url
}

// checkResult fails if the result, as the guest would parse it, holds a
// secret, or if it is not JSON; it returns the parsed result re-encoded
// without escapes.
func checkResult(t *testing.T, what, out string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%s: the result is not JSON any more: %v\n%s", what, err, out)
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	if strings.Contains(b.String(), secretMarker) {
		t.Errorf("%s: a secret reaches the script: %s", what, b.String())
	}
	return b.String()
}

// TestResultsNeverCarrySecrets: a server that echoes its request's headers
// and query hands the script every configured secret — an Authorization
// header resolved from the environment, an X-Api-Key written in the
// config, URL credentials and query values, an OAuth access token — unless
// the pool masks them in results (structured and text content, however
// escaped), in errors, in tool descriptions and in its logs. A value too
// short to be a credential (under redact.MinLen) is left as it is.
func TestResultsNeverCarrySecrets(t *testing.T) {
	plain := headerEchoServer(t, nil)
	cfg := secretConfig(t, "hdr", plain, TransportStreamable)
	cfg.Headers["X-Api-Key"] = apiKeySecret
	cfg.Headers["X-Short"] = "ab1"
	// URL credentials go out as Basic auth where no Authorization header
	// is configured.
	basic := secretConfig(t, "basic", plain, TransportStreamable)
	basic.Headers = nil

	as := oauthserver.Start(t, oauthserver.Options{})
	protected := headerEchoServer(t, func(url string, h http.Handler) http.Handler { return as.Protect(url, h) })
	oauth := Config{Config: toolsource.Config{Name: "oauth"}, URL: protected, Transport: TransportStreamable, Auth: oauthclient.Config{Type: oauthclient.TypeOAuth}}

	l := &leakCheck{t: t}
	p := newTestPool(t, []Config{cfg, basic, oauth},
		withLogger(newLockedLogger(&l.logs, &l.mu)), withCredentialsDir(t.TempDir()), withLoginAgent(oauthclient.Headless{}))
	for _, server := range []string{"hdr", "basic"} {
		waitTools(t, p, server, "headers", "headers_text", "headers_escaped", "headers_error", "configured")
	}

	for _, server := range []string{"hdr", "basic", "oauth"} {
		for _, tool := range []string{"headers", "headers_text", "headers_escaped"} {
			what := server + ":" + tool
			out, err := call(t, p, server, tool, `{}`, CallOptions{ParseJSONText: tool == "headers_escaped"})
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			got := checkResult(t, what, out)
			if !strings.Contains(got, "[REDACTED]") {
				t.Errorf("%s: nothing was masked: %s", what, got)
			}
			if server == "hdr" && !strings.Contains(got, "ab1") {
				t.Errorf("%s: a 3-byte header value was masked: %s", what, got)
			}
		}
		_, err := call(t, p, server, "headers_error", `{}`, CallOptions{})
		if err == nil {
			t.Fatalf("%s:headers_error succeeded", server)
		}
		l.err(server+":headers_error", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tools, err := p.Tools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Only hdr is sent those two values: the same process serving basic
	// is no server that could know them.
	var hdr []any
	for _, tl := range tools {
		if tl.Server == "hdr" {
			hdr = append(hdr, tl)
		}
	}
	b, _ := json.Marshal(hdr)
	if strings.Contains(string(b), secretMarker) || !strings.Contains(string(b), "Configured with [REDACTED] and [REDACTED]") {
		t.Errorf("tool descriptions carry secrets: %s", b)
	}
	l.health(p)
	l.closeAndCheckLogs(p)
}
