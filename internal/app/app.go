// Package app wires PML Sandbox's parts: one Config says what to build,
// New builds it, and the front ends only start handlers. The Lambda
// functions fill the Config from the environment (FromEnv); the pml command
// fills it from its flags, with the same environment variables as
// defaults. This is also the one place environment variables are named.
package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/lambda"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/approvalpage"
	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/capapi"
	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/elicit"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/httpapi"
	"github.com/pml-sandbox/pml/internal/journal"
	"github.com/pml-sandbox/pml/internal/learn"
	"github.com/pml-sandbox/pml/internal/logging"
	"github.com/pml-sandbox/pml/internal/metrics"
	"github.com/pml-sandbox/pml/internal/oauthclient"
	"github.com/pml-sandbox/pml/internal/policy"
	"github.com/pml-sandbox/pml/internal/ranking"
	"github.com/pml-sandbox/pml/internal/redact"
	"github.com/pml-sandbox/pml/internal/sdkhttp"
	"github.com/pml-sandbox/pml/internal/serverconfig"
	"github.com/pml-sandbox/pml/internal/ssmparam"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/toolsource"
	mcpkind "github.com/pml-sandbox/pml/internal/toolsource/mcp"
	"github.com/pml-sandbox/pml/internal/trace"
	"github.com/pml-sandbox/pml/internal/tracedb"
	"github.com/pml-sandbox/pml/internal/userdata"
	"github.com/pml-sandbox/pml/internal/xraysink"
)

