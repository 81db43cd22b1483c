package app

import (
	"context"

	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/httpapi"
)

// capabilityAPI serves the registry to the HTTP routes and MCP tools.
type capabilityAPI struct{ reg capability.Registry }

func (c capabilityAPI) List(ctx context.Context) (any, error) { return c.reg.List(ctx) }

func (c capabilityAPI) Save(ctx context.Context, s httpapi.CapabilitySave) (any, error) {
	return c.reg.Save(ctx, capability.Capability{Name: s.Name, Code: s.Code, Description: s.Description, InputSchema: s.InputSchema})
}
