package app

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/pml-sandbox/pml/internal/ask"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/secretref"
	"github.com/pml-sandbox/pml/internal/serverconfig"
	"github.com/pml-sandbox/pml/internal/toolsource"
	lambdakind "github.com/pml-sandbox/pml/internal/toolsource/lambda"
	mcpkind "github.com/pml-sandbox/pml/internal/toolsource/mcp"
	"github.com/pml-sandbox/pml/internal/toolsource/openapi"
)

// openSources starts the tool sources of the server list: one
// toolsource.Set of every configured server (MCP servers, OpenAPI
// services, Lambda functions), each owning its name.
func (a *App) openSources(ctx context.Context, servers serverconfig.Servers, auth MCPAuthConfig, answerer ask.Answerer, log *slog.Logger) ([]execution.ToolSource, error) {
	seen := map[string]bool{}
	for _, name := range servers.Names() {
		if seen[name] {
			return nil, fault.New(fault.InvalidRequest, "two servers are named %q", name)
		}
		seen[name] = true
	}
	var sources []execution.ToolSource
	// One resolver for every source's secret references: a Secrets
	// Manager secret is read once per process and lifetime, through the
	// app's one client.
	refs := secretref.New(func(ctx context.Context) (secretref.API, error) { return a.aws.secrets(ctx) }, secretref.Options{})
	specs := make([]toolsource.Spec, 0, servers.Len())
	for _, c := range servers.MCP {
		specs = append(specs, c)
	}
	for _, c := range servers.OpenAPI {
		specs = append(specs, c)
	}
	for _, c := range servers.Lambda {
		specs = append(specs, c)
	}
	if len(specs) > 0 {
		a.MCP = &mcpkind.Kind{Answerer: answerer}
		set, err := toolsource.New(ctx, toolsource.NewRegistry(a.MCP, openapi.Kind{}, lambdakind.Kind{}), specs,
			toolsource.Env{Logger: log, Refs: refs, AWS: a.aws.load, OAuth: auth.oauth(&a.aws)})
		if err != nil {
			return nil, fmt.Errorf("tool sources: %w", err)
		}
		a.Tools = set
		a.closers = append(a.closers, func(context.Context) error { return set.Close() })
		sources = append(sources, set)
	}
	return sources, nil
}