// Environment variables. FromEnv reads them all; the pml command reads the
// ones marked CLI too.
const (
	EnvMCPServers        = "PML_MCP_SERVERS"            // inline {"servers":[...]} (JSON or YAML); CLI: servers before --config and --mcp
	EnvMCPServersParam   = "PML_MCP_SERVERS_PARAM"      // SSM parameter holding the same document
	EnvCompileCache      = "PML_COMPILE_CACHE_DIR"      // wazero compilation cache (default /tmp/pml-cache); CLI: --cache-dir's default
	EnvShippedCache      = "PML_SHIPPED_CACHE_DIR"      // the artifact's precompiled guest (default guest-cache beside the binary); "off" for none
	EnvDemoTools         = "PML_DEMO_TOOLS"             // "on" adds the demo tools in process
	EnvLogLevel          = logging.EnvLevel             // debug, info, warn, error; CLI too
	EnvCapTable          = "PML_CAPABILITIES_TABLE"     // DynamoDB capability registry (else the file)
	EnvCapFunction       = "PML_CAPABILITY_FUNCTION"    // capability calls go to this Lambda (else in process)
	EnvCapFile           = "PML_CAPABILITIES_FILE"      // the file registry (default in the user's data directory); CLI too
	EnvTracesTable       = "PML_TRACES_TABLE"           // DynamoDB traces (else in memory); CLI: --table's default
	EnvTraceTTLDays      = "PML_TRACE_TTL_DAYS"         // how long DynamoDB keeps traces
	EnvTracesFile        = "PML_TRACES_FILE"            // CLI: the trace file (default in the user's data directory)
	EnvTracesKeep        = "PML_TRACES_KEEP"            // executions an in-memory or file trace store holds (default 10000); CLI too
	EnvServeToken        = "PML_SERVE_TOKEN"            // CLI: pml serve's bearer token, kept out of `ps`
	EnvMCPTextBytes      = "PML_MCP_TEXT_BYTES"         // execute_code's text answer budget (default 24000); CLI: --mcp-text-bytes's default
	EnvSuspTable         = "PML_SUSPENSIONS_TABLE"      // DynamoDB store of suspended executions; CLI: --suspensions-table's default
	EnvSuspDir           = "PML_SUSPENSIONS_DIR"        // the file store of suspended executions (the CLI's default: in the user's data directory); CLI too
	EnvSuspTTL           = "PML_SUSPENSION_TTL"         // how long a suspended execution waits, a Go duration (default 24h); CLI: --suspension-ttl's default
	EnvSessionTTL        = "PML_SESSION_TTL"            // a new session's idle time, a Go duration (default 1h, at most 24h); CLI too
	EnvSessionMaxBytes   = "PML_SESSION_MAX_BYTES"      // the largest saved state of a session, bytes (default 16 MiB); CLI too
	EnvApprovers         = "PML_APPROVERS"              // principal patterns that may decide any execution (IAM ARNs, jwt:<iss>#<sub>); CLI too
	EnvCallerDecides     = "PML_CALLER_DECIDES"         // on: the caller may set allow_destructive and approve its own calls (Lambda default off); CLI: --caller-decides's default
	EnvTrustedClients    = "PML_TRUSTED_CLIENTS"        // principal patterns whose MCP clients' form-mode elicitation answers count as their user's decision; CLI too
	EnvSelfApproval      = "PML_SELF_APPROVAL"          // on: a person signed in on the approval page may decide their own principal's executions (off by default); CLI too
	EnvMaxGrant          = "PML_MAX_GRANT_CALLS"        // the most calls one grant (a call site approved for N calls) may cover (default 100); CLI too
	EnvApprovalKeyFile   = "PML_APPROVAL_KEY_FILE"      // the key sealing elicitation state (default in the user's data directory); CLI too
	EnvApprovalKeySecret = "PML_APPROVAL_KEY_SECRET"    // the Secrets Manager secret holding that key (the deployment)
	EnvApprovalBus       = "PML_APPROVAL_BUS"           // the EventBridge bus suspension notices go to
	EnvApprovalURL       = "PML_APPROVAL_URL"           // the approval page's external base URL (the deployment: the API's URL); CLI: --approval-url's default
	EnvOIDCIssuer        = "PML_OIDC_ISSUER"            // the OpenID Connect provider people sign in to the approval page with; CLI too
	EnvOIDCClientID      = "PML_OIDC_CLIENT_ID"         // the page's client id at that provider; CLI too
	EnvOIDCClientSecret  = "PML_OIDC_CLIENT_SECRET"     // its client secret (empty: a public client, PKCE alone); CLI too
	EnvOIDCSecretARN     = "PML_OIDC_CLIENT_SECRET_ARN" // the Secrets Manager secret holding the client secret (the deployment)
	EnvOIDCRedirectURL   = "PML_OIDC_REDIRECT_URL"      // where the provider sends people back (default: the page's URL + /approvals/signin/callback); CLI too
	EnvMCPCredsDir       = "PML_MCP_CREDENTIALS_DIR"    // CLI: where MCP OAuth credentials are kept (default in the user's data directory)
	EnvStreamREST        = "PML_STREAM_REST_API"        // on: REST API events are answered as streamed responses (the template's REST API streams)
	EnvTracing           = "PML_TRACING"                // xray, otel or off (default xray where the X-Ray daemon is, else off); CLI too
	EnvMetrics           = "PML_METRICS"                // emf, prometheus or off (default emf in Lambda, else off; pml serve: prometheus)
	EnvRunLease          = "PML_RUN_LEASE"              // an asynchronous run's lease, a Go duration (default 30s): how long after its runner died it is taken over; CLI too
	EnvSweepEvery        = "PML_SWEEP_EVERY"            // pml serve: how often it looks for runs whose runner died, a Go duration (default 10s)

	// Set by AWS: either means the X-Ray daemon is there to send to.
	EnvLambdaTaskRoot = "LAMBDA_TASK_ROOT"
	EnvXRayDaemon     = "AWS_XRAY_DAEMON_ADDRESS"
	// Set by AWS: the function's memory in MB, which also sets its CPU.
	EnvLambdaMemory = "AWS_LAMBDA_FUNCTION_MEMORY_SIZE"
	// Set by AWS: the function's name (the execute function invokes
	// itself to run asynchronous executions; the FunctionName of its
	// metrics).
	EnvLambdaFunction = "AWS_LAMBDA_FUNCTION_NAME"
)

// pml serve's server-wide budget (CLI only; internal/admission).
const (
	EnvServeMemory     = "PML_SERVE_MAX_MEMORY"     // the memory budget, e.g. 2GiB (default from the machine); --max-memory's default
	EnvServeExecutions = "PML_SERVE_MAX_EXECUTIONS" // executions at once (default 32 per CPU); --max-executions's default
	EnvServeQueueWait  = "PML_SERVE_QUEUE_WAIT"     // how long a request waits for room, a Go duration (default 3s); --queue-wait's default
)

// EnvVars lists every variable above, for tests that must start from a
// clean environment.
var EnvVars = []string{EnvMCPServers, EnvMCPServersParam, EnvCompileCache, EnvShippedCache, EnvDemoTools, EnvLogLevel,
	EnvCapTable, EnvCapFunction, EnvCapFile, EnvTracesTable, EnvTraceTTLDays, EnvTracesFile, EnvTracesKeep,
	EnvServeToken, EnvMCPTextBytes, EnvSuspTable, EnvSuspDir, EnvSuspTTL, EnvApprovers, EnvCallerDecides, EnvTrustedClients, EnvSelfApproval, EnvApprovalKeyFile,
	EnvApprovalKeySecret, EnvApprovalBus, EnvApprovalURL, EnvOIDCIssuer, EnvOIDCClientID, EnvOIDCClientSecret, EnvOIDCSecretARN, EnvOIDCRedirectURL, EnvMCPCredsDir, EnvStreamREST, EnvLambdaTaskRoot, EnvXRayDaemon, EnvLambdaFunction,
	EnvServeMemory, EnvServeExecutions, EnvServeQueueWait, EnvTracing, EnvMetrics, EnvLearn, EnvSuggestMinRuns,
	EnvPolicy, EnvPolicyReload, EnvPolicyAVPStore, EnvLimitsTable, EnvLimitsDir, EnvRunLease, EnvSweepEvery}

