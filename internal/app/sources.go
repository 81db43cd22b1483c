package app

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/pml-sandbox/pml/internal/ask"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/mcpclient"
	"github.com/pml-sandbox/pml/internal/secretref"
	"github.com/pml-sandbox/pml/internal/serverconfig"
	"github.com/pml-sandbox/pml/internal/toolsource"
	"github.com/pml-sandbox/pml/internal/toolsource/lambda"
	"github.com/pml-sandbox/pml/internal/toolsource/openapi"
)

// openSources starts the tool sources of the server list: the MCP client
// pool, then one toolsource.Set of the OpenAPI services and the Lambda
// functions, each owning its servers' names (which must be unique across
// kinds).
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
	if len(servers.MCP) > 0 {
		opts := append(auth.options(&a.aws), mcpclient.WithLogger(log), mcpclient.WithSecretRefs(refs))
		if answerer != nil {
			opts = append(opts, mcpclient.WithAnswerer(answerer))
		}
		pool, err := mcpclient.New(ctx, servers.MCP, opts...)
		if err != nil {
			return nil, fmt.Errorf("mcp servers: %w", err)
		}
		a.Pool = pool
		a.closers = append(a.closers, func(context.Context) error { return pool.Close() })
		sources = append(sources, mcpclient.Source{Pool: pool})
	}
	// The kinds on the tool-source kernel share one Set: OpenAPI services,
	// then Lambda functions, in the list's order within each.
	var specs []toolsource.Spec
	for _, c := range servers.OpenAPI {
		specs = append(specs, c)
	}
	for _, c := range servers.Lambda {
		specs = append(specs, c)
	}
	if len(specs) > 0 {
		set, err := toolsource.New(ctx, toolsource.NewRegistry(openapi.Kind{}, lambda.Kind{}), specs,
			toolsource.Env{Logger: log, Refs: refs, AWS: a.aws.load,
				OAuth: toolsource.OAuth{CredentialsDir: auth.CredentialsDir, Secrets: a.aws.secrets, Agent: auth.Agent}})
		if err != nil {
			return nil, fmt.Errorf("openapi and lambda servers: %w", err)
		}
		a.Tools = set
		a.closers = append(a.closers, func(context.Context) error { return set.Close() })
		sources = append(sources, set)
	}
	return sources, nil
}

// sourceHealth is the health of the servers on the tool-source kernel
// (OpenAPI services, Lambda functions) in the MCP servers' shape, so that
// /healthz and pml tools list every server alike; Transport says which
// kind each is.
func (a *App) sourceHealth() []mcpclient.ServerHealth {
	var out []mcpclient.ServerHealth
	if a.Tools != nil {
		for _, h := range a.Tools.Health() {
			out = append(out, mcpclient.ServerHealth{Name: h.Name, URL: h.URL, State: mcpclient.State(h.State),
				LastError: h.LastError, Since: h.Since, Tools: h.Tools, Transport: h.Transport})
		}
	}
	return out
}
