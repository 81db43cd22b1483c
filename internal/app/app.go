// Package app wires PML Sandbox's parts from the environment, the way the
// Lambda functions are configured: one place that knows which variable
// selects which implementation, so the function mains only start handlers.
package app

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/ssm"

	"github.com/pml-sandbox/pml/internal/bridge"
	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/httpapi"
	"github.com/pml-sandbox/pml/internal/mcpclient"
	"github.com/pml-sandbox/pml/internal/trace"
	"github.com/pml-sandbox/pml/internal/tracedb"
	"github.com/pml-sandbox/pml/internal/xraysink"
)

// Environment variables read by FromEnv.
const (
	EnvMCPServers      = "PML_MCP_SERVERS"       // inline {"servers":[...]} (JSON or YAML)
	EnvMCPServersParam = "PML_MCP_SERVERS_PARAM" // SSM parameter holding the same document
	EnvCompileCache    = "PML_COMPILE_CACHE_DIR" // wazero compilation cache (default /tmp/pml-cache)
	EnvDemoTools       = "PML_DEMO_TOOLS"        // "on" adds the built-in demo tools
	EnvLogLevel        = "PML_LOG_LEVEL"         // debug, info (default), warn, error
	EnvCapTable        = "PML_CAPABILITIES_TABLE"
	EnvCapFunction     = "PML_CAPABILITY_FUNCTION" // capability calls go to this Lambda (else in-process)
	EnvCapFile         = "PML_CAPABILITIES_FILE"   // file registry when no table is set
	EnvTracesTable     = "PML_TRACES_TABLE"        // DynamoDB traces (else in memory)
	EnvTraceTTLDays    = "PML_TRACE_TTL_DAYS"
)

// App is a wired service and what it needs closed.
type App struct {
	Service      *bridge.Service
	Registry     capability.Registry
	Engine       *guest.Engine
	Pool         *mcpclient.Pool
	Traces       httpapi.TraceReader
	Capabilities httpapi.Capabilities
	Sink         trace.Sink
	AWS          *aws.Config
	sources      []bridge.ToolSource
	log          *slog.Logger
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
	if err := a.traces(ctx, log); err != nil {
		return fail(err)
	}
	if err := a.capabilities(ctx, log); err != nil {
		return fail(err)
	}
	if a.Pool != nil {
		// Every save path (HTTP, the MCP endpoint) goes through this
		// registry; a capability may not take a server's name.
		a.Registry = capability.Reserve(a.Registry, a.Pool.Servers()...)
	}
	var invoker capability.Invoker = capability.InProcess{Registry: a.Registry, NewService: a.NewService}
	if fn := os.Getenv(EnvCapFunction); fn != "" {
		cfg, err := a.awsConfig(ctx)
		if err != nil {
			return fail(err)
		}
		invoker = capability.LambdaInvoker{Client: lambda.NewFromConfig(*cfg), Function: fn}
	}
	// MCP servers first, capabilities after: a name both offer is the
	// server's (ADR-052).
	a.sources = append(sources, capability.NewSource(a.Registry, invoker, 0, log))
	a.log = log
	a.Service = a.NewService()
	a.Capabilities = capabilityAPI{a.Registry}
	return a, nil
}

// NewService returns a fresh service over the same engine, clients and
// sources: capability runs each get one, never the caller's.
func (a *App) NewService() *bridge.Service {
	return bridge.New(a.Engine, bridge.Options{Sources: a.sources, Sink: a.Sink, Logger: a.log})
}

// traces picks where records go: DynamoDB when a table is named, else
// memory; plus X-Ray when running in Lambda or a daemon address is set.
func (a *App) traces(ctx context.Context, log *slog.Logger) error {
	var store tracedb.Store = tracedb.NewMemory(0)
	if table := os.Getenv(EnvTracesTable); table != "" {
		cfg, err := a.awsConfig(ctx)
		if err != nil {
			return err
		}
		days, _ := strconv.Atoi(os.Getenv(EnvTraceTTLDays))
		store = tracedb.NewDynamo(dynamodb.NewFromConfig(*cfg), table, time.Duration(days)*24*time.Hour, log)
	}
	a.Traces = store
	a.Sink = store
	if os.Getenv("LAMBDA_TASK_ROOT") != "" || os.Getenv("AWS_XRAY_DAEMON_ADDRESS") != "" {
		xs, err := xraysink.New("pml-sandbox")
		if err != nil {
			return err
		}
		a.Sink = xraysink.Multi{store, xs}
	}
	return nil
}

// capabilities picks the registry: DynamoDB when a table is named, else the
// file registry.
func (a *App) capabilities(ctx context.Context, log *slog.Logger) error {
	table := os.Getenv(EnvCapTable)
	if table == "" {
		a.Registry = capability.NewFileRegistry(capability.DefaultFilePath())
		return nil
	}
	cfg, err := a.awsConfig(ctx)
	if err != nil {
		return err
	}
	a.Registry = capability.NewDynamoRegistry(dynamodb.NewFromConfig(*cfg), table)
	log.Debug("capabilities in DynamoDB", "table", table)
	return nil
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
	// DynamoDB writes and capability invocations show in the X-Ray map.
	xraysink.InstrumentAWS(&cfg)
	a.AWS = &cfg
	return a.AWS, nil
}