// Where traces go (TraceConfig.Store).
const (
	StoreMemory = "memory"
	StoreFile   = "file"
	StoreDynamo = "dynamodb"
)

// Config is what New wires.
type Config struct {
	// CacheDir holds wazero's compilation cache; "" compiles from scratch.
	CacheDir string
	// ShippedCacheDir is a precompiled cache with its manifest (see
	// Precompile), overlaid on CacheDir before the guest is compiled; ""
	// for none. It may be read-only.
	ShippedCacheDir string
	// CompileWorkers is how many goroutines compile the guest when the
	// caches miss; 0 or 1 compiles on one (wazero's default).
	CompileWorkers int
	// Servers are the configured servers, of any kind (MCP servers,
	// OpenAPI services, Lambda functions, and Kinds'). When there are
	// none and ServersParam names an SSM parameter, New reads the list
	// from it.
	Servers serverconfig.Servers
	// Kinds are kinds of tool source besides the standard ones (Kinds),
	// which Servers may name.
	Kinds        []toolsource.Kind
	ServersParam string
	// Demo offers the demo tools in process (executor.DemoSource).
	Demo bool
	// Traces says where execution records go; Tracing where traces go
	// besides (TracingXRay, TracingOTel or TracingOff).
	Traces  TraceConfig
	Tracing string
	// Metrics says how metrics are published: MetricsEMF (to
	// MetricsOutput), MetricsPrometheus (MetricsExporter's, served by
	// App.MetricsHandler) or MetricsOff.
	Metrics       string
	MetricsOutput io.Writer
	// MetricsExporter makes the recorder MetricsPrometheus publishes
	// (prom.New). Only the commands that serve /metrics set it, so the
	// Lambda functions do not link Prometheus's client (package prom);
	// without it MetricsPrometheus is refused.
	MetricsExporter func() metrics.Exporter
	// CapabilitiesTable names the DynamoDB capability registry; without
	// it the registry is the file CapabilitiesFile.
	CapabilitiesTable string
	CapabilitiesFile  string
	// CapabilityFunction, when set, runs capability calls in that Lambda
	// function; else each runs in process, in a fresh service.
	CapabilityFunction string
	// Suspensions says where suspended executions are kept, and the runs
	// of asynchronous executions beside them.
	Suspensions SuspensionConfig
	// MaxTimeout caps an execution's deadline (executor.Options.MaxTimeout;
	// 0: 60 s). The functions set 15 minutes: the invocation's own
	// deadline is the real bound there.
	MaxTimeout time.Duration
	// Approval says who decides, and how deciders are reached.
	Approval ApprovalConfig

	// Engine, when set, is the sandbox engine to run on instead of
	// opening one (the benchmarks measure several services on one
	// engine); the App does not close it.
	Engine *guest.Engine

	// MCPAuth is how the MCP servers' OAuth credentials are kept and
	// obtained.
	MCPAuth MCPAuthConfig

	// Learn configures the learning loop (internal/learn).
	Learn LearnConfig

	// DraftLimits bound the capability drafts kept, per author and in
	// all (zero: capability's defaults; DraftLimitsFromEnv reads them).
	DraftLimits capability.DraftLimits

	// Policy says which policy set decides every call and every decision
	// (docs/POLICY.md), and where its limits are counted.
	Policy PolicyConfig

	// Answerer, when set, answers remote MCP servers' questions in line
	// while the call is in flight: a 2025-11-25 server's
	// elicitation/create (the pool then declares the capability) and a
	// 2026-07-28 input_required in an execution that cannot suspend. Only
	// a front end whose caller is the person at the keyboard sets it (pml
	// run), and only where Approval.Policy lets the caller answer
	// (approval.Policy.MayAnswer); New refuses it otherwise.
	Answerer elicit.Answerer

	// OneExecution: the process runs one execution and exits (pml run,
	// pml resume), so the guest prepares the one instance it needs, not a
	// second to stand ready for the next run.
	OneExecution bool

	prepared int // guest.Options.Prepared: Precompile keeps no instances
}

