package bridge

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/pml-sandbox/pml/internal/argcheck"
	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/trace"
)

// DemoSource offers the demo tools (internal/demoserver: echo, add, fail,
// sleep, the scratch key-value store, text tools, clock) in process, as
// server "demo". They need no network, so a first run works anywhere; the
// same tools are served over MCP by demoserver.Start.
type DemoSource struct {
	// Set is the tool set served, with its scratch store; nil means one
	// set shared by every DemoSource of the process.
	Set *demoserver.Tools
}

// sharedDemo is the set a DemoSource without Tools serves.
var sharedDemo = sync.OnceValue(demoserver.New)

// demoValidators holds one validator per demo tool, by name, shared by
// every DemoSource (the schemas never change).
var demoValidators = sync.OnceValue(func() map[string]*argcheck.Validator {
	vs := map[string]*argcheck.Validator{}
	for _, d := range demoserver.Definitions() {
		vs[d.Name] = argcheck.New(d.InputSchema)
	}
	return vs
})

// Tools implements ToolSource.
func (DemoSource) Tools(context.Context) ([]catalog.Tool, error) {
	defs := demoserver.Definitions()
	out := make([]catalog.Tool, len(defs))
	for i, d := range defs {
		out[i] = catalog.Tool{Server: demoserver.Name, Name: d.Name, Description: d.Description, InputSchema: d.InputSchema,
			OutputSchema: d.OutputSchema, Annotations: d.Annotations, Kind: trace.KindBuiltin}
	}
	return out, nil
}

// Call implements ToolSource. Arguments are checked against the tool's
// input schema first, as MCP tools' and capabilities' are, so a bad one is
// the same INVALID_ARGUMENTS naming the failing field rather than whatever
// the tool's decoding says.
func (s DemoSource) Call(ctx context.Context, t catalog.Tool, args json.RawMessage, _ CallOptions) (json.RawMessage, error) {
	v := demoValidators()[t.Name]
	if v == nil || t.Server != demoserver.Name {
		return nil, fault.New(fault.ToolNotFound, "the demo tools have no %s", t.FullName()).WithTool(t.FullName())
	}
	checked, ferr := v.Check(args)
	if ferr != nil {
		return nil, ferr.WithTool(t.FullName())
	}
	set := s.Set
	if set == nil {
		set = sharedDemo()
	}
	return set.Call(ctx, t.Name, checked)
}
