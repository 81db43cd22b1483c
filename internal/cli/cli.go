// Package cli implements the pml command: each subcommand parses its flags,
// wires the same services the Lambda functions use, and prints JSON.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/pml-sandbox/pml/internal/bridge"
	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/httpapi"
	"github.com/pml-sandbox/pml/internal/mcpclient"
	"github.com/pml-sandbox/pml/internal/trace"
	"github.com/pml-sandbox/pml/internal/tracedb"
)

// Exit codes.
const (
	ExitOK     = 0
	ExitFailed = 1 // the script or a tool failed
	ExitUsage  = 2 // bad flags, unreadable files, malformed input
)

// usageError marks errors that are the caller's to fix (exit 2).
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

type command struct {
	name, summary string
	run           func(ctx context.Context, args []string, out, errOut io.Writer) (int, error)
}

func commands() []command {
	return []command{
		{"run", "run a script: pml run FILE.js | pml run -e CODE", runCmd},
		{"serve", "serve the HTTP API and MCP endpoint locally (127.0.0.1:8080)", serveCmd},
		{"tools", "list the tool catalog (--dts for TypeScript declarations)", toolsCmd},
		{"trace", "show a recorded execution with its calls (pml trace EXECUTION_ID)", traceCmd},
		{"capability", "save, list and show capabilities (learned programs called as mcp.ns.action())", capabilityCmd},
		{"demo-server", "serve the demo tools (echo, add, fail, sleep, key-value store, text tools, clock) as an MCP server on loopback", demoServerCmd},
		{"bench", "run the benchmarks and print them beside the peer sandboxes'", benchCmd},
	}
}

// Main runs the pml command line and returns the process exit code.
func Main(ctx context.Context, args []string, out, errOut io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(errOut)
		if len(args) == 0 {
			return ExitUsage
		}
		return ExitOK
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		code, err := c.run(ctx, args[1:], out, errOut)
		if err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return ExitOK
			}
			fmt.Fprintf(errOut, "pml %s: %v\n", c.name, err)
			var u usageError
			if errors.As(err, &u) {
				return ExitUsage
			}
			if code == ExitOK {
				code = ExitFailed
			}
		}
		return code
	}
	fmt.Fprintf(errOut, "pml: unknown command %q\n\n", args[0])
	usage(errOut)
	return ExitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "pml — run JavaScript against MCP tools in a fresh WebAssembly sandbox\n\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun `pml COMMAND -h` for a command's flags.")
}

// newFlagSet returns a flag set that reports errors instead of exiting.
func newFlagSet(name string, errOut io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("pml "+name, flag.ContinueOnError)
	fs.SetOutput(errOut)
	return fs
}

// parse parses flags, turning flag errors into usage errors.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	return nil
}

// listFlag collects a repeatable flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// engineFlags are the sandbox settings every command that runs code shares.
type engineFlags struct {
	cacheDir string
	noCache  bool
}

func (f *engineFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.cacheDir, "cache-dir", defaultCacheDir(), "where compiled guest code is cached between runs")
	fs.BoolVar(&f.noCache, "no-cache", false, "compile the guest from scratch (no on-disk cache)")
}

func (f *engineFlags) engine(ctx context.Context, logger *slog.Logger) (*guest.Engine, error) {
	opts := guest.Options{Logger: logger}
	if !f.noCache && f.cacheDir != "" {
		opts.CacheDir = f.cacheDir
	}
	return guest.New(ctx, opts)
}

func defaultCacheDir() string {
	if d := os.Getenv("PML_COMPILE_CACHE_DIR"); d != "" {
		return d
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, "pml", "wazero")
}

// serviceFlags choose the tools a command's service offers.
type serviceFlags struct {
	engineFlags
	storeFlags
	mcp    listFlag
	config string
	demo   string
}

func (f *serviceFlags) register(fs *flag.FlagSet) {
	f.engineFlags.register(fs)
	f.storeFlags.register(fs)
	fs.Var(&f.mcp, "mcp", "an MCP server as NAME=URL (repeatable)")
	fs.StringVar(&f.config, "config", "", "MCP server configuration file (JSON or YAML)")
	fs.StringVar(&f.demo, "demo", "auto", "offer the built-in demo tools: on, off, or auto (on when no MCP server is configured)")
}

