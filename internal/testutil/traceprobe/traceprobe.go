// Package traceprobe is a real MCP server for tests that records the trace
// context each tool call arrived with: the traceparent and tracestate in
// the request's _meta, and the same HTTP headers; and the idempotency key
// (_meta's io.pml/idempotency-key, the Idempotency-Key header). It serves streamable
// HTTP at /mcp and SSE at /sse on one loopback port, with one tool,
// echo, that answers its arguments.
package traceprobe

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// Seen is one call as the server received it.
type Seen struct {
	Tool string
	// MetaParent and MetaState are _meta's traceparent and tracestate.
	MetaParent, MetaState string
	// HeaderParent and HeaderState are the HTTP request's traceparent and
	// tracestate headers.
	HeaderParent, HeaderState string
	// MetaKey is _meta's io.pml/idempotency-key; HeaderKeys are the
	// request's Idempotency-Key headers (all of them: one is expected).
	MetaKey    string
	HeaderKeys []string
	Args       json.RawMessage
}

// Server is a running probe.
type Server struct {
	addr string
	hs   *http.Server

	mu   sync.Mutex
	seen []Seen
}

type headerKey struct{}

// Start serves on 127.0.0.1 until the test ends.
func Start(tb testing.TB) *Server {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s := &Server{addr: ln.Addr().String()}
	m := server.NewMCPServer("traceprobe", "1.0.0", server.WithToolCapabilities(false))
	m.AddTool(mcp.NewTool("echo", mcp.WithDescription("Answers its arguments."), mcp.WithString("text"), mcp.WithReadOnlyHintAnnotation(true), mcp.WithDestructiveHintAnnotation(false)), s.echo)
	keep := func(ctx context.Context, r *http.Request) context.Context {
		return context.WithValue(ctx, headerKey{}, r.Header.Clone())
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", server.NewStreamableHTTPServer(m, server.WithHTTPContextFunc(keep), server.WithStateLess(true)))
	sse := server.NewSSEServer(m, server.WithBaseURL("http://"+s.addr), server.WithSSEContextFunc(keep))
	mux.Handle("/sse", sse.SSEHandler())
	mux.Handle("/message", sse.MessageHandler())
	s.hs = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.hs.Serve(ln) }()
	tb.Cleanup(func() {
		_ = sse.Shutdown(context.Background())
		_ = s.hs.Close()
	})
	return s
}

func (s *Server) echo(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	seen := Seen{Tool: req.Params.Name}
	if m := req.Params.Meta; m != nil {
		seen.MetaParent, _ = m.AdditionalFields["traceparent"].(string)
		seen.MetaState, _ = m.AdditionalFields["tracestate"].(string)
		seen.MetaKey, _ = m.AdditionalFields["io.pml/idempotency-key"].(string)
	}
	if h, ok := ctx.Value(headerKey{}).(http.Header); ok {
		seen.HeaderParent, seen.HeaderState = h.Get("traceparent"), h.Get("tracestate")
		seen.HeaderKeys = h.Values("Idempotency-Key")
	}
	seen.Args, _ = json.Marshal(req.GetArguments())
	s.mu.Lock()
	s.seen = append(s.seen, seen)
	s.mu.Unlock()
	return mcp.NewToolResultStructuredOnly(req.GetArguments()), nil
}

// StreamableURL is the streamable HTTP endpoint.
func (s *Server) StreamableURL() string { return "http://" + s.addr + "/mcp" }

// SSEURL is the SSE endpoint.
func (s *Server) SSEURL() string { return "http://" + s.addr + "/sse" }

// Seen returns the calls received so far, oldest first.
func (s *Server) Seen() []Seen {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Seen(nil), s.seen...)
}
