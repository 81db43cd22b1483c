// Package cli implements the pml command: each subcommand parses its flags,
// wires the same services the Lambda functions use, and prints JSON.
package cli

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/approvalpage"
	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/elicit"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/metrics/prom"
	"github.com/pml-sandbox/pml/internal/serverconfig"
	"github.com/pml-sandbox/pml/internal/startgc"
	mcpkind "github.com/pml-sandbox/pml/internal/toolsource/mcp"
	"github.com/pml-sandbox/pml/internal/toolsource/openapi"
)

// Exit codes; docs/CLI.md's table is where users read them.
const (
	ExitOK     = 0
	ExitFailed = 1 // the script, a tool, or anything else failed
	ExitUsage  = 2 // a usage error: bad flags or arguments, unreadable or malformed input
	// ExitSuspended: the execution waits for decisions on its pending calls
	// (pml run --approval suspend, pml resume); resume it with pml resume.
	ExitSuspended = 3
)

// usageError marks errors in how pml was called, the caller's to fix: the
// only errors that exit 2.
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
		{"session", "a session's runs and state: pml session list | show ID | rm ID", sessionCmd},
		{"resume", "decide on a suspended execution's pending calls and run it on: pml resume ID --approve 2 --reject 3", resumeCmd},
		{"rollback", "undo an execution's applied effects with the compensations its servers declare: pml rollback ID", rollbackCmd},
		{"status", "show an asynchronous execution (pml run --async): pml status ID [--wait] [--cancel]", statusCmd},
		{"trace", "show a recorded execution with its calls (pml trace EXECUTION_ID)", traceCmd},
		{"capability", "save, list and show capabilities (learned programs called as mcp.ns.action())", capabilityCmd},
		{"policy", "check, print, test and explain the policy set: pml policy check FILE | print | test FILE CASES | explain ID", policyCmd},
		{"mcp", "log in to MCP servers that need OAuth and show their auth state: pml mcp login NAME | pml mcp status", mcpCmd},
		{"demo-server", "serve the demo tools (echo, add, fail, sleep, key-value store, text tools, clock) as an MCP server on loopback", demoServerCmd},
		{"bench", "run the benchmarks and print them beside the peer sandboxes'", benchCmd},
	}
}

// Main runs the pml command line and returns the process exit code. ctx
// may carry the end of the process's start (startgc.NewContext): the
// command calls it once its service is built, or after its one execution.
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
		switch {
		case err == nil:
			return code
		case errors.Is(err, flag.ErrHelp):
			return ExitOK
		}
		fmt.Fprintf(errOut, "pml %s: %v\n", c.name, err)
		// The error decides, not the code beside it: 2 is for usage
		// errors alone.
		var u usageError
		if errors.As(err, &u) {
			return ExitUsage
		}
		return ExitFailed
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

// parse parses flags, turning flag errors into usage errors. Flags may
// come after positional arguments (`pml trace ex_… --store file`), as
// users type them; `--` still ends the flags.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(flagsFirst(fs, args)); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	return nil
}

// parseID parses args for a command that takes one execution id, and
// returns it.
func parseID(fs *flag.FlagSet, args []string) (string, error) {
	if err := parse(fs, args); err != nil {
		return "", err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return "", usagef("give one execution id")
	}
	return fs.Arg(0), nil
}

// flagsFirst moves the flags among args before the positional arguments,
// keeping each flag's value with it, because the flag package stops at the
// first positional argument. A flag fs does not define is left for
// fs.Parse to report; "-" alone (standard input) is positional; after "--"
// everything is.
func flagsFirst(fs *flag.FlagSet, args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if a == "-" || !strings.HasPrefix(a, "-") {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if f := fs.Lookup(name); f != nil && !hasValue && !isBoolFlag(f) && i+1 < len(args) {
			i++
			flags = append(flags, args[i])
		}
	}
	return append(append(flags, "--"), pos...)
}

// isBoolFlag reports whether f takes no value (-v rather than -v x).
func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
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

// dir is the compilation cache to use, "" for none.
func (f *engineFlags) dir() string {
	if f.noCache {
		return ""
	}
	return f.cacheDir
}

