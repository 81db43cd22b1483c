package bridge

import (
	"context"
	"encoding/json"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/mcpclient"
)

// MCPSource offers the tools of remote MCP servers through a client pool,
// which validates arguments, enforces per-server policy and normalises
// results. It owns its servers' names (see ServerSource).
type MCPSource struct {
	Pool *mcpclient.Pool
}

// Tools implements ToolSource.
func (s MCPSource) Tools(ctx context.Context) ([]catalog.Tool, error) {
	return s.Pool.Tools(ctx)
}

// Servers implements ServerSource: every configured server, reachable or
// not.
func (s MCPSource) Servers() []string { return s.Pool.Servers() }

// CheckServer implements ServerSource.
func (s MCPSource) CheckServer(server string) error { return s.Pool.CheckServer(server) }

// Call implements ToolSource.
func (s MCPSource) Call(ctx context.Context, t catalog.Tool, args json.RawMessage, opt CallOptions) (json.RawMessage, error) {
	return s.Pool.Call(ctx, t.Server, t.Name, args, mcpclient.CallOptions{
		AllowDestructive: opt.AllowDestructive,
		ParseJSONText:    opt.ParseJSONText,
	})
}

var _ ServerSource = MCPSource{}