// SuspensionConfig says where suspended executions are kept: a DynamoDB
// table, else a directory, else nowhere (requests for approval "suspend"
// are then refused).
type SuspensionConfig struct {
	Table string
	Dir   string
	// TTL is how long a suspended execution waits (suspend.DefaultTTL
	// when 0).
	TTL time.Duration
	// SessionTTL is a new session's idle time (0: an hour) and
	// SessionMaxBytes the largest state a session keeps (0:
	// executor.DefaultSessionMaxBytes). Sessions are kept beside the
	// suspensions: in the table (SESS#<id>) or in the directory's
	// sessions/.
	SessionTTL      time.Duration
	SessionMaxBytes int
	// SessionQuota and SuspendedQuota bound what one principal keeps
	// (zero fields: suspend's defaults; StoreQuotas reads them).
	SessionQuota, SuspendedQuota suspend.Quota
}

// TraceConfig says where execution records go.
type TraceConfig struct {
	Store string        // StoreMemory (the default), StoreFile or StoreDynamo
	File  string        // the file, for StoreFile
	Table string        // the table, for StoreDynamo
	Keep  int           // executions StoreMemory and StoreFile hold in memory; 0 the default (10,000)
	TTL   time.Duration // how long DynamoDB keeps a record; 0 forever
	// Endpoint points DynamoDB at another endpoint, such as DynamoDB
	// Local: the table is created when missing, and without AWS
	// credentials in the environment local ones are used.
	Endpoint string
}

// ConfigFromEnv reads a Config from the environment, as the Lambda
// functions are configured.
func ConfigFromEnv() (Config, error) {
	servers, err := ServersFromEnv()
	if err != nil {
		return Config{}, err
	}
	keep, err := TracesKeep()
	if err != nil {
		return Config{}, err
	}
	cfg := Config{
		CacheDir:           os.Getenv(EnvCompileCache),
		ShippedCacheDir:    os.Getenv(EnvShippedCache),
		Servers:            servers,
		ServersParam:       os.Getenv(EnvMCPServersParam),
		Demo:               strings.EqualFold(os.Getenv(EnvDemoTools), "on"),
		Traces:             TraceConfig{Store: StoreMemory, Keep: keep},
		CapabilitiesTable:  os.Getenv(EnvCapTable),
		CapabilitiesFile:   CapabilitiesFile(),
		CapabilityFunction: os.Getenv(EnvCapFunction),
		CompileWorkers:     compileWorkers(os.Getenv(EnvLambdaMemory), runtime.NumCPU()),
		MaxTimeout:         15 * time.Minute,
	}
	if cfg.CacheDir == "" {
		cfg.CacheDir = "/tmp/pml-cache"
	}
	if cfg.Tracing, err = TracingFromEnv(defaultTracing()); err != nil {
		return Config{}, err
	}
	if cfg.Learn, err = LearnFromEnv(); err != nil {
		return Config{}, err
	}
	if cfg.Metrics, err = MetricsFromEnv(defaultMetrics()); err != nil {
		return Config{}, err
	}
	switch cfg.ShippedCacheDir {
	case "":
		cfg.ShippedCacheDir = DefaultShippedCacheDir()
	case "off":
		cfg.ShippedCacheDir = ""
	}
	// Without a table, only a directory named on purpose: a Lambda
	// container's own disk would lose what it suspended to every other.
	cfg.Suspensions = SuspensionConfig{Table: os.Getenv(EnvSuspTable), Dir: os.Getenv(EnvSuspDir)}
	if cfg.Suspensions.TTL, err = SuspensionTTL(); err != nil {
		return Config{}, err
	}
	if cfg.Suspensions.SessionTTL, cfg.Suspensions.SessionMaxBytes, err = SessionBounds(); err != nil {
		return Config{}, err
	}
	if cfg.Suspensions.SessionQuota, cfg.Suspensions.SuspendedQuota, err = StoreQuotas(); err != nil {
		return Config{}, err
	}
	if cfg.DraftLimits, err = DraftLimitsFromEnv(); err != nil {
		return Config{}, err
	}
	if cfg.Policy, err = PolicyFromEnv(); err != nil {
		return Config{}, err
	}
	// The deployment's caller is an agent: it decides nothing unless the
	// deployment says so.
	if cfg.Approval, err = ApprovalFromEnv(false); err != nil {
		return Config{}, err
	}
	if cfg.Approval.KeySecret != "" {
		cfg.Approval.KeyFile = ""
	}
	if table := os.Getenv(EnvTracesTable); table != "" {
		days, _ := strconv.Atoi(os.Getenv(EnvTraceTTLDays))
		cfg.Traces = TraceConfig{Store: StoreDynamo, Table: table, TTL: time.Duration(days) * 24 * time.Hour}
	}
	return cfg, nil
}

