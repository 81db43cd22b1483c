package cli

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/dustin/go-humanize"

	"github.com/pml-sandbox/pml/internal/admission"
	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/approvalpage"
	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/httpapi"
	"github.com/pml-sandbox/pml/internal/mcpserver"
	"github.com/pml-sandbox/pml/internal/runs"
)

func serveCmd(ctx context.Context, args []string, out, errOut io.Writer) (int, error) {
	fs := newFlagSet("serve", errOut)
	var sf serviceFlags
	var gf serveGuardFlags
	var bf serveBudgetFlags
	addr := fs.String("addr", "127.0.0.1:8080", "listen address; beyond loopback it needs --token")
	noDemo := fs.Bool("no-demo-server", false, "do not start the built-in demo MCP server")
	textBytes := fs.Int("mcp-text-bytes", 0, "budget in bytes of execute_code's text answer over MCP (default $"+app.EnvMCPTextBytes+", else 24000)")
	approvalURL := fs.String("approval-url", os.Getenv(app.EnvApprovalURL), "the approval page's base URL as browsers reach it, e.g. behind a reverse proxy (default $"+app.EnvApprovalURL+", else the URL each request came by)")
	sf.register(fs)
	gf.register(fs)
	bf.register(fs)
	if err := parse(fs, args); err != nil {
		return ExitUsage, err
	}
	if err := gf.check(); err != nil {
		return ExitUsage, err
	}
	if err := bf.check(); err != nil {
		return ExitUsage, err
	}
	if *textBytes == 0 {
		n, err := app.MCPTextBytes()
		if err != nil {
			return ExitUsage, usageError{err}
		}
		*textBytes = n
	}
	log := app.Logger(errOut, slog.LevelInfo)

	// Listening first tells the guard what the network can reach before
	// anything slower starts; connections wait in the backlog meanwhile.
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return ExitFailed, err
	}
	defer ln.Close()
	guard, err := gf.guard(*addr, ln.Addr())
	if err != nil {
		return ExitUsage, err
	}
	// On loopback the caller is the person at the keyboard; beyond it,
	// anyone with the token could be an agent.
	loopback := false
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && tcp.IP.IsLoopback() {
		sf.callerAuto, loopback = true, true
	}
	if sf.page, err = app.PageFromEnv(); err != nil {
		return ExitUsage, usageError{err}
	}
	sf.page.URL = strings.TrimSuffix(*approvalURL, "/")
	pageBase := cmp.Or(sf.page.URL, bannerURL(ln.Addr()))
	var page *approvalpage.Page
	if loopback {
		// The approval page's one-time links: printed here, on the
		// terminal of whoever started the server, for them alone.
		sf.page.Links = approvalpage.NewLocalLinks()
		sf.onSuspend = func(_ context.Context, n execution.SuspensionNotice) {
			if page != nil {
				fmt.Fprintf(errOut, "pml serve: execution %s waits for approval: %s\n  sign in to decide (one use, within %v): %s&next=%s\n",
					n.ExecutionID, page.ExecutionURL(pageBase, n.ExecutionID), approvalpage.LinkTTL, page.SignInLink(pageBase),
					url.QueryEscape(approvalpage.Prefix+"/"+n.ExecutionID))
			}
		}
		sf.onDraft = func(_ context.Context, n capability.DraftNotice) {
			if page != nil {
				fmt.Fprintf(errOut, "pml serve: capability draft %s of %s waits to be published: %s\n  sign in to decide (one use, within %v): %s&next=%s\n",
					n.DraftID, n.Name, page.ExecutionURL(pageBase, n.DraftID), approvalpage.LinkTTL, page.SignInLink(pageBase),
					url.QueryEscape(approvalpage.Prefix+"/"+n.DraftID))
			}
		}
	}

	// The demo MCP server gives a first run something real to call: a
	// scratch key-value store, text tools and a clock, over loopback.
	if !*noDemo {
		ds, err := demoserver.Start("127.0.0.1:0")
		if err != nil {
			return ExitFailed, err
		}
		defer ds.Close()
		sf.mcp = append([]string{"demo=" + ds.StreamableURL()}, sf.mcp...)
	}
	sf.metrics = app.MetricsPrometheus
	a, err := sf.open(ctx, log)
	if err != nil {
		return ExitFailed, err
	}
	defer a.Close(context.Background())

	// The budget's baseline is what the process holds now, ready and idle.
	// Its refusals are limit hits.
	budget, err := bf.controller(a.LimitHit)
	if err != nil {
		return ExitUsage, err
	}
	cfg := budget.Config()
	log.Info("server budget", "max_memory", humanize.IBytes(uint64(cfg.Memory)), "baseline", humanize.IBytes(uint64(cfg.Baseline)),
		"max_executions", cfg.Executions, "queue_wait", cfg.Wait.String())
	clients := httpapi.DefaultClientLimits()
	// Asynchronous executions run on goroutines of this process, each
	// within the budget as any execution.
	exec := a.Executor(budget.Admit(a.Service), nil)
	defer exec.Close(context.Background())
	if err := sweepRuns(exec); err != nil {
		return ExitUsage, err
	}
	page = a.ApprovalPage(exec, log)
	api := a.HTTPHandler(httpapi.Options{
		Approvals: page,
		Service:   exec,
		Logger:    log,
		Guard:     guard,
		Streaming: true,
		EarlyID:   true,
		MCP:       mcpserver.Settings{Sessions: true, TextBytes: *textBytes},
		Clients:   &clients,
		Metrics:   a.MetricsHandler(),
	})
	handler := budget.RetryAfter(api)
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	printBanner(errOut, bannerURL(ln.Addr()), guard.Token != "")
	if page != nil {
		if link := page.SignInLink(pageBase); link != "" {
			fmt.Fprintf(errOut, "  Approval page: %s%s (sign in once with %s: one use, within %v; a new link is printed whenever an execution waits)\n",
				pageBase, approvalpage.Prefix, link, approvalpage.LinkTTL)
		} else {
			fmt.Fprintf(errOut, "  Approval page: %s%s\n", pageBase, approvalpage.Prefix)
		}
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return ExitFailed, err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return ExitFailed, fmt.Errorf("shutting down: %w", err)
	}
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return ExitFailed, err
	}
	_ = api.Close(sctx)
	_ = exec.Close(sctx)
	fmt.Fprintln(errOut, "pml serve: stopped")
	return ExitOK, nil
}

