// Package httpapi is PML Sandbox's HTTP interface: one http.Handler with the
// REST routes POST /execute, GET and DELETE /executions/{id}, POST
// /executions/{id}/resume and /executions/{id}/rollback, GET and DELETE /sessions/{id}, GET /tools, GET
// and POST /capabilities, /capabilities/drafts (GET; GET, DELETE /{id};
// POST /{id}/publish, /{id}/reject), GET /capabilities/suggestions and POST
// /capabilities/suggestions/{id}/publish, GET /healthz, GET /metrics where
// there are metrics, the approval page's routes (internal/approvalpage),
// and the MCP server (internal/mcpserver) mounted at /mcp (every method
// reaches it: POST, DELETE where it keeps sessions, 405 for the rest).
// Unknown routes and wrong methods are answered 404 and 405 in the JSON
// error shape; RouteKeys lists every route for template.yaml. Both fronts
// stand on
// execution.Executor. `pml serve` serves the handler directly; the execute
// Lambda serves it through API Gateway events (internal/lambdaevents), so
// both deployments share every route, status code and error shape.
package httpapi

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/debug"
	"slices"
	"time"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/approvalpage"
	"github.com/pml-sandbox/pml/internal/capapi"
	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/delivery"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/httpjson"
	"github.com/pml-sandbox/pml/internal/journal"
	"github.com/pml-sandbox/pml/internal/mcpserver"
	"github.com/pml-sandbox/pml/internal/pagelink"
	"github.com/pml-sandbox/pml/internal/trace"
	"github.com/pml-sandbox/pml/internal/tracectx"
	"github.com/pml-sandbox/pml/internal/tsdecl"
)

// TraceReader reads stored executions. An unknown id is an error whose
// fault code is NOT_FOUND.
type TraceReader interface {
	GetExecution(ctx context.Context, id string) (trace.Execution, []trace.Call, error)
}

// Options configure the handler. Only Service is required.
type Options struct {
	// Service runs executions; a resume's refusal is mapped to a status
	// by RefusalStatus.
	Service execution.Executor
	Traces  TraceReader
	// Journal, when set, is the journal of effects: GET /executions/{id}
	// lists an execution's effects from it, and answers from it alone for
	// an execution whose trace was lost (its runner died before writing
	// it).
	Journal      journal.Reader
	Capabilities capapi.Capabilities
	// Suggestions, when set, serves GET /capabilities/suggestions, its
	// publish route and list_capabilities' suggested part.
	Suggestions capapi.Suggestions
	// Ranker, when set, ranks search_tools and annotates the d.ts.
	Ranker capapi.Ranker
	// Health adds details (e.g. MCP server states) to /healthz.
	Health func() any
	Logger *slog.Logger
	// MaxBodyBytes caps request bodies (default httpjson.DefaultBodyBytes).
	MaxBodyBytes int64
	// FlushTimeout bounds writing traces after an execution (default
	// delivery.DefaultFlushTimeout).
	FlushTimeout time.Duration
	// Guard, when set, checks every request's Host, Origin and bearer
	// token before routing it; `pml serve` sets it, the Lambda does not.
	Guard *Guard
	// Streaming lets POST /execute answer `Accept: text/event-stream` with
	// events as they happen, and /mcp send progress and log notifications
	// during execute_code. `pml serve` sets it; the Lambda streams only the
	// requests of a front that streams (WithStreaming: the REST API), and
	// answers the HTTP API's buffered as before.
	Streaming bool
	// EarlyID sends a synchronous POST /execute's execution id in a 103
	// (Early Hints) response before the run, X-Execution-Id, so that a
	// caller whose connection drops mid-run can find it: `pml serve` sets
	// it (API Gateway passes no 1xx).
	EarlyID bool
	// StreamHeartbeat is how long an event stream may stay silent before a
	// comment line goes out to keep proxies and API Gateway (whose idle
	// timeout is 5 minutes, 30 s for an edge-optimized endpoint) from
	// closing it (default 15 s).
	StreamHeartbeat time.Duration
	// Policy says who decides: approvers may read and decide any
	// execution; it also shapes what a suspended execution's answer tells
	// a model it may do.
	Policy approval.Policy
	// Clients, when set, bounds how slowly a client may send a body or
	// read a response (see ClientLimits); `pml serve` sets it, the Lambda
	// has no socket to set deadlines on.
	Clients *ClientLimits
	// Metrics, when set, is served at GET /metrics, behind the guard
	// (pml serve's Prometheus endpoint). It is not a route of RouteKeys:
	// the Lambda has none, its metrics are logged (CloudWatch EMF).
	Metrics http.Handler
	// Approvals, when set, is the approval page, served at its routes
	// (approvalpage.RouteKeys), where a signed-in person decides; a
	// suspended execution's answer names its URL, and an MCP client the
	// deployment does not trust with a form is sent there (URL-mode
	// elicitation).
	Approvals *approvalpage.Page
	// MCP is what only the MCP server at /mcp reads (its sessions, text
	// budget, questions to a client's user); it shares the rest of these
	// options with the routes here.
	MCP mcpserver.Settings
}

