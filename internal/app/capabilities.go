package app

import (
	"context"

	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/httpapi"
)

// capabilityAPI serves the registry to the HTTP routes and MCP tools:
// listings from the process's index, saves to the registry (and into the
// index at once, so this process lists what it just saved).
type capabilityAPI struct {
	reg   capability.Registry
	index *capability.Index
}

func (c capabilityAPI) List(ctx context.Context) (any, error) { return c.index.List(ctx) }

func (c capabilityAPI) Save(ctx context.Context, s httpapi.CapabilitySave) (any, error) {
	saved, err := c.reg.Save(ctx, capability.Capability{Name: s.Name, Code: s.Code, Description: s.Description, InputSchema: s.InputSchema})
	if err != nil {
		return nil, err
	}
	c.index.Saved(saved)
	return saved, nil
}
