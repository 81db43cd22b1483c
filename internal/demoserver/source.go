package demoserver

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/pml-sandbox/pml/internal/argcheck"
	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/trace"
)

// Source offers the demo tools (echo, add, fail, sleep, the scratch
// key-value store, text tools, clock) to the execution service in process,
// as server "demo". They need no network, so a first run works anywhere;
// the same tools are served over MCP by Start.
type Source struct {
	// Set is the tool set served, with its scratch store; nil means one
	// set shared by every Source of the process.
	Set *Tools
}

// sharedDemo is the set a Source without Set serves.
var sharedDemo = sync.OnceValue(New)

// demoValidators holds one validator per demo tool, by name, shared by
// every Source (the schemas never change).
var demoValidators = sync.OnceValue(func() map[string]*argcheck.Validator {
	vs := map[string]*argcheck.Validator{}
	for _, d := range Definitions() {
		vs[d.Name] = argcheck.New(d.InputSchema)
	}
	return vs
})

// Tools implements execution.ToolSource. The list never changes, so every
// call answers the same slice (callers must not modify it): the executor
// then merges it once, not once per execution.
func (Source) Tools(context.Context) ([]catalog.Tool, error) {
	return demoCatalog(), nil
}

var demoCatalog = sync.OnceValue(func() []catalog.Tool {
	defs := Definitions()
	out := make([]catalog.Tool, len(defs))
	for i, d := range defs {
		out[i] = catalog.Tool{Server: Name, Name: d.Name, Description: d.Description, InputSchema: d.InputSchema,
			OutputSchema: d.OutputSchema, Annotations: d.Annotations, Kind: trace.KindBuiltin}
	}
	return out
})

// Precheck implements execution.Prechecker: the arguments against the
// tool's input schema, as Call checks them first.
func (Source) Precheck(_ context.Context, t catalog.Tool, args json.RawMessage, _ execution.CallOptions) error {
	v := demoValidators()[t.Name]
	if v == nil || t.Server != Name {
		return fault.New(fault.ToolNotFound, "the demo tools have no %s", t.FullName()).WithTool(t.FullName())
	}
	if _, ferr := v.Check(args); ferr != nil {
		return ferr.WithTool(t.FullName())
	}
	return nil
}

// Call implements execution.ToolSource. Arguments are checked against the tool's
// input schema first, as MCP tools' and capabilities' are, so a bad one is
// the same INVALID_ARGUMENTS naming the failing field rather than whatever
// the tool's decoding says.
func (s Source) Call(ctx context.Context, t catalog.Tool, args json.RawMessage, _ execution.CallOptions) (json.RawMessage, error) {
	v := demoValidators()[t.Name]
	if v == nil || t.Server != Name {
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