type api struct {
	Options
	// mcp is the MCP server behind /mcp.
	mcp *mcpserver.Server
}

// Handler is the HTTP API. Close releases what it holds beyond a request
// (MCP sessions and their sweeper) once it serves no more.
type Handler struct {
	http.Handler
	mcp *mcpserver.Server
}

// Close ends the MCP sessions; call it after the server stopped serving.
func (h *Handler) Close(ctx context.Context) error { return h.mcp.Close(ctx) }

// New returns the handler.
func New(opts Options) *Handler {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.StreamHeartbeat <= 0 {
		opts.StreamHeartbeat = 15 * time.Second
	}
	a := &api{Options: opts}
	a.Service = pagelink.Executor(opts.Service, opts.Approvals)
	a.mcp = mcpserver.New(mcpserver.Options{Service: opts.Service, Capabilities: opts.Capabilities, Suggestions: opts.Suggestions,
		Ranker: opts.Ranker, Policy: opts.Policy, Approvals: opts.Approvals, Logger: opts.Logger, MaxBodyBytes: opts.MaxBodyBytes,
		FlushTimeout: opts.FlushTimeout, Streaming: opts.Streaming, Guarded: opts.Guard != nil, Settings: opts.MCP})
	mux := http.NewServeMux()
	for _, r := range routes {
		mux.Handle(r.pattern, r.handler(a))
	}
	if opts.Metrics != nil {
		mux.Handle("GET /metrics", opts.Metrics)
	}
	h := jsonMisses(mux)
	if opts.Guard != nil {
		h = newGuard(*opts.Guard, opts.Logger).wrap(h)
	}
	if opts.Clients != nil {
		// Outside the guard: a refused request's body is discarded under
		// the same deadlines.
		h = guardClients(*opts.Clients, opts.Logger, h)
	}
	return &Handler{Handler: a.middleware(h), mcp: a.mcp}
}

// route is one route of the API: the route key API Gateway deploys it
// under (template.yaml has one AWS::ApiGatewayV2::Route each), the
// ServeMux pattern that serves it here, and its handler.
type route struct {
	key, pattern string
	handler      func(*api) http.Handler
}

// routes are the API's routes: the caller's (every one API Gateway
// authorizes as the deployment's AuthMode says), then the approval page's
// (PageRouteKeys: a browser signs no request, the page signs people in
// itself).
var routes = append([]route{
	{"POST /execute", "POST /execute", func(a *api) http.Handler { return httpjson.RequireJSON(http.HandlerFunc(a.execute)) }},
	{"GET /executions/{id}", "GET /executions/{id}", func(a *api) http.Handler { return http.HandlerFunc(a.getExecution) }},
	{"DELETE /executions/{id}", "DELETE /executions/{id}", func(a *api) http.Handler { return http.HandlerFunc(a.cancelExecution) }},
	{"POST /executions/{id}/resume", "POST /executions/{id}/resume", func(a *api) http.Handler { return httpjson.RequireJSON(http.HandlerFunc(a.resume)) }},
	{"POST /executions/{id}/rollback", "POST /executions/{id}/rollback", func(a *api) http.Handler { return http.HandlerFunc(a.rollback) }},
	{"GET /sessions/{id}", "GET /sessions/{id}", func(a *api) http.Handler { return http.HandlerFunc(a.getSession) }},
	{"DELETE /sessions/{id}", "DELETE /sessions/{id}", func(a *api) http.Handler { return http.HandlerFunc(a.deleteSession) }},
	{"GET /tools", "GET /tools", func(a *api) http.Handler { return http.HandlerFunc(a.tools) }},
	{"GET /capabilities", "GET /capabilities", func(a *api) http.Handler { return http.HandlerFunc(a.listCapabilities) }},
	{"POST /capabilities", "POST /capabilities", func(a *api) http.Handler { return httpjson.RequireJSON(http.HandlerFunc(a.saveCapability)) }},
	{"GET /capabilities/drafts", "GET /capabilities/drafts", func(a *api) http.Handler { return http.HandlerFunc(a.listDrafts) }},
	{"GET /capabilities/drafts/{id}", "GET /capabilities/drafts/{id}", func(a *api) http.Handler { return http.HandlerFunc(a.getDraft) }},
	{"DELETE /capabilities/drafts/{id}", "DELETE /capabilities/drafts/{id}", func(a *api) http.Handler { return http.HandlerFunc(a.deleteDraft) }},
	{"POST /capabilities/drafts/{id}/publish", "POST /capabilities/drafts/{id}/publish", func(a *api) http.Handler {
		return httpjson.RequireJSON(http.HandlerFunc(a.publishDraft))
	}},
	{"POST /capabilities/drafts/{id}/reject", "POST /capabilities/drafts/{id}/reject", func(a *api) http.Handler {
		return httpjson.RequireJSON(http.HandlerFunc(a.rejectDraft))
	}},
	{"GET /capabilities/suggestions", "GET /capabilities/suggestions", func(a *api) http.Handler { return http.HandlerFunc(a.listSuggestions) }},
	{"POST /capabilities/suggestions/{id}/publish", "POST /capabilities/suggestions/{id}/publish", func(a *api) http.Handler {
		return httpjson.RequireJSON(http.HandlerFunc(a.publishSuggestion))
	}},
	{"GET /healthz", "GET /healthz", func(a *api) http.Handler { return http.HandlerFunc(a.health) }},
	{"POST /mcp", "POST /mcp", func(a *api) http.Handler { return a.mcp }},
	// GET is routed too so that a client opening an event stream hears
	// why there is none; here every other method reaches the MCP server,
	// which answers them (DELETE ends a session where there are sessions).
	{"GET /mcp", "/mcp", func(a *api) http.Handler { return a.mcp }},
}, pageRoutes()...)