// ServersFromEnv parses the server list in PML_MCP_SERVERS (none when it
// is unset): MCP servers, OpenAPI services and Lambda functions.
func ServersFromEnv() (serverconfig.Servers, error) {
	doc := os.Getenv(EnvMCPServers)
	if doc == "" {
		return nil, nil
	}
	return serverconfig.Parse(EnvMCPServers, []byte(doc), Kinds())
}

// MCPTextBytes is the budget of execute_code's text answer set by
// PML_MCP_TEXT_BYTES, or 0 (the default) when it is unset.
func MCPTextBytes() (int, error) {
	v := os.Getenv(EnvMCPTextBytes)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fault.New(fault.InvalidRequest, "%s must be a number of bytes, not %q", EnvMCPTextBytes, v)
	}
	return n, nil
}

// SuspensionTTL is how long a suspended execution waits as
// PML_SUSPENSION_TTL sets it, or 0 (suspend.DefaultTTL) when it is unset.
func SuspensionTTL() (time.Duration, error) {
	v := os.Getenv(EnvSuspTTL)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fault.New(fault.InvalidRequest, "%s must be a positive duration such as 24h, not %q", EnvSuspTTL, v)
	}
	return d, nil
}

// SuspensionsDir is the file store's directory: $PML_SUSPENSIONS_DIR,
// else suspensions/ in the user's data directory.
func SuspensionsDir() string { return userdata.Path(EnvSuspDir, "suspensions") }

// TracesKeep is the number of executions PML_TRACES_KEEP asks an
// in-memory or file trace store to hold, or 0 (the default) when it is
// unset.
func TracesKeep() (int, error) {
	v := os.Getenv(EnvTracesKeep)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fault.New(fault.InvalidRequest, "%s must be a positive number of executions, not %q", EnvTracesKeep, v)
	}
	return n, nil
}

// CapabilitiesFile is the file registry's path: $PML_CAPABILITIES_FILE,
// else capabilities.json in the user's data directory.
func CapabilitiesFile() string { return userdata.Path(EnvCapFile, "capabilities.json") }

// TracesFile is the trace file's path: $PML_TRACES_FILE, else traces.jsonl
// in the user's data directory.
func TracesFile() string { return userdata.Path(EnvTracesFile, "traces.jsonl") }

// Logger returns the JSON logger everything logs with, writing to w at
// PML_LOG_LEVEL, or at def when that is unset or not a level
// (logging.New).
func Logger(w io.Writer, def slog.Level) *slog.Logger { return logging.New(w, def) }

// App is a wired service and what it needs closed.
type App struct {
	// Service runs executions: the execution service over every source.
	Service  *executor.Service
	Registry capability.Registry
	Engine   *guest.Engine
	// Tools are the configured servers (internal/toolsource: MCP servers,
	// OpenAPI services, Lambda functions), nil when none is configured;
	// MCP is the kind of their MCP servers, whose Stats count the
	// protocol's traffic.
	Tools        *toolsource.Set
	MCP          *mcpkind.Kind
	Traces       httpapi.TraceReader
	Capabilities capapi.Capabilities
	// Guard publishes capabilities as the policy decides: every save and
	// every draft's publication goes through it.
	Guard *capability.Guard
	// Suggestions serve the learning loop's suggestions (nil when it is
	// off); Ranker ranks search with the capabilities' evidence.
	Suggestions capapi.Suggestions
	Ranker      *ranking.Ranker
	// Learn is where the learning loop's counts are read (nil when off).
	Learn learn.Store
	Sink  trace.Sink
	// Suspensions is the store of suspended executions, nil when there is
	// none; Runs the store of asynchronous executions beside it.
	Suspensions suspend.Store
	Runs        suspend.Runs
	// Sessions is the store of sessions beside them, nil when there is
	// none (sessions are then refused).
	Sessions suspend.Sessions
	// Journal is the journal of effects beside them (the table's JRNL#
	// partitions, the directory's journal/), nil when there is neither:
	// each run then keeps its own in memory.
	Journal journal.Store
	// Metrics receives the service's metrics, nil when it keeps none.
	Metrics metrics.Recorder
	// pageSessions keeps the approval page's sessions beside the
	// suspensions (nil without them: the page keeps them in memory).
	pageSessions suspend.PageSessions
	runner       *capability.Runner
	approvalKey  approval.Key
	policy       approval.Policy
	bus          string
	page         PageConfig
	aws          awsConfig
	log          *slog.Logger
	closers      []func(context.Context) error
}

