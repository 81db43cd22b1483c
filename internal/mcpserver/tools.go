package mcpserver

import (
	"context"
	"encoding/json"
	"maps"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/tracectx"
	"github.com/pml-sandbox/pml/internal/tsdecl"
)

// mcpHandler is mcp-go's server with this server's tools. Stateless
// streamable HTTP unless Sessions, so that any Lambda instance can answer
// any request.
func (s *Server) mcpHandler() *server.StreamableHTTPServer {
	// WithLogging declares the logging capability: console output goes to
	// the client as notifications/message (see mcpProgress).
	ms := server.NewMCPServer("pml-sandbox", "1.0.0", server.WithToolCapabilities(false), server.WithLogging(),
		// Tasks are answered by mcpTasks, from the store of runs: no list;
		// 2026-07-28 clients get the tasks extension (tasksv2.go).
		server.WithTaskCapabilities(false, true, true),
		server.WithExtensions(map[string]any{tasksExtension: map[string]any{}}),
		server.WithMetaPropagator(tracectx.MCPMeta{}), // a call's _meta.traceparent: its execution joins that trace
		server.WithInstructions("Run JavaScript against this deployment's tools with execute_code: "+
			"the code is the body of an async function; call tools as `await mcp.<server>.<tool>(args)` "+
			"and `return` the result. Use search_tools first to find tools. "+
			"With approval \"suspend\", a call that needs approval waits for a decision instead of failing: "+
			"ask the user, then continue with resume_execution."))
	ms.AddTool(mcp.NewTool("execute_code",
		mcp.WithDescription("Run a JavaScript or TypeScript program in a fresh sandbox. The code is the body of an async function: "+
			"`return` gives the result, `args` holds the arguments, tools are called as `await mcp.<server>.<tool>({...})` "+
			"and run concurrently under Promise.all. TypeScript types are stripped, not checked. "+
			"The text answer fits max_text_bytes (a long result is cut, saying how much); "+
			"structuredContent has the whole document {ok, result, logs, error, calls, effects, execution_id, duration_ms}; "+
			"effects lists each call of a tool that is not read-only with its idempotency key and status (applied, failed, not_sent, unknown). "+
			"With a progress token, each call's start and end is reported as progress and console output as log messages. "+
			"With approval \"suspend\", a call to a tool that needs approval (a destructive one) is held: once the script can only wait for held calls, "+
			"the execution suspends and the answer (not an error) is {ok: false, status: \"suspended\", execution_id, pending: [{call_id, server, tool, args, reason}], expires_at}; "+
			"show the pending calls to the user and continue with resume_execution. "+sessionUsage),
		mcp.WithString("code", mcp.Required(), mcp.Description("the body of an async function")),
		mcp.WithString("lang", mcp.Enum("js", "ts"), mcp.Description("ts strips TypeScript types first; without it, code that does not parse as JavaScript is tried as TypeScript")),
		mcp.WithString("call_detail", mcp.Enum("full", "summary", "none"), mcp.Description("how much of the calls structuredContent carries: every record (full, the default), counts per tool and failures (summary), or nothing")),
		mcp.WithNumber("max_text_bytes", mcp.Description("budget of the text answer in bytes (default set by the server, 24000 unless configured)")),
		mcp.WithObject("args", mcp.Description("JSON value bound to `args`")),
		mcp.WithArray("tools", mcp.Description(`narrow the tool set: "server:tool" patterns, where * matches any run of characters ("kv:*", "fs:read_*")`), mcp.WithStringItems()),
		mcp.WithNumber("timeout_ms", mcp.Description("deadline in milliseconds")),
		mcp.WithBoolean("allow_destructive", mcp.Description("let tools annotated destructive run")),
		mcp.WithString("approval", mcp.Enum(execution.ApprovalRefuse, execution.ApprovalSuspend),
			mcp.Description(`what becomes of a call that needs approval when allow_destructive is not set: refused with FORBIDDEN ("refuse", the default), or held until someone decides ("suspend": the execution may suspend; see resume_execution)`)),
		sessionParams(),
		mcp.WithDestructiveHintAnnotation(true), mcp.WithOpenWorldHintAnnotation(true),
		// As a task (params.task) it runs on without the call: see tasks.go.
		mcp.WithTaskSupport(mcp.TaskSupportOptional),
	), s.mcpExecute)
	ms.AddTool(mcp.NewTool("resume_execution",
		mcp.WithDescription("Continue an execution that execute_code suspended, with a decision on each pending call the user decided: "+
			"approved calls run, rejected ones fail in the script with a catchable error whose code is REJECTED (a reason, if given, is in its message), "+
			"and the script goes on from where it stopped. Undecided calls stay pending. The answer is execute_code's: the result, "+
			"or the execution suspended again with new pending calls. Only approve what the user approved."),
		mcp.WithString("execution_id", mcp.Required(), mcp.Description("the suspended execution's id (execution_id of execute_code's answer)")),
		mcp.WithObject("decisions", mcp.Required(), mcp.MinProperties(1),
			mcp.Description(`decisions by pending call id: {"2": "approve", "3": "reject", "4": {"decision": "reject", "reason": "…"}}; `+
				`a call whose remote server asked a question (reason "question") is answered with what the user answered, by the server's keys: `+
				`{"5": {"decision": "answer", "answers": {"confirm": {"action": "accept", "content": {…}}}}} (or rejected)`),
			propertyNames(map[string]any{"pattern": "^[1-9][0-9]*$"}),
			mcp.AdditionalProperties(map[string]any{"oneOf": []any{
				map[string]any{"type": "string", "enum": []string{execution.DecisionApprove, execution.DecisionReject}},
				map[string]any{"type": "object", "required": []string{"decision"}, "additionalProperties": false, "properties": map[string]any{
					"decision": map[string]any{"type": "string", "enum": []string{execution.DecisionApprove, execution.DecisionReject}},
					"reason":   map[string]any{"type": "string", "maxLength": execution.MaxReasonBytes},
				}},
				map[string]any{"type": "object", "required": []string{"decision", "answers"}, "additionalProperties": false, "properties": map[string]any{
					"decision": map[string]any{"type": "string", "const": execution.DecisionAnswer},
					"answers": map[string]any{"type": "object", "minProperties": 1, "additionalProperties": map[string]any{
						"type": "object", "required": []string{"action"}, "properties": map[string]any{
							"action":  map[string]any{"type": "string", "enum": []string{"accept", "decline", "cancel"}},
							"content": map[string]any{"type": "object"},
						}}},
				}},
			}})),
		mcp.WithString("call_detail", mcp.Enum("full", "summary", "none"), mcp.Description("as execute_code's")),
		mcp.WithNumber("max_text_bytes", mcp.Description("as execute_code's")),
		mcp.WithDestructiveHintAnnotation(true), mcp.WithOpenWorldHintAnnotation(true),
	), s.mcpResume)
	ms.AddTool(mcp.NewTool("cancel_execution",
		mcp.WithDescription("Cancel an execution: a suspended one ends now with its pending calls never run, a running one at its next step. "+
			"The answer is the execution's document, status cancelled (or running, with cancel_requested, until it stops)."),
		mcp.WithString("execution_id", mcp.Required(), mcp.Description("the execution's id (execution_id of execute_code's answer)")),
		mcp.WithDestructiveHintAnnotation(false), mcp.WithIdempotentHintAnnotation(true),
	), s.mcpCancel)
	s.addRollbackTool(ms)
	s.addSessionTools(ms)
	ms.AddTool(mcp.NewTool("search_tools",
		mcp.WithDescription("Find tools by what they do (lexical ranking over names and descriptions). Returns how to call each."),
		mcp.WithString("query", mcp.Required()),
		mcp.WithNumber("limit", mcp.Description("at most this many (default 10)")),
		mcp.WithReadOnlyHintAnnotation(true),
	), s.mcpSearch)
	ms.AddTool(mcp.NewTool("list_capabilities",
		mcp.WithDescription("List the saved capabilities (programs callable as mcp.<namespace>.<action>()), and under \"suggested\" programs you ran that worked often enough to keep: each with a proposed name, input schema and code; save one with save_capability."),
		mcp.WithReadOnlyHintAnnotation(true),
	), s.mcpListCapabilities)
	ms.AddTool(mcp.NewTool("save_capability",
		mcp.WithDescription("Save a program that worked as a capability namespace:action, callable later as mcp.<namespace>.<action>(args). "+
			"Who may publish a capability is the deployment's to decide: where this caller may not, the save is kept as a draft "+
			`(status "draft", not an error) until someone who may publishes it, and the answer says who; where the MCP client's user may, `+
			`the user is asked. Code equivalent to a published version (whitespace and comments aside) answers that version (status "existing").`),
		mcp.WithString("name", mcp.Required(), mcp.Description("namespace:action")),
		mcp.WithString("code", mcp.Required()),
		mcp.WithString("description"),
		mcp.WithObject("input_schema", mcp.Description("JSON Schema of the arguments")),
		mcp.WithObject("pins", mcp.Description(`versions of the capabilities the code calls that it runs, {"math:sum": 2}; unpinned names run their published head`),
			mcp.AdditionalProperties(map[string]any{"type": "integer", "minimum": 1})),
		mcp.WithArray("provenance", mcp.Description("the execution ids the code came from (execution_id of execute_code's answers)"), mcp.WithStringItems(), mcp.MaxItems(capability.MaxProvenance)),
		mcp.WithDestructiveHintAnnotation(false), mcp.WithIdempotentHintAnnotation(true),
	), s.mcpSaveCapability)
	// With a Guard, the library's own DNS-rebinding check is redundant and
	// would refuse the allowed hosts (with a text error), so it is off.
	opts := []server.StreamableHTTPOption{server.WithDisableLocalhostProtection(s.opts.Guarded), server.WithStreamableHTTPLogger(s.opts.Logger)}
	if s.opts.Sessions {
		// An older client's answer to a question the server asked comes
		// back as a request of its own, which only a session routes to
		// the request waiting for it (and only a session remembers that
		// the client can be asked). Idle sessions are dropped.
		opts = append(opts, server.WithStateful(true), server.WithSessionIdleTTL(mcpSessionIdleTTL))
	} else {
		opts = append(opts, server.WithStateLess(true))
	}
	return server.NewStreamableHTTPServer(ms, opts...)
}

