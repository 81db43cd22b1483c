package bridge

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/pml-sandbox/pml/internal/argcheck"
	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/trace"
)

// DemoSource offers the built-in demo tools (echo, add, sleep, fail). They
// need no network, so a first run works anywhere.
type DemoSource struct{}

// demoValidators holds one validator per demo tool, by name, shared by
// every DemoSource (the schemas never change).
var demoValidators = sync.OnceValue(func() map[string]*argcheck.Validator {
	vs := map[string]*argcheck.Validator{}
	for _, d := range guest.DemoTools() {
		vs[d.Name] = argcheck.New(d.InputSchema)
	}
	return vs
})

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

// Call implements ToolSource. Arguments are checked against the tool's
// input schema first, as MCP tools' and capabilities' are, so a bad one is
// the same INVALID_ARGUMENTS naming the failing field rather than whatever
// the demo host's decoding says.
func (DemoSource) Call(ctx context.Context, t catalog.Tool, args json.RawMessage, opt CallOptions) (json.RawMessage, error) {
	// A name the demo host does not know has no validator; the host
	// answers TOOL_NOT_FOUND for it.
	if v := demoValidators()[t.Name]; v != nil && t.Server == guest.DemoServer {
		checked, ferr := v.Check(args)
		if ferr != nil {
			return nil, ferr.WithTool(t.Server + ":" + t.Name)
		}
		args = checked
	}
	return guest.DemoHost{}.CallTool(ctx, guest.Call{ID: opt.CallID, Server: t.Server, Tool: t.Name, Args: args})
}