// FromEnv builds the service the environment describes (see
// ConfigFromEnv).
func FromEnv(ctx context.Context, log *slog.Logger) (*App, error) {
	cfg, err := ConfigFromEnv()
	if err != nil {
		return nil, err
	}
	return New(ctx, cfg, log)
}

// FunctionFromEnv is FromEnv for a Lambda function's init, logging the
// "init" line its logs are read by: how long building the service took
// (duration_ms) and which guest it runs (guest, the guest's hash).
func FunctionFromEnv(ctx context.Context, log *slog.Logger) (*App, error) {
	start := time.Now()
	a, err := FromEnv(ctx, log)
	if err != nil {
		return nil, err
	}
	log.Info("init", "duration_ms", float64(time.Since(start).Microseconds())/1000, "guest", a.Engine.WasmHash())
	return a, nil
}

// New builds the service: the guest engine (compiled once per process, or
// loaded from the shipped or an earlier process's cache: one guest_cache
// log line says which),
// the MCP client pool, and the sources and sinks cfg selects. Errors in
// cfg itself (a bad server list) are *fault.Error with code
// INVALID_REQUEST.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*App, error) {
	a := &App{log: log}
	// The engine loads (wazero decodes and validates the guest's code,
	// ~20 ms of CPU even with its machine code cached) while the rest is
	// built — a server list or a policy set fetched, clients made — on
	// the other core; it is joined where the service needs it.
	var opening *openingEngine
	if cfg.Engine == nil {
		opening = openEngineAsync(ctx, cfg, log)
	}
	fail := func(err error) (*App, error) {
		if opening != nil {
			if eng, _, err := opening.join(); err == nil {
				_ = eng.Close(ctx)
			}
		}
		a.Close(ctx)
		return nil, err
	}
	out := cfg.MetricsOutput
	if out == nil {
		out = os.Stdout
	}
	rec, err := openMetrics(cfg.Metrics, out, cfg.MetricsExporter)
	if err != nil {
		return fail(err)
	}
	a.Metrics = rec

	servers := cfg.Servers
	if len(servers) == 0 && cfg.ServersParam != "" {
		if servers, err = a.serversFromSSM(ctx, cfg.ServersParam, cfg.Kinds); err != nil {
			return fail(err)
		}
	}
	// One policy set decides every call and decision from here on.
	var counter policy.Counter
	if cfg.Approval.Policy, counter, err = a.openPolicy(ctx, cfg, log); err != nil {
		return fail(err)
	}
	if cfg.Answerer != nil && !cfg.Approval.Policy.MayAnswer(approval.Decider{Channel: execution.ChannelCaller}, "") {
		return fail(fault.New(fault.InvalidRequest, "remote servers' questions can be answered in line only where the caller decides (the caller's answer is weighed as an approval)"))
	}
	sources, err := a.openSources(ctx, servers, cfg.CacheDir, cfg.ShippedCacheDir, cfg.Kinds, cfg.MCPAuth, cfg.Answerer, log)
	if err != nil {
		return fail(err)
	}
	if cfg.Demo {
		sources = append(sources, demoserver.Source{})
	}
	store, err := a.aws.openTraces(ctx, cfg.Traces, log)
	if err != nil {
		return fail(err)
	}
	a.Traces = store
	tracer, err := a.openTracing(ctx, cfg.Tracing)
	if err != nil {
		return fail(err)
	}
	var ms trace.Sink
	if rec != nil {
		ms = metrics.Sink{R: rec}
	}
	a.Sink = sinks(store, tracer, ms)
	if a.Registry, err = a.aws.openRegistry(ctx, cfg, log); err != nil {
		return fail(err)
	}
	if c, ok := a.Registry.(io.Closer); ok {
		a.closers = append(a.closers, func(context.Context) error { return c.Close() })
	}
	// A version never changes once saved: a capability run reads its
	// definition once per process.
	a.Registry = capability.Cached(a.Registry, 0)
	if names := servers.Names(); len(names) > 0 {
		// Every save path (HTTP, the MCP endpoint) goes through this
		// registry; a capability may not take a server's name.
		a.Registry = capability.Reserve(a.Registry, names...)
	}
	// Capability calls run in process on this app's own service (every
	// run is a fresh sandbox), or in the capability function.
	a.runner = &capability.Runner{Registry: a.Registry}
	var invoker capability.Invoker = a.runner
	if cfg.CapabilityFunction != "" {
		awsCfg, err := a.aws.load(ctx)
		if err != nil {
			return fail(err)
		}
		invoker = capability.LambdaInvoker{Client: lambda.NewFromConfig(awsCfg), Function: cfg.CapabilityFunction}
	}
	if a.Suspensions, err = a.aws.openSuspensions(ctx, cfg.Suspensions, log); err != nil {
		return fail(err)
	}
	if a.Runs, err = a.aws.openRuns(ctx, cfg.Suspensions); err != nil {
		return fail(err)
	}
	if a.Sessions, err = a.aws.openSessions(ctx, cfg.Suspensions); err != nil {
		return fail(err)
	}
	if a.pageSessions, err = a.aws.openPageSessions(ctx, cfg.Suspensions); err != nil {
		return fail(err)
	}
	if a.Journal, err = a.aws.openJournal(ctx, cfg.Suspensions); err != nil {
		return fail(err)
	}
	// The MCP servers (and demo tools) come before capabilities: a name
	// both offer is the server's, as ADR-052 resolves it.
	// Discovery (tools.*, /tools, search_tools, list_capabilities) reads
	// one index per process; executions resolve names.
	index := capability.NewIndex(a.Registry, capability.IndexOptions{Logger: log})
	capSource := capability.NewSourceWith(a.Registry, invoker, capability.SourceOptions{Logger: log, Index: index})
	a.closers = append(a.closers, capSource.Close)
	sources = append(sources, capSource)
	key, notify, err := a.openApproval(ctx, cfg.Approval, log)
	if err != nil {
		return fail(err)
	}
	a.approvalKey, a.policy, a.bus, a.page = key, cfg.Approval.Policy, cfg.Approval.Bus, cfg.Approval.Page
	if a.page.OIDC != nil && a.page.OIDC.ClientSecret == "" && a.page.OIDCSecretARN != "" {
		if a.page.OIDC.ClientSecret, err = a.secretString(ctx, a.page.OIDCSecretARN); err != nil {
			return fail(fmt.Errorf("the approval page's client secret: %w", err))
		}
	}
	a.Guard = &capability.Guard{Registry: a.Registry, Policy: cfg.Approval.Policy, Notify: notify.drafted, Index: index, DraftLimits: cfg.DraftLimits}
	a.Capabilities = a.Guard
	var learner *learn.Learner
	if !cfg.Learn.Off {
		a.Learn = LearnStore(store)
	}
	if a.Learn != nil {
		var known *redact.Redactor
		if a.Tools != nil {
			known = a.Tools.Redactor()
		}
		learner = learn.NewLearner(known)
		a.Suggestions = suggestionsAPI{store: a.Learn, min: cfg.Learn.MinSuccesses, guard: a.Guard}
	}
	a.Ranker = &ranking.Ranker{Capabilities: index.List, Store: a.Learn, Related: related(store), Log: log}
	a.closers = append(a.closers, a.Ranker.Close)
	eng, err := a.joinEngine(opening, cfg.Engine, rec)
	opening = nil
	if err != nil {
		return fail(err)
	}
	a.Service = executor.New(eng, executor.Options{Sources: sources, Sink: a.Sink, Logger: log, Suspensions: a.Suspensions, Counter: counter,
		Policy: cfg.Approval.Policy, Notify: notify.suspended, MaxTimeout: cfg.MaxTimeout, Learner: learner, Ranker: a.Ranker,
		Sessions: a.Sessions, SessionTTL: cfg.Suspensions.SessionTTL, SessionMaxBytes: cfg.Suspensions.SessionMaxBytes,
		Answerer: cfg.Answerer, Journal: a.Journal, MaxGrant: cfg.Approval.MaxGrant, Traces: store})
	a.runner.Executor = a.Service
	return a, nil
}