// mcpSessionIdleTTL is how long an idle MCP session is kept.
const mcpSessionIdleTTL = 15 * time.Minute

// textBudget takes max_text_bytes, a tool's own argument rather than a
// request's, out of args; the default is the server's.
func (s *Server) textBudget(args map[string]any) (int, *mcp.CallToolResult) {
	budget := s.opts.TextBytes
	if v, ok := args["max_text_bytes"]; ok {
		n, ok := v.(float64)
		if !ok || n < 0 {
			return 0, mcp.NewToolResultError("max_text_bytes must be a non-negative number")
		}
		if n > 0 {
			budget = int(n)
		}
		delete(args, "max_text_bytes")
	}
	return budget, nil
}

// toolArguments takes the text budget out of a tool call's arguments and
// returns the rest as JSON for the request decoders, or the answer that
// refuses them.
func (s *Server) toolArguments(r mcp.CallToolRequest) ([]byte, int, *mcp.CallToolResult) {
	args := maps.Clone(r.GetArguments())
	budget, bad := s.textBudget(args)
	if bad != nil {
		return nil, 0, bad
	}
	raw, err := json.Marshal(args)
	if err != nil {
		return nil, 0, mcp.NewToolResultError("arguments are not JSON: " + err.Error())
	}
	return raw, budget, nil
}