// pageRoutes routes the approval page's routes to it.
func pageRoutes() []route {
	out := make([]route, len(approvalpage.RouteKeys))
	for i, k := range approvalpage.RouteKeys {
		out[i] = route{key: k, pattern: k, handler: func(a *api) http.Handler { return a.approvalPage() }}
	}
	return out
}

// PageRouteKeys are the approval page's routes: template.yaml routes them
// without the caller authorization of RouteKeys' others.
func PageRouteKeys() []string { return slices.Clone(approvalpage.RouteKeys) }

// approvalPage is the page, or an answer saying there is none.
func (a *api) approvalPage() http.Handler {
	if a.Approvals != nil {
		return a.Approvals
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		httpjson.WriteError(w, http.StatusNotFound, fault.New(fault.NotFound, "this server has no approval page (it keeps no suspended executions nor capability drafts, or has no approval key)"))
	})
}

// RouteKeys are the routes the API serves, as API Gateway route keys
// ("POST /execute"), in the order they are registered. template.yaml must
// declare each of them, and no other.
func RouteKeys() []string {
	keys := make([]string, len(routes))
	for i, r := range routes {
		keys[i] = r.key
	}
	return keys
}

// jsonMisses answers unknown routes (404) and wrong methods (405) with the
// same JSON error shape as every other failure, instead of ServeMux's text.
func jsonMisses(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code == http.StatusMethodNotAllowed {
			w.Header().Set("Allow", rec.Header().Get("Allow"))
			httpjson.WriteError(w, rec.Code, fault.New(fault.InvalidRequest, "%s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, rec.Header().Get("Allow")))
			return
		}
		httpjson.WriteError(w, http.StatusNotFound, fault.New(fault.NotFound, "no route %s %s", r.Method, r.URL.Path))
	})
}

// statusWriter remembers the status for the request log.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) { s.status = code; s.ResponseWriter.WriteHeader(code) }

// Unwrap lets http.ResponseController reach the connection.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Flush lets streaming responses (the MCP endpoint) through.
func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// middleware logs every request and turns a panic into a 500 JSON error.
func (a *api) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		defer func() {
			if p := recover(); p != nil {
				a.Logger.ErrorContext(r.Context(), "panic serving request", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				httpjson.WriteError(sw, http.StatusInternalServerError, fault.New(fault.Internal, "internal error"))
			}
			a.Logger.InfoContext(r.Context(), "request", "method", r.Method, "path", r.URL.Path, "status", sw.status,
				"duration_ms", float64(time.Since(start).Microseconds())/1000, "execution_id", sw.Header().Get("X-Execution-Id"))
		}()
		// A caller's W3C trace context: the execution's span nests under
		// it (X-Ray's header is read where the request is built).
		ctx := tracectx.FromHeader(r.Context(), r.Header)
		next.ServeHTTP(sw, r.WithContext(pagelink.WithBase(ctx, r)))
	})
}

