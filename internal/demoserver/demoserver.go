// Package demoserver is a small but real MCP server — a scratch key-value
// store, text utilities and a clock — served over both SSE and streamable
// HTTP on a loopback listener. `pml serve` starts it so a first run does
// something real, and the tests use it as a genuine remote server.
package demoserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// Server is a running demo MCP server.
type Server struct {
	addr string
	hs   *http.Server
	done chan struct{}

	mu sync.Mutex
	kv map[string]json.RawMessage
}

// Start listens on addr ("127.0.0.1:0" picks a free port) and serves until
// Close.
func Start(addr string) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("demoserver: %w", err)
	}
	s := &Server{addr: ln.Addr().String(), kv: map[string]json.RawMessage{}, done: make(chan struct{})}
	m := server.NewMCPServer("pml-demo", "1.0.0", server.WithToolCapabilities(true))
	s.addTools(m)
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

func (s *Server) addTools(m *server.MCPServer) {
	readOnly := mcp.WithReadOnlyHintAnnotation(true)
	m.AddTool(mcp.NewTool("kv_set",
		mcp.WithDescription("Store a JSON value under a key in the scratch key-value store."),
		mcp.WithString("key", mcp.Required(), mcp.Description("the key")),
		mcp.WithAny("value", mcp.Required(), mcp.Description("any JSON value")),
		mcp.WithIdempotentHintAnnotation(true), mcp.WithDestructiveHintAnnotation(false), mcp.WithReadOnlyHintAnnotation(false),
		mcp.WithRawOutputSchema(json.RawMessage(`{"type":"object","properties":{"key":{"type":"string"},"stored":{"type":"boolean"}}}`)),
	), s.kvSet)
	m.AddTool(mcp.NewTool("kv_get",
		mcp.WithDescription("Read the JSON value stored under a key."),
		mcp.WithString("key", mcp.Required()), readOnly,
		mcp.WithRawOutputSchema(json.RawMessage(`{"type":"object","properties":{"key":{"type":"string"},"found":{"type":"boolean"},"value":{}}}`)),
	), s.kvGet)
	m.AddTool(mcp.NewTool("kv_list",
		mcp.WithDescription("List the keys in the scratch store, optionally those starting with a prefix."),
		mcp.WithString("prefix"), readOnly,
		mcp.WithRawOutputSchema(json.RawMessage(`{"type":"object","properties":{"keys":{"type":"array","items":{"type":"string"}}}}`)),
	), s.kvList)
	m.AddTool(mcp.NewTool("kv_delete",
		mcp.WithDescription("Delete a key from the scratch store."),
		mcp.WithString("key", mcp.Required()),
		mcp.WithDestructiveHintAnnotation(true), mcp.WithReadOnlyHintAnnotation(false),
	), s.kvDelete)
	m.AddTool(mcp.NewTool("word_count",
		mcp.WithDescription("Count the words, lines and characters of a text."),
		mcp.WithString("text", mcp.Required()), readOnly,
		mcp.WithRawOutputSchema(json.RawMessage(`{"type":"object","properties":{"words":{"type":"integer"},"lines":{"type":"integer"},"chars":{"type":"integer"}}}`)),
	), wordCount)
	m.AddTool(mcp.NewTool("transform_text",
		mcp.WithDescription("Transform a text: upper, lower, title case or reverse."),
		mcp.WithString("text", mcp.Required()),
		mcp.WithString("op", mcp.Required(), mcp.Enum("upper", "lower", "title", "reverse")), readOnly,
	), transformText)
	m.AddTool(mcp.NewTool("now",
		mcp.WithDescription("The current time as ISO 8601 and Unix milliseconds."), readOnly,
		mcp.WithRawOutputSchema(json.RawMessage(`{"type":"object","properties":{"iso":{"type":"string"},"unix_ms":{"type":"integer"}}}`)),
	), now)
	m.AddTool(mcp.NewTool("sleep",
		mcp.WithDescription("Wait ms milliseconds (at most 10000), then answer; for trying timeouts and parallel calls."),
		mcp.WithNumber("ms", mcp.Required(), mcp.Min(0), mcp.Max(10000)), readOnly,
	), sleep)
}

func (s *Server) kvSet(_ context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	key := r.GetString("key", "")
	raw, err := json.Marshal(r.GetArguments()["value"])
	if err != nil {
		return mcp.NewToolResultError("value is not JSON: " + err.Error()), nil
	}
	s.mu.Lock()
	s.kv[key] = raw
	s.mu.Unlock()
	return mcp.NewToolResultStructured(map[string]any{"key": key, "stored": true}, "stored "+key), nil
}

func (s *Server) kvGet(_ context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	key := r.GetString("key", "")
	s.mu.Lock()
	raw, ok := s.kv[key]
	s.mu.Unlock()
	out := map[string]any{"key": key, "found": ok}
	if ok {
		out["value"] = raw
	}
	return mcp.NewToolResultStructured(out, string(raw)), nil
}

func (s *Server) kvList(_ context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	prefix := r.GetString("prefix", "")
	s.mu.Lock()
	keys := []string{}
	for k := range s.kv {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	s.mu.Unlock()
	slices.Sort(keys)
	return mcp.NewToolResultStructured(map[string]any{"keys": keys}, strings.Join(keys, "\n")), nil
}

func (s *Server) kvDelete(_ context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	key := r.GetString("key", "")
	s.mu.Lock()
	_, ok := s.kv[key]
	delete(s.kv, key)
	s.mu.Unlock()
	if !ok {
		return mcp.NewToolResultError("no key " + key), nil
	}
	return mcp.NewToolResultText("deleted " + key), nil
}

func wordCount(_ context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	text := r.GetString("text", "")
	out := map[string]any{
		"words": len(strings.Fields(text)),
		"lines": strings.Count(text, "\n") + 1,
		"chars": len([]rune(text)),
	}
	return mcp.NewToolResultStructured(out, fmt.Sprint(out["words"])), nil
}

func transformText(_ context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	text := r.GetString("text", "")
	switch r.GetString("op", "") {
	case "upper":
		return mcp.NewToolResultText(strings.ToUpper(text)), nil
	case "lower":
		return mcp.NewToolResultText(strings.ToLower(text)), nil
	case "title":
		rs := []rune(text)
		for i := range rs {
			if i == 0 || unicode.IsSpace(rs[i-1]) {
				rs[i] = unicode.ToUpper(rs[i])
			}
		}
		return mcp.NewToolResultText(string(rs)), nil
	case "reverse":
		rs := []rune(text)
		slices.Reverse(rs)
		return mcp.NewToolResultText(string(rs)), nil
	}
	return mcp.NewToolResultError("op must be upper, lower, title or reverse"), nil
}

func now(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	t := time.Now().UTC()
	return mcp.NewToolResultStructured(map[string]any{"iso": t.Format(time.RFC3339Nano), "unix_ms": t.UnixMilli()}, t.Format(time.RFC3339Nano)), nil
}

func sleep(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	ms := r.GetFloat("ms", 0)
	t := time.NewTimer(time.Duration(ms * float64(time.Millisecond)))
	defer t.Stop()
	select {
	case <-t.C:
		return mcp.NewToolResultText(fmt.Sprintf("slept %g ms", ms)), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
