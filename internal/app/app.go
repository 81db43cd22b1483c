// Package app wires PML Sandbox's parts from the environment, the way the
// Lambda functions are configured: one place that knows which variable
// selects which implementation, so the function mains only start handlers.
package app

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ssm"

	"github.com/pml-sandbox/pml/internal/bridge"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/httpapi"
	"github.com/pml-sandbox/pml/internal/mcpclient"
)

// Environment variables read by FromEnv.
const (
	EnvMCPServers      = "PML_MCP_SERVERS"       // inline {"servers":[...]} (JSON or YAML)
	EnvMCPServersParam = "PML_MCP_SERVERS_PARAM" // SSM parameter holding the same document
	EnvCompileCache    = "PML_COMPILE_CACHE_DIR" // wazero compilation cache (default /tmp/pml-cache)
	EnvDemoTools       = "PML_DEMO_TOOLS"        // "on" adds the built-in demo tools
	EnvLogLevel        = "PML_LOG_LEVEL"         // debug, info (default), warn, error
)

// App is a wired service and what it needs closed.
type App struct {
	Service      *bridge.Service
	Engine       *guest.Engine
	Pool         *mcpclient.Pool
	Traces       httpapi.TraceReader
	Capabilities httpapi.Capabilities
	AWS          *aws.Config
	closers      []func(context.Context) error
}

// Health reports the MCP servers' states for /healthz.
func (a *App) Health() any {
	if a.Pool == nil {
		return map[string]any{"mcp_servers": []any{}}
	}
	return map[string]any{"mcp_servers": a.Pool.Health()}
}

// Close releases everything FromEnv opened.
func (a *App) Close(ctx context.Context) {
	for i := len(a.closers) - 1; i >= 0; i-- {
		_ = a.closers[i](ctx)
	}
}

// Logger returns the JSON logger the functions use, at PML_LOG_LEVEL.
func Logger() *slog.Logger {
	var level slog.Level
	if err := level.UnmarshalText([]byte(os.Getenv(EnvLogLevel))); err != nil {
		level = slog.LevelInfo
	}
	return slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{Level: level}))
}

// FromEnv builds the service: the guest engine (compiled once per
// container), the MCP client pool, and the sources and sinks the
// environment selects.
func FromEnv(ctx context.Context, log *slog.Logger) (*App, error) {
	a := &App{}
	fail := func(err error) (*App, error) {
		a.Close(ctx)
		return nil, err
	}
	cacheDir := os.Getenv(EnvCompileCache)
	if cacheDir == "" {
		cacheDir = "/tmp/pml-cache"
	}
	eng, err := guest.New(ctx, guest.Options{CacheDir: cacheDir, Logger: log})
	if err != nil {
		return fail(fmt.Errorf("guest engine: %w", err))
	}
	a.Engine = eng
	a.closers = append(a.closers, eng.Close)

	servers, err := a.mcpServers(ctx)
	if err != nil {
		return fail(err)
	}
	var sources []bridge.ToolSource
	if len(servers) > 0 {
		pool, err := mcpclient.New(ctx, servers, mcpclient.WithLogger(log))
		if err != nil {
			return fail(fmt.Errorf("mcp servers: %w", err))
		}
		a.Pool = pool
		a.closers = append(a.closers, func(context.Context) error { return pool.Close() })
		sources = append(sources, bridge.MCPSource{Pool: pool})
	}
	if strings.EqualFold(os.Getenv(EnvDemoTools), "on") {
		sources = append(sources, bridge.DemoSource{})
	}
	a.Service = bridge.New(eng, bridge.Options{Sources: sources, Logger: log})
	return a, nil
}

// mcpServers reads the server list from the environment or SSM.
func (a *App) mcpServers(ctx context.Context) ([]mcpclient.ServerConfig, error) {
	if doc := os.Getenv(EnvMCPServers); doc != "" {
		cfgs, err := mcpclient.ParseConfig(EnvMCPServers, []byte(doc))
		if err != nil {
			return nil, err
		}
		return cfgs, nil
	}
	name := os.Getenv(EnvMCPServersParam)
	if name == "" {
		return nil, nil
	}
	cfg, err := a.awsConfig(ctx)
	if err != nil {
		return nil, err
	}
	out, err := ssm.NewFromConfig(*cfg).GetParameter(ctx, &ssm.GetParameterInput{Name: aws.String(name), WithDecryption: aws.Bool(true)})
	if err != nil {
		return nil, fmt.Errorf("reading MCP servers from SSM parameter %s: %w", name, err)
	}
	return mcpclient.ParseConfig(name, []byte(aws.ToString(out.Parameter.Value)))
}

// awsConfig loads the AWS SDK configuration once.
func (a *App) awsConfig(ctx context.Context) (*aws.Config, error) {
	if a.AWS != nil {
		return a.AWS, nil
	}
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("aws config: %w", err)
	}
	a.AWS = &cfg
	return a.AWS, nil
}
