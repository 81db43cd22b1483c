package app

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/pml-sandbox/pml/internal/elicit"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/secretref"
	"github.com/pml-sandbox/pml/internal/serverconfig"
	"github.com/pml-sandbox/pml/internal/toolsource"
	lambdakind "github.com/pml-sandbox/pml/internal/toolsource/lambda"
	mcpkind "github.com/pml-sandbox/pml/internal/toolsource/mcp"
	"github.com/pml-sandbox/pml/internal/toolsource/openapi"
)

// Kinds is the registry of the standard kinds of tool source (MCP
// servers, the default; OpenAPI services; Lambda functions) and more: what
// a server list may name, for reading it. Decoding needs no state, so
// these are zero values; New opens with its own MCP kind, which holds the
// process's answerer and counts its traffic.
func Kinds(more ...toolsource.Kind) *toolsource.Registry {
	return toolsource.NewRegistry(new(mcpkind.Kind), openapi.Kind{}, lambdakind.Kind{}).With(more...)
}

// openSources starts the tool sources of the server list: one
// toolsource.Set of every configured server, each owning its name.
func (a *App) openSources(ctx context.Context, servers serverconfig.Servers, cacheDir, shippedDir string, kinds []toolsource.Kind, auth MCPAuthConfig,
	answerer elicit.Answerer, log *slog.Logger) ([]execution.ToolSource, error) {
	if len(servers) == 0 {
		return nil, nil
	}
	// One resolver for every source's secret references: a Secrets
	// Manager secret is read once per process and lifetime, through the
	// app's one client.
	refs := secretref.New(func(ctx context.Context) (secretref.API, error) { return a.aws.secrets(ctx) }, secretref.Options{})
	a.MCP = &mcpkind.Kind{Answerer: answerer}
	// OpenAPI documents are kept parsed beside the compiled guest, and
	// read from beside the shipped one.
	reg := toolsource.NewRegistry(a.MCP, openapi.Kind{CacheDir: openapi.CacheDir(cacheDir), ShippedCacheDir: openapi.CacheDir(shippedDir)}, lambdakind.Kind{}).With(kinds...)
	set, err := toolsource.New(ctx, reg, servers, toolsource.Env{Logger: log, Refs: refs, AWS: a.aws.load, OAuth: auth.oauth(&a.aws)})
	if err != nil {
		return nil, fmt.Errorf("tool sources: %w", err)
	}
	a.Tools = set
	a.closers = append(a.closers, func(context.Context) error { return set.Close() })
	return []execution.ToolSource{set}, nil
}