// wiring is a service and what must be closed after it.
type wiring struct {
	service  *bridge.Service
	registry capability.Registry
	sink     trace.Sink
	traces   httpapi.TraceReader
	store    tracedb.Store
	pool     *mcpclient.Pool
	closers  []func(context.Context) error
}

// health reports the MCP servers' states (nil without servers).
func (w *wiring) health() []mcpclient.ServerHealth {
	if w.pool == nil {
		return nil
	}
	return w.pool.Health()
}

func (w *wiring) close(ctx context.Context) {
	for i := len(w.closers) - 1; i >= 0; i-- {
		_ = w.closers[i](ctx)
	}
}

func (f *serviceFlags) wire(ctx context.Context, logger *slog.Logger) (*wiring, error) {
	switch f.demo {
	case "on", "off", "auto":
	default:
		return nil, usagef("--demo must be on, off or auto, not %q", f.demo)
	}
	w := &wiring{}
	pool, err := f.mcpPool(ctx, logger)
	if err != nil {
		return nil, err
	}
	var sources []bridge.ToolSource
	if pool != nil {
		w.pool = pool
		w.closers = append(w.closers, func(context.Context) error { return pool.Close() })
		sources = append(sources, bridge.MCPSource{Pool: pool})
	}
	if f.demo == "on" || (f.demo == "auto" && pool == nil) {
		sources = append(sources, bridge.DemoSource{})
	}
	engine, err := f.engine(ctx, logger)
	if err != nil {
		w.close(ctx)
		return nil, err
	}
	w.closers = append(w.closers, engine.Close)
	store, err := f.storeFlags.open(ctx, logger)
	if err != nil {
		w.close(ctx)
		return nil, err
	}
	w.sink, w.traces, w.store = store, store, store
	// Capabilities come after the MCP servers and demo tools: a name both
	// offer is the server's. Each capability call runs in a fresh service.
	w.registry = capability.NewFileRegistry(capability.DefaultFilePath())
	if pool != nil {
		// `pml serve` saves through this registry: a capability may not
		// take a configured server's name.
		w.registry = capability.Reserve(w.registry, pool.Servers()...)
	}
	w.service = capability.LocalServices(engine, sources, w.registry, w.sink, logger)()
	return w, nil
}

// mcpPool connects to the configured MCP servers; nil when there are none.
func (f *serviceFlags) mcpPool(ctx context.Context, logger *slog.Logger) (*mcpclient.Pool, error) {
	cfgs, err := f.mcpConfigs()
	if err != nil || len(cfgs) == 0 {
		return nil, err
	}
	pool, err := mcpclient.New(ctx, cfgs, mcpclient.WithLogger(logger))
	if err != nil {
		return nil, usageError{err}
	}
	return pool, nil
}

// mcpConfigs merges --config and --mcp (flags win on a name clash).
func (f *serviceFlags) mcpConfigs() ([]mcpclient.ServerConfig, error) {
	var cfgs []mcpclient.ServerConfig
	if f.config != "" {
		c, err := mcpclient.LoadConfig(f.config)
		if err != nil {
			return nil, usageError{err}
		}
		cfgs = c
	}
	for _, m := range f.mcp {
		c, err := mcpclient.ParseServerFlag(m)
		if err != nil {
			return nil, usageError{err}
		}
		cfgs = slices.DeleteFunc(cfgs, func(x mcpclient.ServerConfig) bool { return x.Name == c.Name })
		cfgs = append(cfgs, c)
	}
	return cfgs, nil
}

// logger returns the JSON logger commands write diagnostics with: warnings
// and errors only, unless PML_LOG_LEVEL says otherwise.
func logger(errOut io.Writer) *slog.Logger { return loggerAt(errOut, slog.LevelWarn) }

// loggerAt is logger with another default level (pml serve logs requests).
func loggerAt(errOut io.Writer, def slog.Level) *slog.Logger {
	level := def
	if v := os.Getenv("PML_LOG_LEVEL"); v != "" {
		_ = level.UnmarshalText([]byte(v))
	}
	return slog.New(slog.NewJSONHandler(errOut, &slog.HandlerOptions{Level: level}))
}
