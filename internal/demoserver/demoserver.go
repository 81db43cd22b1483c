// Package demoserver is PML Sandbox's demo tool set, implemented once and
// offered two ways. Start serves it as a real MCP server over SSE and
// streamable HTTP on a loopback listener: `pml serve` starts one so a first
// run does something real, `pml demo-server` runs one on its own, and tests
// use it as a genuine remote server. Tools.Call runs the same tools in
// process, without a network: the executor's DemoSource (what `pml run`
// offers when no MCP server is configured) and the benchmark harness's
// per-call path (Guest) call it.
//
// The tools: echo, add, fail and sleep for trying calls, errors, timeouts
// and parallelism; kv_set, kv_get, kv_list and kv_delete over a scratch
// key-value store; word_count and transform_text; now.
package demoserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/pml-sandbox/pml/internal/fault"
)

// Server is a running demo MCP server.
type Server struct {
	addr string
	hs   *http.Server
	done chan struct{}
}

// Start listens on addr ("127.0.0.1:0" picks a free port) and serves a new
// demo tool set until Close.
func Start(addr string) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("demoserver: %w", err)
	}
	s := &Server{addr: ln.Addr().String(), done: make(chan struct{})}
	m := server.NewMCPServer("pml-demo", "1.0.0", server.WithToolCapabilities(true))
	tools := New()
	for _, def := range definitions {
		m.AddTool(mcpTool(def), tools.handler(def.Name))
	}
	sse := server.NewSSEServer(m, server.WithKeepAlive(false))
	mux := http.NewServeMux()
	mux.Handle("/sse", sse)
	mux.Handle("/message", sse)
	mux.Handle("/mcp", server.NewStreamableHTTPServer(m, server.WithStateLess(true)))
	s.hs = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		defer close(s.done)
		_ = s.hs.Serve(ln)
	}()
	return s, nil
}

// SSEURL is the server's SSE endpoint.
func (s *Server) SSEURL() string { return "http://" + s.addr + "/sse" }

// StreamableURL is the server's streamable HTTP endpoint.
func (s *Server) StreamableURL() string { return "http://" + s.addr + "/mcp" }

// Addr is the listening address.
func (s *Server) Addr() string { return s.addr }

// Close stops the server and its open streams.
func (s *Server) Close() error {
	err := s.hs.Close()
	<-s.done
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// mcpTool is def as MCP lists it.
func mcpTool(def Tool) mcp.Tool {
	t := mcp.NewToolWithRawSchema(def.Name, def.Description, def.InputSchema)
	t.RawOutputSchema = def.OutputSchema
	a := def.Annotations
	t.Annotations = mcp.ToolAnnotation{ReadOnlyHint: a.ReadOnly, DestructiveHint: a.Destructive, IdempotentHint: a.Idempotent, OpenWorldHint: a.OpenWorld}
	return t
}

// handler answers tools/call for the tool name. A tool's own failure is an
// isError result with its message, as MCP asks; a string result is a text
// item; any other result is structured content with its JSON as the text.
// add's number is structured content too, though MCP expects an object
// there: a script must get 5 from mcp.demo.add whether the demo tools run
// in process or behind this server, and a text "5" would reach it as a
// string.
func (t *Tools) handler(name string) server.ToolHandlerFunc {
	return func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		args, err := json.Marshal(r.GetRawArguments())
		if err != nil {
			return mcp.NewToolResultError("arguments are not JSON: " + err.Error()), nil
		}
		if string(args) == "null" {
			args = nil
		}
		out, err := t.Call(ctx, name, args)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return mcp.NewToolResultError(fault.As(err).Message), nil
		}
		var text string
		if json.Unmarshal(out, &text) == nil {
			return mcp.NewToolResultText(text), nil
		}
		return mcp.NewToolResultStructured(out, string(out)), nil
	}
}
