package app

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/aws/aws-sdk-go-v2/service/lambda"

	"github.com/pml-sandbox/pml/internal/ask"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/lambdasrc"
	"github.com/pml-sandbox/pml/internal/mcpclient"
	"github.com/pml-sandbox/pml/internal/openapisrc"
	"github.com/pml-sandbox/pml/internal/secretref"
	"github.com/pml-sandbox/pml/internal/serverconfig"
)

// openSources starts the tool sources of the server list: the MCP client
// pool, the OpenAPI services and the Lambda functions, in that order,
// each owning its servers' names (which must be unique across kinds).
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
	if len(servers.Lambda) > 0 {
		src, err := lambdasrc.New(ctx, servers.Lambda, lambdasrc.Options{Logger: log,
			Client: func(ctx context.Context) (lambdasrc.API, error) {
				cfg, err := a.aws.load(ctx)
				if err != nil {
					return nil, err
				}
				return lambda.NewFromConfig(cfg), nil
			}})
		if err != nil {
			return nil, fmt.Errorf("lambda servers: %w", err)
		}
		a.Lambda = src
		a.closers = append(a.closers, func(context.Context) error { return src.Close() })
		sources = append(sources, src)
	}
	return sources, nil
}

// sourceHealth is the OpenAPI services' and Lambda functions' health in
// the MCP servers' shape, so that /healthz and pml tools list every
// server alike; Transport says which kind each is.
func (a *App) sourceHealth() []mcpclient.ServerHealth {
	var out []mcpclient.ServerHealth
	if a.OpenAPI != nil {
		for _, h := range a.OpenAPI.Health() {
			out = append(out, mcpclient.ServerHealth{Name: h.Name, URL: h.URL, State: mcpclient.State(h.State),
				LastError: h.LastError, Since: h.Since, Tools: h.Tools, Transport: serverconfig.TypeOpenAPI})
		}
	}
	if a.Lambda != nil {
		for _, h := range a.Lambda.Health() {
			out = append(out, mcpclient.ServerHealth{Name: h.Name, State: mcpclient.State(h.State),
				LastError: h.LastError, Since: h.Since, Tools: h.Tools, Transport: serverconfig.TypeLambda})
		}
	}
	return out
}
