package mcpclient

import (
	"context"
	"encoding/json"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/execution"
)

// Source offers the tools of the pool's remote MCP servers to the
// execution service; the pool validates arguments, enforces per-server
// policy and normalises results. It owns its servers' names (see
// execution.ServerSource).
type Source struct {
	Pool *Pool
}

// Tools implements execution.ToolSource.
func (s Source) Tools(ctx context.Context) ([]catalog.Tool, error) {
	return s.Pool.Tools(ctx)
}

// Servers implements execution.ServerSource: every configured server,
// reachable or not.
func (s Source) Servers() []string { return s.Pool.Servers() }

// CheckServer implements execution.ServerSource.
func (s Source) CheckServer(server string) error { return s.Pool.CheckServer(server) }

// Call implements execution.ToolSource.
func (s Source) Call(ctx context.Context, t catalog.Tool, args json.RawMessage, opt execution.CallOptions) (json.RawMessage, error) {
	return s.Pool.Call(ctx, t.Server, t.Name, args, CallOptions{
		AllowDestructive: opt.AllowDestructive,
		ParseJSONText:    opt.ParseJSONText,
		Retry:            opt.Retry,
	})
}

var _ execution.ServerSource = Source{}