// StatusOf maps an execution's outcome to an HTTP status: 200 when it
// succeeded, 202 when it suspended (it waits for decisions on
// resp.Pending) or runs on without the caller (async), else the failure's. A failure here is the execution's
// (a tool it was refused, a capability it named that does not exist:
// 422), never the route's; RefusalStatus maps a resume that never ran.
func StatusOf(resp *execution.Response) int {
	if resp.OK {
		return http.StatusOK
	}
	if resp.Suspended() || resp.Running() {
		return http.StatusAccepted
	}
	if resp.Error == nil {
		return http.StatusInternalServerError
	}
	if resp.Refused {
		// Nothing ran: a session busy, expired or unknown (sessions.go).
		return RefusalStatus(resp.Error)
	}
	switch resp.Error.Code {
	case fault.InvalidRequest:
		return http.StatusBadRequest
	case fault.LimitExceeded:
		return limitStatus(resp.Error)
	case fault.Timeout:
		return http.StatusGatewayTimeout
	case fault.Unavailable:
		return http.StatusServiceUnavailable
	case fault.Internal, fault.SandboxError:
		return http.StatusInternalServerError
	}
	return http.StatusUnprocessableEntity
}

// readBody reads a request body of at most MaxBodyBytes; on failure it
// has answered (413 or 400) and ok is false.
func (a *api) readBody(w http.ResponseWriter, r *http.Request) (body []byte, ok bool) {
	return httpjson.ReadBody(w, r, a.MaxBodyBytes)
}

func (a *api) execute(w http.ResponseWriter, r *http.Request) {
	body, ok := a.readBody(w, r)
	if !ok {
		return
	}
	req, ferr := execution.Decode(body, execution.SourceFrom(r.Context(), execution.SourceHTTP))
	if ferr != nil {
		httpjson.WriteError(w, http.StatusBadRequest, ferr)
		return
	}
	req.Principal = execution.PrincipalFrom(r.Context())
	req.TraceHeader = execution.TraceHeader(r.Context(), r.Header.Get("X-Amzn-Trace-Id"))
	if a.streams(r.Context()) && wantsEventStream(r) && !req.Async {
		a.executeStream(w, r, req)
		return
	}
	if a.EarlyID && !req.Async {
		// The id before the answer: a 103 (Early Hints) carrying it goes
		// out at once, so a caller whose connection drops mid-run can
		// still find its execution (GET /executions/{id}).
		req.ExecutionID = trace.NewExecutionID()
		w.Header().Set("X-Execution-Id", req.ExecutionID)
		w.WriteHeader(http.StatusEarlyHints)
	}
	resp := a.Service.Execute(r.Context(), req)
	a.flush(r.Context())
	w.Header().Set("X-Execution-Id", resp.ExecutionID)
	if resp.Running() {
		pollHeaders(w, resp.ExecutionID)
	}
	sessionHeaders(w, resp)
	httpjson.Write(w, StatusOf(resp), resp)
}

// flush writes the execution's traces before the response goes out, so a
// Lambda frozen right after answering loses nothing.
func (a *api) flush(ctx context.Context) {
	delivery.Flush(ctx, a.Service, a.FlushTimeout, a.Logger)
}