// sweepRuns takes over and continues the runs whose runner died (a pml
// serve killed before this one, over the same stores): now, and whenever
// their lease lapses (PML_SWEEP_EVERY).
func sweepRuns(exec *runs.Service) error {
	every, err := app.SweepEvery()
	if err != nil {
		return usageError{err}
	}
	exec.StartSweeper(every)
	return nil
}

// printBanner shows how to call the server. With a token it shows the
// header to send but never the token, which would end up in logs.
func printBanner(w io.Writer, base string, token bool) {
	auth, mcpAuth, note := "", "", ""
	if token {
		auth = ` -H "Authorization: Bearer $PML_SERVE_TOKEN"`
		mcpAuth = ` --header "Authorization: Bearer $PML_SERVE_TOKEN"`
		note = "  Every route but /healthz needs the token (export PML_SERVE_TOKEN for these examples).\n"
	}
	fmt.Fprintf(w, `pml serve: listening on %s (Ctrl-C stops)
%[4]s
  curl -s %[1]s/execute%[2]s -H 'Content-Type: application/json' -d '{"code":"await mcp.demo.kv_set({key:\"n\", value: 41}); const v = await mcp.demo.kv_get({key:\"n\"}); return v.value + 1"}'
  curl -s%[2]s '%[1]s/tools?format=dts'
  curl -s%[2]s %[1]s/executions/EXECUTION_ID
  MCP endpoint for agents: %[1]s/mcp   (claude mcp add --transport http pml %[1]s/mcp%[3]s)
`, base, auth, mcpAuth, note)
}

// bannerURL is a URL that reaches the listener and passes the Host check:
// a wildcard address is shown as 127.0.0.1.
func bannerURL(addr net.Addr) string {
	if tcp, ok := addr.(*net.TCPAddr); ok && tcp.IP.IsUnspecified() {
		return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(tcp.Port))
	}
	return "http://" + addr.String()
}

// serveGuardFlags protect pml serve from the web pages its user visits
// (cross-site requests, DNS rebinding) and, beyond loopback, from the
// network.
type serveGuardFlags struct {
	hosts, origins listFlag
	token          string
}

func (f *serveGuardFlags) register(fs *flag.FlagSet) {
	fs.Var(&f.hosts, "allowed-host", "a Host to answer besides loopback names, as NAME or NAME:PORT, e.g. behind a reverse proxy (repeatable)")
	fs.Var(&f.origins, "allowed-origin", "a web origin (https://app.example) whose pages may call the API besides loopback ones; requests with any other Origin are refused (repeatable)")
	fs.StringVar(&f.token, "token", "", "require Authorization: Bearer TOKEN on every route but /healthz (default $PML_SERVE_TOKEN; required beyond loopback)")
}

