// Package ledger is a real MCP server over streamable HTTP on loopback
// for tests of undo: an order book whose every call is recorded in the
// order it arrived. create_order makes an order ({"id": "o-N"}),
// cancel_order (the undo a deployment declares for it) cancels one — and
// fails, as a server refusing would, for an order whose item is "stuck"
// or that is not open — and set_price replaces a price and answers the
// one it replaced (undone by setting that back). Its tools are annotated
// (neither read-only nor destructive) so that undo runs without a
// person's approval; calls are the server's own record, read by the test.
package ledger

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// Server is a running ledger.
type Server struct {
	URL string

	mu     sync.Mutex
	calls  []string
	n      int
	open   map[string]string // order id → item
	prices map[string]float64
}

// Start serves a new ledger on a free loopback port until the test ends.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s := &Server{open: map[string]string{}, prices: map[string]float64{}}
	m := server.NewMCPServer("ledger", "1.0.0", server.WithToolCapabilities(false))
	write := []mcp.ToolOption{mcp.WithReadOnlyHintAnnotation(false), mcp.WithDestructiveHintAnnotation(false), mcp.WithOpenWorldHintAnnotation(false)}
	m.AddTool(mcp.NewTool("create_order", append([]mcp.ToolOption{mcp.WithDescription("Open an order for an item."),
		mcp.WithString("item", mcp.Required())}, write...)...), s.create)
	m.AddTool(mcp.NewTool("cancel_order", append([]mcp.ToolOption{mcp.WithDescription("Cancel an open order."),
		mcp.WithString("order_id", mcp.Required())}, write...)...), s.cancel)
	m.AddTool(mcp.NewTool("set_price", append([]mcp.ToolOption{mcp.WithDescription("Set an item's price; answers the price it replaced."),
		mcp.WithString("item", mcp.Required()), mcp.WithNumber("price", mcp.Required())}, write...)...), s.setPrice)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", server.NewStreamableHTTPServer(m, server.WithStateLess(true)))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = hs.Serve(ln)
	}()
	tb.Cleanup(func() {
		_ = hs.Close()
		<-done
	})
	s.URL = "http://" + ln.Addr().String() + "/mcp"
	return s
}

// Calls are the calls the server received, in order: "create_order
// ITEM", "cancel_order ID", "set_price ITEM PRICE".
func (s *Server) Calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// Open are the open orders' ids, sorted.
func (s *Server) Open() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for id := range s.open {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// Price is an item's price (0 when never set).
func (s *Server) Price(item string) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.prices[item]
}

func (s *Server) create(_ context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	item := r.GetString("item", "")
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, "create_order "+item)
	s.n++
	id := fmt.Sprintf("o-%d", s.n)
	s.open[id] = item
	return mcp.NewToolResultStructured(map[string]any{"id": id, "item": item}, id), nil
}

func (s *Server) cancel(_ context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	id := r.GetString("order_id", "")
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, "cancel_order "+id)
	item, ok := s.open[id]
	switch {
	case !ok:
		return mcp.NewToolResultError("no open order " + id), nil
	case item == "stuck":
		return mcp.NewToolResultError("order " + id + " has shipped: it cannot be cancelled"), nil
	}
	delete(s.open, id)
	return mcp.NewToolResultStructured(map[string]any{"cancelled": id}, "cancelled "+id), nil
}

func (s *Server) setPrice(_ context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	item := r.GetString("item", "")
	price, err := r.RequireFloat("price")
	if err != nil {
		return nil, errors.New("price is required")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, fmt.Sprintf("set_price %s %g", item, price))
	prev := s.prices[item]
	s.prices[item] = price
	return mcp.NewToolResultStructured(map[string]any{"item": item, "previous": prev}, fmt.Sprintf("%s was %g", item, prev)), nil
}