// limitStatus is the status of a LIMIT_EXCEEDED: 413 for code over the
// size limit, 422 for the rest.
func limitStatus(e *fault.Error) int {
	if e.Limit == fault.LimitCodeSize {
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusUnprocessableEntity
}

func (a *api) getExecution(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if a.streams(r.Context()) && wantsEventStream(r) && a.followExecution(w, r, id) {
		return
	}
	if a.asyncDocument(w, r, id) {
		return
	}
	if a.Traces == nil && a.Journal == nil {
		httpjson.WriteError(w, http.StatusNotFound, fault.New(fault.NotFound, "this deployment keeps no traces"))
		return
	}
	caller := execution.PrincipalFrom(r.Context())
	var err error = fault.New(fault.NotFound, "no execution %q", id)
	var ex trace.Execution
	var calls []trace.Call
	if a.Traces != nil {
		ex, calls, err = a.Traces.GetExecution(r.Context(), id)
	}
	entries := a.journalOf(r, id)
	if fault.CodeOf(err) == fault.NotFound && len(entries) > 0 {
		// The trace was lost (its runner died before writing it); the
		// journal, written as the effects happened, says what they did.
		ex, calls, err = trace.Execution{ID: id, Principal: entries[0].Principal, StartedAt: entries[0].IntendedAt}, nil, nil
	}
	if (err == nil && !a.Policy.MayAccess(caller, ex.Principal)) || fault.CodeOf(err) == fault.NotFound {
		// Another principal's execution is answered exactly as a missing
		// one, so that ids cannot be probed; an approver may read any.
		err = fault.New(fault.NotFound, "no execution %q", id)
	}
	if err != nil {
		fe := fault.As(err)
		status := http.StatusInternalServerError
		if fe.Code == fault.NotFound {
			status = http.StatusNotFound
		}
		httpjson.WriteError(w, status, fe)
		return
	}
	if calls == nil {
		calls = []trace.Call{}
	}
	doc := map[string]any{"execution": ex, "calls": calls}
	if ex.Status == "" {
		doc["trace_missing"] = true
	}
	// Pending reads unknown but in a suspended execution's document, and
	// in one whose trace was lost only once it cannot be running any more
	// (journal.LostAfter).
	ended := ex.Status != trace.StatusSuspended && (ex.Status != "" || journal.Quiet(entries, time.Now()))
	if effects := journal.Effects(entries, ended); effects != nil {
		doc["effects"] = effects
		if state := execution.RollbackState(effects); state != "" {
			doc["rollback"] = state
		}
	}

	if ex.Status == trace.StatusSuspended {
		// Whoever decides sees what is asked: the pending calls with
		// their arguments, which traces never keep.
		if waiting, ferr := a.Service.Waiting(r.Context(), id); ferr == nil {
			doc["pending"], doc["expires_at"], doc["approvers"] = waiting.Pending, waiting.ExpiresAt, waiting.Approvers
			if waiting.Plan != nil {
				doc["plan"] = waiting.Plan
			}
			if waiting.ApprovalURL != "" {
				doc["approval_url"] = waiting.ApprovalURL
			}
		}
	}
	httpjson.Write(w, http.StatusOK, doc)
}

// journalOf is id's journal of effects, none when there is no journal or
// it cannot be read (the trace still answers).
func (a *api) journalOf(r *http.Request, id string) []journal.Entry {
	if a.Journal == nil {
		return nil
	}
	entries, err := a.Journal.List(r.Context(), id)
	if err != nil {
		a.Logger.WarnContext(r.Context(), "the journal of effects could not be read", "execution_id", id, "err", err)
	}
	return entries
}

func (a *api) tools(w http.ResponseWriter, r *http.Request) {
	tools := a.Service.Catalog(r.Context())
	switch r.URL.Query().Get("format") {
	case "dts":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, tsdecl.Declarations(a.annotate(r.Context(), tools)))
	case "", "json":
		if tools == nil {
			tools = []catalog.Tool{}
		}
		httpjson.Write(w, http.StatusOK, map[string]any{"tools": tools})
	default:
		httpjson.WriteError(w, http.StatusBadRequest, fault.New(fault.InvalidRequest, "format must be json or dts"))
	}
}

// health answers whether the server is up; the details (each upstream's
// URL, transport and tools; the runtime's figures) only to whom the
// deployment trusts with them (mayReadHealth).
func (a *api) health(w http.ResponseWriter, r *http.Request) {
	out := map[string]any{"ok": true}
	if a.mayReadHealth(r) {
		out["runtime"] = runtimeStats()
		if a.Health != nil {
			out["details"] = a.Health()
		}
	}
	httpjson.Write(w, http.StatusOK, out)
}

// mayReadHealth: behind the guard (pml serve), the token's holder, or
// anyone where the server asks for no token (every route is open to it
// then). Without a guard (the Lambda behind API Gateway, whose authorizer
// admits every caller, agents included), an approver only: an agent needs
// no upstream's host or port.
func (a *api) mayReadHealth(r *http.Request) bool {
	if a.Guard != nil {
		return heldToken(r.Context())
	}
	p := execution.PrincipalFrom(r.Context())
	return p != "" && a.Policy.IsApprover(p)
}

// RuntimeStats is the process's state in /healthz: enough to see a leak or
// a stalled collector from outside (the soak test watches it).
type RuntimeStats struct {
	Goroutines     int    `json:"goroutines"`
	HeapAllocBytes uint64 `json:"heap_alloc_bytes"`
	GCCycles       uint32 `json:"gc_cycles"`
}

func runtimeStats() RuntimeStats {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return RuntimeStats{Goroutines: runtime.NumGoroutine(), HeapAllocBytes: m.HeapAlloc, GCCycles: m.NumGC}
}