func defaultCacheDir() string {
	if d := os.Getenv(app.EnvCompileCache); d != "" {
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
	suspensionFlags
	serverFlags
	demo string
	// approvers and callerDecides say who decides what needs approval;
	// callerAuto is what --caller-decides auto means for the command: the
	// caller decides where it is the person at the keyboard.
	approvers, trustedClients, selfApproval, callerDecides, maxGrant string
	callerAuto                                                       bool
	// policy names the policy set that decides (--policy).
	policy string
	login  string
	// oneShot: the command runs one execution and exits (withService),
	// and turns the garbage collector back on only after it, not once
	// the service is built: the first cycle would mark the whole
	// start's heap, all of it live, just before the process ends.
	oneShot bool
	// metrics is how the command publishes metrics unless PML_METRICS
	// says otherwise: pml serve serves Prometheus's /metrics.
	metrics string
	// page is the approval page's configuration (pml serve); its local
	// links, when set, sign in the person at the keyboard, whom the
	// policy then names an approver.
	page      app.PageConfig
	onSuspend func(context.Context, execution.SuspensionNotice)
	onDraft   func(context.Context, capability.DraftNotice)
	// answerer answers remote servers' questions in line (pml run:
	// inlineAnswers), and progress is the display a terminal prompt
	// pauses.
	answerer elicit.Answerer
	progress *progressSlot
}

func (f *serviceFlags) register(fs *flag.FlagSet) {
	f.engineFlags.register(fs)
	f.storeFlags.register(fs)
	f.suspensionFlags.register(fs)
	f.serverFlags.register(fs)
	fs.StringVar(&f.demo, "demo", "auto", "offer the demo tools in process: on, off, or auto (on when no MCP server is configured)")
	fs.StringVar(&f.login, "login", "never", "when an MCP server asks for an OAuth login or more scopes: never (fail, saying to run pml mcp login), or headless (fetch the authorization URL without a browser)")
	fs.StringVar(&f.approvers, "approvers", os.Getenv(app.EnvApprovers), "principals that may decide any execution's pending calls: comma-separated IAM ARNs and jwt:<issuer>#<subject> patterns, * matching within one part of a principal (a role, a session, a subject), never across : / or # (default $"+app.EnvApprovers+")")
	fs.StringVar(&f.trustedClients, "trusted-clients", os.Getenv(app.EnvTrustedClients), "principals whose MCP clients show a person a real dialog: their form-mode elicitation answers decide (default $"+app.EnvTrustedClients+")")
	fs.StringVar(&f.selfApproval, "self-approval", cmp.Or(os.Getenv(app.EnvSelfApproval), "off"), "may a person signed in on the approval page decide their own principal's executions: on or off (default $"+app.EnvSelfApproval+", else off)")
	fs.StringVar(&f.maxGrant, "max-grant-calls", os.Getenv(app.EnvMaxGrant), "the most calls a person may approve a call site for at once, on the approval page or through a trusted MCP client (default $"+app.EnvMaxGrant+", else 100)")
	fs.StringVar(&f.policy, "policy", os.Getenv(app.EnvPolicy), "the policy set that decides every call and decision: a Cedar file, s3://bucket/key or ssm:/name, replacing the one the switches generate (pml policy print shows that) (default $"+app.EnvPolicy+")")
	fs.StringVar(&f.callerDecides, "caller-decides", cmp.Or(os.Getenv(app.EnvCallerDecides), "auto"), "may the caller set allow_destructive and approve its own suspended calls: on, off, or auto (on for pml run; for pml serve, on when it listens on loopback only) (default $"+app.EnvCallerDecides+", else auto)")
}

// approvalConfig is who decides, as the flags say.
func (f *serviceFlags) approvalConfig() (app.ApprovalConfig, error) {
	policy, err := app.PolicyOf(f.approvers, f.trustedClients)
	if err != nil {
		return app.ApprovalConfig{}, usagef("--approvers, --trusted-clients: %v", err)
	}
	policy.CallerDecides = f.callerAuto
	if f.callerDecides != "auto" {
		if policy.CallerDecides, err = app.OnOff("--caller-decides", f.callerDecides, false); err != nil {
			return app.ApprovalConfig{}, usageError{err}
		}
	}
	if policy.SelfApproval, err = app.OnOff("--self-approval", f.selfApproval, false); err != nil {
		return app.ApprovalConfig{}, usageError{err}
	}
	if f.page.Links != nil {
		// Whoever opens a link the server printed on its own terminal
		// is the person at its keyboard: they approve here.
		policy.Approvers = append(policy.Approvers, approvalpage.LocalPrincipal)
	}
	maxGrant, err := app.MaxGrantOf(f.maxGrant)
	if err != nil {
		return app.ApprovalConfig{}, usageError{err}
	}
	return app.ApprovalConfig{Policy: policy, KeyFile: app.ApprovalKeyFile(), Page: f.page, OnSuspend: f.onSuspend, OnDraft: f.onDraft, MaxGrant: maxGrant}, nil
}

// appConfig is the wiring the flags ask for. Its errors are usage errors.
func (f *serviceFlags) appConfig() (app.Config, error) {
	switch f.demo {
	case "on", "off", "auto":
	default:
		return app.Config{}, usagef("--demo must be on, off or auto, not %q", f.demo)
	}
	servers, err := f.servers()
	if err != nil {
		return app.Config{}, err
	}
	traces, err := f.storeFlags.traceConfig()
	if err != nil {
		return app.Config{}, err
	}
	susp, err := f.suspensionFlags.config()
	if err != nil {
		return app.Config{}, err
	}
	appr, err := f.approvalConfig()
	if err != nil {
		return app.Config{}, err
	}
	auth, err := mcpAuthConfig(f.login)
	if err != nil {
		return app.Config{}, err
	}
	tracing, err := app.TracingFromEnv(app.TracingOff)
	if err != nil {
		return app.Config{}, usageError{err}
	}
	metrics, err := app.MetricsFromEnv(cmp.Or(f.metrics, app.MetricsOff))
	if err != nil {
		return app.Config{}, usageError{err}
	}
	learning, err := app.LearnFromEnv()
	if err != nil {
		return app.Config{}, usageError{err}
	}
	drafts, err := app.DraftLimitsFromEnv()
	if err != nil {
		return app.Config{}, usageError{err}
	}
	pol, err := app.PolicyFromEnv()
	if err != nil {
		return app.Config{}, usageError{err}
	}
	pol.Source = f.policy
	return app.Config{
		Tracing: tracing,
		Metrics: metrics,
		// Standard output is the command's answer: EMF lines, if asked
		// for, go beside the logs.
		MetricsOutput:    os.Stderr,
		MetricsExporter:  prom.NewExporter,
		CacheDir:         f.engineFlags.dir(),
		Servers:          servers,
		Demo:             f.demo == "on" || (f.demo == "auto" && len(servers) == 0),
		Traces:           traces,
		CapabilitiesFile: app.CapabilitiesFile(),
		Suspensions:      susp,
		Approval:         appr,
		MCPAuth:          auth,
		Learn:            learning,
		DraftLimits:      drafts,
		Policy:           pol,
		Answerer:         f.answerer,
		OneExecution:     f.oneShot,
	}, nil
}

// open wires the service the flags ask for.
func (f *serviceFlags) open(ctx context.Context, logger *slog.Logger) (*app.App, error) {
	cfg, err := f.appConfig()
	if err != nil {
		return nil, err
	}
	a, err := app.New(ctx, cfg, logger)
	// The service is built (or failed to be): the start is over, unless
	// the one execution is still to come (oneShot).
	if !f.oneShot || err != nil {
		startgc.End(ctx)
	}
	if fault.CodeOf(err) == fault.InvalidRequest {
		return nil, usageError{err}
	}
	return a, err
}

// servers merges $PML_MCP_SERVERS, --config, --mcp and --openapi, in
// that order: a later one wins a name, whatever its kind.
func (f *serverFlags) servers() (serverconfig.Servers, error) {
	cfgs, err := app.ServersFromEnv()
	if err != nil {
		return nil, usageError{err}
	}
	if f.config != "" {
		c, err := serverconfig.Load(f.config, app.Kinds())
		if err != nil {
			return nil, usageError{err}
		}
		cfgs.Merge(c...)
	}
	for _, m := range f.mcp {
		c, err := mcpkind.ParseServerFlag(m)
		if err != nil {
			return nil, usageError{err}
		}
		cfgs.Merge(c)
	}
	for _, m := range f.openapi {
		c, err := openapi.ParseFlag(m)
		if err != nil {
			return nil, usageError{err}
		}
		cfgs.Merge(c)
	}
	return cfgs, nil
}

// mcpConfigs is the MCP servers of the merged list (see servers).
func (f *serverFlags) mcpConfigs() ([]mcpkind.Config, error) {
	s, err := f.servers()
	return serverconfig.Of[mcpkind.Config](s), err
}

// logger returns the JSON logger commands write diagnostics with: warnings
// and errors only, unless PML_LOG_LEVEL says otherwise.
func logger(errOut io.Writer) *slog.Logger { return app.Logger(errOut, slog.LevelWarn) }
