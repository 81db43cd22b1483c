package bridge

import (
	"context"
	"encoding/json"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/trace"
)

// DemoSource offers the built-in demo tools (echo, add, sleep, fail). They
// need no network, so a first run works anywhere.
type DemoSource struct{}

// Tools implements ToolSource.
func (DemoSource) Tools(context.Context) ([]catalog.Tool, error) {
	defs := guest.DemoTools()
	out := make([]catalog.Tool, len(defs))
	for i, d := range defs {
		ro := d.Name != "fail"
		out[i] = catalog.Tool{Server: d.Server, Name: d.Name, Description: d.Description, InputSchema: d.InputSchema,
			Kind: trace.KindBuiltin, Annotations: catalog.Annotations{ReadOnly: &ro}}
	}
	return out, nil
}

// Call implements ToolSource.
func (DemoSource) Call(ctx context.Context, t catalog.Tool, args json.RawMessage, opt CallOptions) (json.RawMessage, error) {
	return guest.DemoHost{}.CallTool(ctx, guest.Call{ID: opt.CallID, Server: t.Server, Tool: t.Name, Args: args})
}