func (s *Server) mcpExecute(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	raw, budget, bad := s.toolArguments(r)
	if bad != nil {
		return bad, nil
	}
	req, ferr := execution.Decode(raw, execution.SourceMCP)
	if r.Params.RequestState != "" || len(r.Params.InputResponses) > 0 {
		// The retry of a call that asked the client's user: the sealed
		// state, not the arguments repeated with it, names the execution.
		return s.answered(ctx, r, req.CallDetail, budget), nil
	}
	if ferr == nil && req.Async {
		ferr = fault.New(fault.InvalidRequest, "async is not an argument of execute_code: to have it run on without the call, call it as a task (params.task)")
	}
	if ferr != nil {
		return mcp.NewToolResultError(ferr.Error()), nil
	}
	req.Principal = execution.PrincipalFrom(ctx)
	req.TraceHeader = execution.TraceHeader(ctx, "")
	if s.streams(ctx) {
		req.OnEvent = newMCPProgress(ctx, r).event
	}
	ask := s.canAsk(ctx) && !req.InSession() // a session's execution never suspends
	if ask && req.Approval == "" {
		// Where a person can be asked, a call that needs one waits for
		// them rather than failing.
		req.Approval = execution.ApprovalSuspend
	}
	resp := s.opts.Service.Execute(ctx, req)
	s.flush(ctx)
	if ask && resp.Suspended() {
		return s.ask(ctx, resp, budget), nil
	}
	return s.executionResult(resp, budget), nil
}