// joinEngine waits for the engine opening began (none: cfg.Engine, the
// caller's) and makes it the app's.
func (a *App) joinEngine(opening *openingEngine, given *guest.Engine, rec metrics.Recorder) (*guest.Engine, error) {
	if opening == nil {
		a.Engine = given
		return given, nil
	}
	eng, cached, err := opening.join()
	if err != nil {
		return nil, fmt.Errorf("guest engine: %w", err)
	}
	cached.log(a.log)
	if rec != nil {
		rec.ColdStart()
		rec.GuestCache(cached.hit)
	}
	a.closers = append(a.closers, eng.Close)
	a.Engine = eng
	return eng, nil
}

// related reads the trace store's co-occurrence for the ranker.
func related(store tracedb.Store) func(context.Context, string) (map[string]int64, error) {
	return func(ctx context.Context, tool string) (map[string]int64, error) {
		rel, err := store.RelatedTools(ctx, tool, 50)
		if err != nil {
			return nil, err
		}
		out := make(map[string]int64, len(rel))
		for _, r := range rel {
			out[r.Tool] = r.Count
		}
		return out, nil
	}
}

// HTTPHandler returns the HTTP API (routes, the MCP endpoint) over this
// app: opts says what the front end adds (its logger, guard, streaming,
// text budget, and the app's service wrapped, as pml serve admits it
// within its budget); the traces, capabilities and health are the app's.
func (a *App) HTTPHandler(opts httpapi.Options) *httpapi.Handler {
	if opts.Service == nil {
		opts.Service = a.Service
	}
	opts.Traces, opts.Capabilities, opts.Health = a.Traces, a.Capabilities, a.Health
	if a.Journal != nil {
		opts.Journal = a.Journal
	}
	opts.Suggestions, opts.Ranker = a.Suggestions, a.Ranker
	opts.Policy, opts.MCP.StateKey, opts.MCP.Suspends = a.policy, a.approvalKey, a.Suspensions != nil
	if opts.Approvals == nil {
		opts.Approvals = a.ApprovalPage(opts.Service, opts.Logger)
	}
	return httpapi.New(opts)
}

