// Package askserver is a real MCP server (mcp-go, streamable HTTP on
// loopback) whose tools ask their client's user a question before they
// answer, as 2026-07-28 servers do (input_required with an elicitation and
// a requestState, SEP-2322; a 2025-11-25 session gets mcp-go's
// server-initiated elicitation/create instead). Tests of the calling side
// use it to check that the question reaches a person and that the retry
// carries the answers and the very state the server issued.
package askserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// Question is what confirm_delete asks, for tests to compare with what
// reaches the person.
const Question = "Delete %s? This cannot be undone."

// Server is a running ask server.
type Server struct {
	// URL is its streamable HTTP endpoint.
	URL string

	hs *http.Server
	sh *server.StreamableHTTPServer

	mu      sync.Mutex
	issued  map[string]string // requestState → the item it was issued for
	retries []Retry
}

// Retry is one call that came back with answers.
type Retry struct {
	Item  string
	State string
	// Known: the state was one this server issued for that item.
	Known  bool
	Answer *mcp.ElicitationResult
}

// Start serves the ask server on 127.0.0.1 until ctx ends or Close.
func Start() (*Server, error) {
	s := &Server{issued: map[string]string{}}
	m := server.NewMCPServer("ask", "1.0", server.WithToolCapabilities(true))
	schema := map[string]any{
		"type": "object",
		"properties": map[string]any{
			"confirmed": map[string]any{"type": "boolean", "title": "Delete it?"},
			"note":      map[string]any{"type": "string", "default": "none"},
		},
		"required": []string{"confirmed"},
	}
	confirm := func(_ context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		item := r.GetString("item", "")
		if ans := server.ElicitationResponse(r.Params.InputResponses, "confirm"); ans != nil {
			s.mu.Lock()
			issuedFor, known := s.issued[r.Params.RequestState]
			known = known && issuedFor == item
			delete(s.issued, r.Params.RequestState)
			s.retries = append(s.retries, Retry{Item: item, State: r.Params.RequestState, Known: known, Answer: ans})
			s.mu.Unlock()
			if !known {
				return mcp.NewToolResultError("requestState is not one this server issued for " + item), nil
			}
			content, _ := ans.Content.(map[string]any)
			if ans.Action != mcp.ElicitationResponseActionAccept || content["confirmed"] != true {
				return mcp.NewToolResultStructuredOnly(map[string]any{"deleted": false, "item": item}), nil
			}
			return mcp.NewToolResultStructuredOnly(map[string]any{"deleted": true, "item": item, "note": content["note"]}), nil
		}
		state := s.issue(item)
		return server.NewInputRequestBuilder(state).Elicit("confirm", mcp.ElicitationParams{
			Message:         fmt.Sprintf(Question, item),
			RequestedSchema: schema,
		}).ToolResult(), nil
	}
	m.AddTool(mcp.NewTool("confirm_delete", mcp.WithDescription("Deletes an item once the user confirms"),
		mcp.WithString("item", mcp.Required()), mcp.WithReadOnlyHintAnnotation(true)), confirm)
	// The same, said to be a write (not read-only, not destructive): an
	// effect, journalled, that needs no approval.
	m.AddTool(mcp.NewTool("archive", mcp.WithDescription("Archives an item once the user confirms"),
		mcp.WithString("item", mcp.Required()), mcp.WithReadOnlyHintAnnotation(false), mcp.WithDestructiveHintAnnotation(false)), confirm)
	m.AddTool(mcp.NewTool("summarise", mcp.WithDescription("Asks the client's model for a summary"), mcp.WithReadOnlyHintAnnotation(true)),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return server.NewInputRequestBuilder("").Sample("summary", mcp.CreateMessageParams{MaxTokens: 10,
				Messages: []mcp.SamplingMessage{{Role: mcp.RoleUser, Content: mcp.NewTextContent("summarise")}}}).ToolResult(), nil
		})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.sh = server.NewStreamableHTTPServer(m)
	s.hs = &http.Server{Handler: s.sh, ReadHeaderTimeout: 10 * time.Second}
	s.URL = "http://" + ln.Addr().String() + "/mcp"
	go func() { _ = s.hs.Serve(ln) }()
	return s, nil
}

func (s *Server) issue(item string) string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	state := "ask-" + hex.EncodeToString(b)
	s.mu.Lock()
	s.issued[state] = item
	s.mu.Unlock()
	return state
}

// Retries returns the calls that came back with answers, in order.
func (s *Server) Retries() []Retry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Retry(nil), s.retries...)
}

// Issued returns the states issued and not yet answered.
func (s *Server) Issued() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k := range s.issued {
		out = append(out, k)
	}
	return out
}

// Close stops the server.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return errors.Join(s.hs.Shutdown(ctx), s.sh.Shutdown(ctx))
}