// mcpCancel serves cancel_execution: what DELETE /executions/{id} does, for
// the agent that started the execution (cancelling guards nothing against
// it: the owner may always stop its own execution).
func (s *Server) mcpCancel(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	id, err := r.RequireString("execution_id")
	if err != nil || id == "" {
		return mcp.NewToolResultError("execution_id is required: the id execute_code answered"), nil
	}
	doc, ferr := s.opts.Service.Cancel(ctx, execution.CancelRequest{ExecutionID: id, Principal: execution.PrincipalFrom(ctx)})
	if ferr != nil {
		res := mcp.NewToolResultStructured(map[string]any{"ok": false, "error": ferr}, refusedText("cancel", id, ferr))
		res.IsError = true
		return res, nil
	}
	s.flush(ctx)
	// The execution failed (CANCELLED), but the call did what it was asked:
	// isError is for a cancel that was refused.
	res := s.executionResult(doc, s.opts.TextBytes)
	res.IsError = false
	return res, nil
}

func (s *Server) mcpResume(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	raw, budget, bad := s.toolArguments(r)
	if bad != nil {
		return bad, nil
	}
	rr, ferr := execution.DecodeResume(raw, "")
	if ferr != nil {
		return mcp.NewToolResultError(ferr.Error()), nil
	}
	rr.Principal = execution.PrincipalFrom(ctx)
	rr.TraceHeader = execution.TraceHeader(ctx, "")
	if s.streams(ctx) {
		rr.OnEvent = newMCPProgress(ctx, r).event
	}
	resp, ferr := s.opts.Service.Resume(ctx, rr)
	if ferr != nil {
		// Nothing ran: the document is the error alone, as HTTP's.
		return s.refusal(rr.ExecutionID, ferr), nil
	}
	s.flush(ctx)
	return s.executionResult(resp, budget), nil
}

// executionResult is execute_code's and resume_execution's answer: the
// text for the model and the whole document. A suspended execution is not
// an error: it waits for the decisions the text asks for.
func (s *Server) executionResult(resp *execution.Response, budget int) *mcp.CallToolResult {
	res := mcp.NewToolResultStructured(resp, modelText(resp, budget, s.opts.Policy.CallerDecides))
	res.IsError = !resp.OK && !resp.Suspended()
	return res
}

// propertyNames constrains an object's keys (JSON Schema propertyNames).
func propertyNames(schema map[string]any) mcp.PropertyOption {
	return func(m map[string]any) { m["propertyNames"] = schema }
}

// search ranks the tools for search_tools: by the Ranker's evidence where
// there is one, else lexically.
func (s *Server) search(ctx context.Context, tools []catalog.Tool, query string, limit int) []catalog.Hit {
	if s.opts.Ranker != nil {
		return s.opts.Ranker.Search(ctx, tools, query, limit)
	}
	return catalog.Search(tools, query, limit)
}

func (s *Server) mcpSearch(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	limit := int(r.GetFloat("limit", 10))
	if limit <= 0 {
		limit = 10
	}
	hits := s.search(ctx, s.opts.Service.Catalog(ctx), r.GetString("query", ""), limit)
	type hit struct {
		Call        string          `json:"call"`
		Description string          `json:"description,omitempty"`
		InputSchema json.RawMessage `json:"input_schema,omitempty"`
		Score       float64         `json:"score"`
	}
	out := make([]hit, len(hits))
	for i, h := range hits {
		out[i] = hit{Call: tsdecl.CallExpr(h.Tool), Description: h.Tool.Description, InputSchema: h.Tool.InputSchema, Score: h.Score}
	}
	return structured(map[string]any{"tools": out})
}

func (s *Server) mcpListCapabilities(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	out := map[string]any{"capabilities": []any{}, "suggested": []any{}}
	if s.opts.Capabilities != nil {
		list, err := s.opts.Capabilities.List(ctx, execution.PrincipalFrom(ctx))
		if err != nil {
			return mcp.NewToolResultError(fault.As(err).Error()), nil
		}
		out["capabilities"] = list
	}
	if s.opts.Suggestions != nil {
		// Programs this caller ran that worked often enough to keep:
		// proposals, published only through the guarded path.
		list, err := s.opts.Suggestions.List(ctx, execution.PrincipalFrom(ctx))
		if err != nil {
			return mcp.NewToolResultError(fault.As(err).Error()), nil
		}
		out["suggested"] = list
	}
	return structured(out)
}

func structured(v any) (*mcp.CallToolResult, error) {
	text, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return mcp.NewToolResultStructured(v, string(text)), nil
}