// check validates the flags and takes the token from PML_SERVE_TOKEN when
// --token is not given (the environment keeps it out of `ps`).
func (f *serveGuardFlags) check() error {
	if f.token == "" {
		f.token = os.Getenv(app.EnvServeToken)
	}
	if strings.ContainsFunc(f.token, unicode.IsSpace) {
		return usagef("the token (--token or PML_SERVE_TOKEN) must not contain spaces")
	}
	for _, h := range f.hosts {
		if h == "" || strings.ContainsAny(h, "/@ \t") {
			return usagef("--allowed-host %q is not a host: give NAME or NAME:PORT", h)
		}
	}
	for _, o := range f.origins {
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
			strings.TrimSuffix(u.Path, "/") != "" || u.RawQuery != "" || u.Fragment != "" {
			return usagef("--allowed-origin %q is not an origin such as https://app.example", o)
		}
	}
	return nil
}

// guard returns the handler's guard for a server listening on addr (what
// --addr, given as listen, resolved to). Beyond
// loopback anyone on the network could run code and call the configured
// tools, so a token is required there; a specific address listened on is a
// Host the server answers to (an IP address cannot be rebound).
func (f *serveGuardFlags) guard(listen string, addr net.Addr) (*httpapi.Guard, error) {
	g := &httpapi.Guard{AllowedHosts: f.hosts, AllowedOrigins: f.origins, Token: f.token}
	tcp, ok := addr.(*net.TCPAddr)
	if ok && tcp.IP.IsLoopback() {
		return g, nil
	}
	if f.token == "" {
		return nil, usagef("--addr %s is reachable beyond this machine: set a token with PML_SERVE_TOKEN or --token (clients then send Authorization: Bearer TOKEN), or listen on 127.0.0.1", listen)
	}
	if ok && !tcp.IP.IsUnspecified() {
		g.AllowedHosts = append(slices.Clone(g.AllowedHosts), tcp.IP.String())
	}
	return g, nil
}

// serveBudgetFlags set the server-wide budget (internal/admission).
type serveBudgetFlags struct {
	memory     string
	executions int
	wait       time.Duration
	// memoryBytes is memory, parsed by check (0: the machine's default).
	memoryBytes int64
}

func (f *serveBudgetFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.memory, "max-memory", "", "the most memory the server holds, e.g. 2GiB: executions past it wait, then get 503 (default $"+app.EnvServeMemory+", else half the machine's memory or three quarters of its cgroup's limit)")
	fs.IntVar(&f.executions, "max-executions", 0, "executions at once; more wait, then get 503 (default $"+app.EnvServeExecutions+", else 32 per CPU)")
	fs.DurationVar(&f.wait, "queue-wait", 0, "how long a request waits for room before its 503 (default $"+app.EnvServeQueueWait+", else 3s)")
}

// check takes what the flags leave unset from the environment and
// validates it.
func (f *serveBudgetFlags) check() error {
	if f.memory == "" {
		f.memory = os.Getenv(app.EnvServeMemory)
	}
	if f.memory != "" {
		n, err := humanize.ParseBytes(f.memory)
		if err != nil || n == 0 || n > 1<<62 {
			return usagef("the memory budget (--max-memory or %s) %q is not a size such as 2GiB or 512MB", app.EnvServeMemory, f.memory)
		}
		f.memoryBytes = int64(n)
	}
	if f.executions == 0 {
		if v := os.Getenv(app.EnvServeExecutions); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return usagef("%s must be a positive number of executions, not %q", app.EnvServeExecutions, v)
			}
			f.executions = n
		}
	}
	if f.executions < 0 {
		return usagef("--max-executions must be positive")
	}
	if f.wait == 0 {
		if v := os.Getenv(app.EnvServeQueueWait); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return usagef("%s must be a positive duration such as 3s, not %q", app.EnvServeQueueWait, v)
			}
			f.wait = d
		}
	}
	if f.wait < 0 {
		return usagef("--queue-wait must be positive")
	}
	return nil
}

// controller builds the budget: the machine's defaults (the baseline is
// the process's size now), overridden by the flags.
func (f *serveBudgetFlags) controller(onRefuse func(limit string)) (*admission.Controller, error) {
	cfg := admission.DefaultConfig()
	cfg.OnRefuse = onRefuse
	if f.memoryBytes > 0 {
		cfg.Memory = f.memoryBytes
	}
	if f.executions > 0 {
		cfg.Executions = f.executions
	}
	if f.wait > 0 {
		cfg.Wait = f.wait
	}
	c, err := admission.New(cfg)
	if err != nil {
		return nil, usageError{err}
	}
	return c, nil
}