// ApprovalPage is the approval page over exec (the executor the HTTP API
// resumes through) and the capability guard's drafts, nil where there is
// nothing to decide on it (no store of suspended executions and no
// capability registry) or no key to sign its sessions with.
func (a *App) ApprovalPage(exec execution.Executor, log *slog.Logger) *approvalpage.Page {
	if a.approvalKey == nil || (a.Suspensions == nil && a.Guard == nil) {
		return nil
	}
	if log == nil {
		log = a.log
	}
	opts := approvalpage.Options{Service: exec, Policy: a.policy, Key: a.approvalKey,
		BaseURL: a.page.URL, OIDC: a.page.OIDC, Links: a.page.Links, Logger: log}
	if a.pageSessions != nil {
		opts.Sessions = a.pageSessions
	}
	if a.Suspensions != nil {
		opts.Lister = a.Service
	}
	if a.Guard != nil {
		opts.Drafts = a.Guard
	}
	p, err := approvalpage.New(opts)
	if err != nil {
		// The configuration was checked when it was read.
		log.Error("approval page not served", "err", err)
		return nil
	}
	return p
}

// AnnouncesSuspensions reports whether suspensions are announced to
// approvers beyond this process's log (an EventBridge bus): only then may
// queued front ends (SQS, EventBridge) ask for approval "suspend".
func (a *App) AnnouncesSuspensions() bool { return a.bus != "" }

// CapabilityRunner runs capability invocations on this app's service: the
// capability function's handler takes it.
func (a *App) CapabilityRunner() *capability.Runner { return a.runner }

// ServerHealth reports the servers' states (MCP servers, then Lambda
// functions, then OpenAPI services), an empty list without servers.
func (a *App) ServerHealth() []toolsource.Health {
	out := []toolsource.Health{}
	if a.Tools != nil {
		out = append(out, a.Tools.Health()...)
	}
	return out
}

// Health is the details of /healthz: the MCP servers' states.
func (a *App) Health() any { return map[string]any{"mcp_servers": a.ServerHealth()} }

// Close releases everything New opened.
func (a *App) Close(ctx context.Context) {
	for i := len(a.closers) - 1; i >= 0; i-- {
		_ = a.closers[i](ctx)
	}
}

// serversFromSSM reads the server list from an SSM parameter.
func (a *App) serversFromSSM(ctx context.Context, name string, kinds []toolsource.Kind) (serverconfig.Servers, error) {
	cfg, err := a.aws.load(ctx)
	if err != nil {
		return nil, err
	}
	v, err := ssmparam.Get(ctx, cfg, name)
	if err != nil {
		return nil, fmt.Errorf("reading MCP servers from SSM parameter %s: %w", name, err)
	}
	return serverconfig.Parse(name, []byte(v), Kinds(kinds...))
}

// awsConfig loads the AWS SDK configuration once, when something first
// needs it: a process that uses no AWS service never looks for
// credentials. The tool sources load it from their own goroutines.
type awsConfig struct {
	mu  sync.Mutex
	cfg *aws.Config
	sm  oauthclient.SecretsAPI // secrets
}

func (c *awsConfig) load(ctx context.Context) (aws.Config, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cfg != nil {
		return *c.cfg, nil
	}
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return aws.Config{}, fmt.Errorf("aws config: %w", err)
	}
	// DynamoDB writes and capability invocations show in the X-Ray map
	// (outside a traced context the instrumentation stays silent).
	xraysink.InstrumentAWS(&cfg)
	sdkhttp.Use(&cfg)
	c.cfg = &cfg
	return cfg, nil
}
