package app

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/pml-sandbox/pml/internal/ask"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/openapisrc"
	"github.com/pml-sandbox/pml/internal/secretref"
	"github.com/pml-sandbox/pml/internal/serverconfig"
	"github.com/pml-sandbox/pml/internal/toolsource"
	lambdakind "github.com/pml-sandbox/pml/internal/toolsource/lambda"
	mcpkind "github.com/pml-sandbox/pml/internal/toolsource/mcp"
)

// openSources starts the tool sources of the server list: one
// toolsource.Set of the kinds on the tool-source kernel (MCP servers,
// then Lambda functions), then the OpenAPI services, each owning its
// servers' names (which must be unique across kinds).
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
	specs := make([]toolsource.Spec, 0, len(servers.MCP)+len(servers.Lambda))
	for _, c := range servers.MCP {
		specs = append(specs, c)
	}
	for _, c := range servers.Lambda {
		specs = append(specs, c)
	}
	if len(specs) > 0 {
		a.MCP = &mcpkind.Kind{Answerer: answerer}
		set, err := toolsource.New(ctx, toolsource.NewRegistry(a.MCP, lambdakind.Kind{}), specs,
			toolsource.Env{Logger: log, Refs: refs, AWS: a.aws.load, OAuth: auth.oauth(&a.aws)})
		if err != nil {
			return nil, fmt.Errorf("tool sources: %w", err)
		}
		a.Tools = set
		a.closers = append(a.closers, func(context.Context) error { return set.Close() })
		sources = append(sources, set)
	}
	if len(servers.OpenAPI) > 0 {
		src, err := openapisrc.New(ctx, servers.OpenAPI, openapisrc.Options{Logger: log, AWS: a.aws.load,
			CredentialsDir: auth.CredentialsDir, Secrets: a.aws.secrets, Agent: auth.Agent, Refs: refs})
		if err != nil {
			return nil, fmt.Errorf("openapi servers: %w", err)
		}
		a.OpenAPI = src
		a.closers = append(a.closers, func(context.Context) error { return src.Close() })
		sources = append(sources, src)
	}
	return sources, nil
}

// sourceHealth is the OpenAPI services' health in the kernel's shape, so
// that /healthz and pml tools list every server alike; Transport says
// which kind each is.
func (a *App) sourceHealth() []toolsource.Health {
	var out []toolsource.Health
	if a.OpenAPI != nil {
		for _, h := range a.OpenAPI.Health() {
			out = append(out, toolsource.Health{Name: h.Name, URL: h.URL, State: toolsource.State(h.State),
				LastError: h.LastError, Since: h.Since, Tools: h.Tools, Transport: serverconfig.TypeOpenAPI})
		}
	}
	return out
}
