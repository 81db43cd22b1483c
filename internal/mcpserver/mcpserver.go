// Package mcpserver is PML Sandbox's MCP server: the deployment itself as
// one MCP endpoint, so that an agent such as Claude Code adds it once and
// gets code execution over every tool behind it. It stands on
// execution.Executor, as the REST API (internal/httpapi) does, which mounts
// it at /mcp; `pml serve` and the execute Lambda serve it there.
//
// Its tools: execute_code (run a script; as a task, it runs on without the
// call), resume_execution and cancel_execution (a suspended or running
// execution), rollback_execution (its applied effects' compensations:
// rollback.go), end_session (execute_code's sessions), search_tools,
// list_capabilities and save_capability.
//
// Its HTTP surface (streamable HTTP): POST carries the JSON-RPC requests;
// DELETE ends a session where there are sessions (Settings.Sessions: pml
// serve); any other method is refused with 405. Beside mcp-go's methods it
// answers the tasks of protocol 2025-11-25 (tasks/get, tasks/result,
// tasks/cancel; tasks.go) and 2026-07-28's tasks extension (tasks/get,
// tasks/update, tasks/cancel; tasksv2.go) from the store of runs, so that
// any process or Lambda container answers any task. A suspended
// execution's pending calls are put to the client's user (elicit.go, a
// remote server's questions in question.go, the approval page in url.go,
// a capability draft in draft.go); progress and console output go out as
// notifications (progress.go); the text answer fits a budget (text.go,
// argstext.go).
package mcpserver

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/mark3labs/mcp-go/server"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/approvalpage"
	"github.com/pml-sandbox/pml/internal/capapi"
	"github.com/pml-sandbox/pml/internal/delivery"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/httpjson"
	"github.com/pml-sandbox/pml/internal/pagelink"
)

// Settings are what only the MCP server reads: a front that mounts it
// (httpapi.Options.MCP) passes them through as they are.
type Settings struct {
	// TextBytes is the default budget of execute_code's text answer
	// (default DefaultTextBytes); a call may set its own.
	TextBytes int
	// Sessions keeps MCP sessions (pml serve: one process answers a
	// session's every request), so that an older client can be asked
	// questions (server-initiated elicitation) on its request's stream.
	// Without it the endpoint is stateless (the Lambda).
	Sessions bool
	// Suspends is whether the service keeps suspended executions: only
	// then are a client's user asked to decide.
	Suspends bool
	// StateKey seals the state of the questions put to a client's user
	// (elicitation); without one, suspended executions are answered with
	// their document, not asked about.
	StateKey approval.Key
}

// Options configure the server. Only Service is required; the rest a
// front that mounts it shares with its own routes.
type Options struct {
	// Service runs executions.
	Service      execution.Executor
	Capabilities capapi.Capabilities
	// Suggestions, when set, fills list_capabilities' suggested part.
	Suggestions capapi.Suggestions
	// Ranker, when set, ranks search_tools.
	Ranker capapi.Ranker
	// Policy says who decides: whether the model's side may approve what
	// waits, and whether a client's user's answer counts.
	Policy approval.Policy
	// Approvals, when set, is the approval page: a suspended execution's
	// answer names its URL, and a client the deployment does not trust
	// with a form sends its user there (URL-mode elicitation).
	Approvals *approvalpage.Page
	Logger    *slog.Logger
	// MaxBodyBytes caps request bodies (default httpjson.DefaultBodyBytes).
	MaxBodyBytes int64
	// FlushTimeout bounds writing traces after an execution (default
	// delivery.DefaultFlushTimeout).
	FlushTimeout time.Duration
	// Streaming sends progress and log notifications during execute_code
	// for every request (pml serve); without it only the requests of a
	// front that streams do (delivery.WithStreaming).
	Streaming bool
	// Guarded says a guard in front checks every request's Host and
	// Origin (httpapi.Guard): mcp-go's own DNS-rebinding check is then
	// redundant, and would refuse the hosts the guard allows.
	Guarded bool
	Settings
}

// DefaultTextBytes is execute_code's default text budget: about 6,000
// tokens, enough for most results, small beside a model's context.
const DefaultTextBytes = 24000

// Server is the MCP endpoint, an http.Handler. Close releases what it
// holds beyond a request (sessions and their sweeper) once it serves no
// more.
type Server struct {
	opts Options
	// mcp is the one mcp-go server behind every method: all reach the
	// same sessions.
	mcp *server.StreamableHTTPServer
	// post serves a POST: a JSON body, the task methods, then mcp-go.
	post http.Handler
}

// New returns the server.
func New(opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.TextBytes <= 0 {
		opts.TextBytes = DefaultTextBytes
	}
	opts.Service = pagelink.Executor(opts.Service, opts.Approvals)
	s := &Server{opts: opts}
	s.mcp = s.mcpHandler()
	s.post = httpjson.RequireJSON(s.mcpTasks(s.mcp))
	return s
}

// Close ends the MCP sessions; call it after the server stopped serving.
func (s *Server) Close(ctx context.Context) error { return s.mcp.Shutdown(ctx) }

// ServeHTTP serves one request: POST through the task methods and mcp-go,
// DELETE (a session's end) where there are sessions; any other method is
// refused.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	r = r.WithContext(pagelink.WithBase(r.Context(), r))
	switch {
	case r.Method == http.MethodPost:
		s.post.ServeHTTP(w, r)
	case r.Method == http.MethodDelete && s.opts.Sessions:
		s.mcp.ServeHTTP(w, r)
	default:
		postOnly(w, r)
	}
}

// postOnly answers every method but POST on a stateless endpoint. It
// never sends anything unprompted, so the standalone event stream of GET
// would only hold a connection open (and keep `pml serve` from shutting
// down), and there is no session for DELETE to end; the MCP transport lets
// a server decline both with 405.
func postOnly(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Allow", http.MethodPost)
	httpjson.WriteError(w, http.StatusMethodNotAllowed, fault.New(fault.InvalidRequest,
		"%s is not allowed on /mcp (allowed: POST): the endpoint is stateless and opens no event stream", r.Method))
}

// readBody reads a request body within MaxBodyBytes; on failure it has
// answered and ok is false.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) (body []byte, ok bool) {
	return httpjson.ReadBody(w, r, s.opts.MaxBodyBytes)
}

// flush writes the execution's traces before the answer goes out.
func (s *Server) flush(ctx context.Context) {
	delivery.Flush(ctx, s.opts.Service, s.opts.FlushTimeout, s.opts.Logger)
}

// streams reports whether a request's notifications go out live.
func (s *Server) streams(ctx context.Context) bool {
	return s.opts.Streaming || delivery.Streaming(ctx)
}

// approvalURL is execution id's page, "" without a page.
func (s *Server) approvalURL(ctx context.Context, id string) string {
	return pagelink.URL(ctx, s.opts.Approvals, id)
}
