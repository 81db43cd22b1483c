// Package bridge is the execution service: it takes an execution request
// from any front end (CLI, Lambda events, the MCP endpoint), resolves the
// tool set, checks the code statically, runs it in a fresh sandbox and
// serves its tool calls — validated, routed to MCP servers or capabilities,
// and traced.
package bridge

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pml-sandbox/pml/internal/analysis"
	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/script"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/trace"
)

// Request is one execution, as callers send it.
type Request struct {
	// Code is the body of an async function, JavaScript or TypeScript.
	Code string `json:"code"`
	// Lang is "ts" to strip TypeScript's types first, "js" for JavaScript
	// only; empty reads JavaScript, then TypeScript (see internal/script).
	Lang string `json:"lang,omitempty"`
	// Args is bound to `args` in the script.
	Args json.RawMessage `json:"args,omitempty"`
	// Tools narrows the visible tool set: "server:tool" patterns whose
	// sides are globs ("kv:*", "fs:read_*"; see catalog.MatchGlob).
	// Empty means every tool the service has. It can never widen the set.
	Tools []string `json:"tools,omitempty"`
	// TimeoutMS bounds the execution (capped by the service's limit).
	TimeoutMS int `json:"timeout_ms,omitempty"`
	// AllowDestructive lets tools annotated destructiveHint run.
	AllowDestructive bool `json:"allow_destructive,omitempty"`
	// ParseJSONText asks for text tool results to be parsed as JSON even
	// when the tool declares no output schema.
	ParseJSONText bool `json:"parse_json_text,omitempty"`
	// CallDetail is how much of the calls the response carries:
	// CallDetailFull (the default), CallDetailSummary or CallDetailNone.
	CallDetail string `json:"call_detail,omitempty"`
	// Approval is what becomes of a call that needs approval (a tool
	// annotated destructive, or one its server lists in require_approval)
	// when AllowDestructive is not set: ApprovalRefuse (the default) fails
	// it FORBIDDEN; ApprovalSuspend parks it, and once every call the
	// script awaits is parked the execution suspends until someone decides
	// (see Service.Resume).
	Approval string `json:"approval,omitempty"`

	// Set by the host, never by the caller's JSON.
	ExecutionID string `json:"-"`
	// Principal is the caller's identity where auth is on (an IAM ARN, a
	// JWT subject), "" where it is off: only the same principal may
	// resume the execution if it suspends.
	Principal string `json:"-"`
	// OnEvent, when set, receives the execution's progress as it happens:
	// each console line, each call's start and end. It may be called from
	// several goroutines at once and must not block.
	OnEvent     func(Event) `json:"-"`
	Source      string      `json:"-"` // "cli", "http", "mcp", "sqs", "eventbridge", "invoke", "capability"
	Parent      *Parent     `json:"-"`
	TraceHeader string      `json:"-"` // X-Ray trace header, propagated to capability runs
}

// Parent links a capability run to the call that started it.
type Parent struct {
	ExecutionID string   `json:"execution_id"`
	CallID      int      `json:"call_id"`
	Capability  string   `json:"capability"`
	Depth       int      `json:"depth"`
	Chain       []string `json:"chain"` // capabilities from the root run down to this one
	// Narrowing holds the tools filter of every run above this one that
	// narrowed; this run may use only tools each of them allows.
	Narrowing [][]string `json:"narrowing,omitempty"`
	// Sandboxes is this run's share of the request tree's sandbox budget:
	// how many capability runs it and its descendants may start.
	Sandboxes int `json:"sandboxes"`
}

// Response is what every front end returns.
type Response struct {
	OK            bool             `json:"ok"`
	Result        json.RawMessage  `json:"result"`
	Logs          []guest.LogEntry `json:"logs"`
	LogsTruncated bool             `json:"logs_truncated,omitempty"`
	Error         *fault.Error     `json:"error,omitempty"`
	// Calls is every call record (an empty list when there were none),
	// left out when the request asked for less (Request.CallDetail).
	Calls []trace.Call `json:"calls,omitzero"`
	// CallSummary stands for Calls when the request asked for a summary.
	CallSummary *CallSummary `json:"call_summary,omitempty"`
	DurationMS  float64      `json:"duration_ms"`
	ExecutionID string       `json:"execution_id"`
	// Sandboxes counts the capability runs the execution's calls started,
	// descendants' included (a capability run reports it to its caller,
	// which takes back what it reserved for the run and the run did not use).
	Sandboxes int `json:"sandboxes,omitempty"`
	// Status is StatusSuspended when the execution waits for decisions on
	// the Pending calls (OK is false, Error nil), until ExpiresAt; empty
	// when it ended.
	Status    string    `json:"status,omitempty"`
	Pending   []Pending `json:"pending,omitempty"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

// CallOptions travel with each tool call to its source.
type CallOptions struct {
	AllowDestructive bool
	// Approval is the calling request's (Request.Approval): a capability
	// run inherits it, to refuse what it cannot park with the reason.
	Approval      string
	ParseJSONText bool
	// The calling execution, for capability runs and trace links.
	ExecutionID string
	CallID      int
	Parent      *Parent
	TraceHeader string
	// Narrowing is what a capability run started by this call inherits:
	// the calling run's inherited filters plus its own.
	Narrowing [][]string
	// Sandboxes is the calling execution's share of the request tree's
	// sandbox budget, which a capability call spends from.
	Sandboxes *Budget
	// OnChild, when the call starts another execution (a capability run),
	// receives that execution's id and calls so traces link parent and
	// child and the caller's response shows the whole tree.
	OnChild func(executionID string, calls []trace.Call)
}

// ToolSource provides tools: MCP servers, capabilities, the demo tools.
// Implementations must be safe for concurrent use.
type ToolSource interface {
	// Tools lists what the source offers now.
	Tools(ctx context.Context) ([]catalog.Tool, error)
	// Call runs one tool. args has already been checked to be JSON.
	Call(ctx context.Context, t catalog.Tool, args json.RawMessage, opt CallOptions) (json.RawMessage, error)
}

// ServerSource is a ToolSource that owns whole server names: the MCP client
// pool. Every mcp.<server>.* of a server it names is its own, reachable or
// not, so no other source may serve that name (a capability saved as
// "kv:kv_get" must never take over a call meant for server kv), and a name
// it does not list while the server is down is unavailable, not missing.
type ServerSource interface {
	ToolSource
	// Servers lists the server names the source owns, whether or not they
	// can be reached now.
	Servers() []string
	// CheckServer returns nil when server can serve calls now, else the
	// error a call to it would get (a retryable UNAVAILABLE).
	CheckServer(server string) error
}

// Options configure a Service.
type Options struct {
	// Sources, in priority order: when two offer the same server:tool, the
	// first wins (MCP servers before capabilities, as ADR-052 resolves).
	Sources []ToolSource
	// Sink receives a record of every execution (may be nil).
	Sink trace.Sink
	// Logger for service diagnostics (default slog.Default()).
	Logger *slog.Logger
	// MaxTimeout caps Request.TimeoutMS (default 60 s).
	MaxTimeout time.Duration
	// Limits apply to every execution (zero fields: engine defaults).
	Limits guest.Limits
	// Sandboxes bounds the capability runs one request tree may start
	// (default DefaultSandboxes); a capability run gets at most what its
	// caller handed down.
	Sandboxes int
	// Drops logs the tools the catalog leaves out. Services built alike
	// (a capability run gets a fresh one) should share one, so that each
	// drop is logged once per process rather than once per execution
	// (default: one per Service, writing to Logger).
	Drops *catalog.DropLog
	// Suspensions keeps suspended executions; without it a request for
	// approval "suspend" is refused.
	Suspensions suspend.Store
}

// Service runs executions. It is safe for concurrent use.
type Service struct {
	engine  *guest.Engine
	sources []ToolSource
	sink    trace.Sink
	log     *slog.Logger
	maxTime time.Duration
	limits  guest.Limits
	sandbox int
	drops   *catalog.DropLog
	store   suspend.Store
}

// New returns a Service running code on engine.
func New(engine *guest.Engine, opts Options) *Service {
	s := &Service{engine: engine, sources: opts.Sources, sink: opts.Sink, log: opts.Logger, maxTime: opts.MaxTimeout, limits: opts.Limits, sandbox: opts.Sandboxes, drops: opts.Drops, store: opts.Suspensions}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.drops == nil {
		s.drops = catalog.NewDropLog(s.log)
	}
	if s.maxTime <= 0 {
		s.maxTime = 60 * time.Second
	}
	if s.sandbox <= 0 {
		s.sandbox = DefaultSandboxes
	}
	return s
}

// entry is one tool of an execution with the source that serves it.
type entry struct {
	tool   catalog.Tool
	source ToolSource
}

// Catalog returns every tool the service offers, deduplicated by priority.
// A source that fails is logged and skipped: one dead server never hides
// the others.
func (s *Service) Catalog(ctx context.Context) []catalog.Tool {
	entries := s.catalog(ctx)
	out := make([]catalog.Tool, len(entries))
	for i, e := range entries {
		out[i] = e.tool
	}
	return out
}

func (s *Service) catalog(ctx context.Context) []entry {
	var out []entry
	seen := map[string]bool{}
	owners := s.serverOwners()
	for i, src := range s.sources {
		tools, err := src.Tools(ctx)
		if err != nil {
			s.log.WarnContext(ctx, "tool source unavailable", "err", err)
		}
		for _, t := range tools {
			// Checked on every build, not only when a capability is
			// saved: one saved before the server was configured, or
			// through a store the save check does not guard, must not
			// take the server's calls either.
			if o, ok := owners[t.Server]; ok && o.index != i {
				s.drops.Drop(ctx, t.Server, t.Name, "its server name belongs to a configured MCP server", "kind", string(t.Kind))
				continue
			}
			if seen[t.FullName()] {
				s.drops.Drop(ctx, t.Server, t.Name, "an earlier source offers the same name", "kind", string(t.Kind))
				continue
			}
			if err := errors.Join(catalog.ValidName(t.Server), catalog.ValidName(t.Name)); err != nil {
				s.drops.Drop(ctx, t.Server, t.Name, err.Error(), "kind", string(t.Kind))
				continue
			}
			seen[t.FullName()] = true
			out = append(out, entry{tool: t, source: src})
		}
	}
	slices.SortFunc(out, func(a, b entry) int { return strings.Compare(a.tool.FullName(), b.tool.FullName()) })
	return out
}

// owner is the ServerSource that owns a server name, and its position in
// Service.sources.
type owner struct {
	index  int
	source ServerSource
}

// serverOwners maps each server name a ServerSource owns to it; the first
// source to claim a name keeps it.
func (s *Service) serverOwners() map[string]owner {
	out := map[string]owner{}
	for i, src := range s.sources {
		ss, ok := src.(ServerSource)
		if !ok {
			continue
		}
		for _, name := range ss.Servers() {
			if _, taken := out[name]; !taken {
				out[name] = owner{index: i, source: ss}
			}
		}
	}
	return out
}

// downServer returns the retryable UNAVAILABLE error of a reference to a
// configured server that cannot serve now, nil otherwise: while a server
// is down (or was never reached), a name it does not list may still be
// one of its tools.
func downServer(owners map[string]owner, r analysis.Ref, filter catalog.Filter) *fault.Error {
	o, ok := owners[r.Server]
	if !ok || !filter.Allows(r.Server, r.Tool) {
		// Not a server's, or narrowed away by the request: missing.
		return nil
	}
	err := o.source.CheckServer(r.Server)
	if err == nil {
		return nil
	}
	fe := *fault.As(err)
	fe.Tool = r.FullName()
	fe.Message = "mcp." + r.Server + "." + r.Tool + " (line " + strconv.Itoa(r.Line) + "): " + fe.Message
	return &fe
}

// Execute runs one request. It always returns a Response; failures are in
// Response.Error. An execution that suspends (Request.Approval) is saved
// and answered with Status StatusSuspended and its pending calls.
func (s *Service) Execute(ctx context.Context, req Request) *Response {
	start := time.Now()
	if req.ExecutionID == "" {
		req.ExecutionID = guest.NewExecutionID()
	}
	resp, res := s.execute(ctx, req, start)
	ex := s.execRecord(req, resp, start)
	if res != nil && res.Suspended != nil {
		s.suspended(ctx, req, resp, res.Suspended, &ex, start)
	}
	s.record(ctx, ex, resp)
	applyCallDetail(resp, req.CallDetail)
	return resp
}

// toolSet is what an execution may call: the catalog narrowed by the
// request and everything above it.
type toolSet struct {
	all       []catalog.Tool
	visible   []catalog.Tool
	forbidden map[string]bool
	entries   map[string]entry
}

// toolSet narrows the catalog to what a request with these filters may
// call.
func (s *Service) toolSet(ctx context.Context, patterns []string, parent *Parent) (*toolSet, *fault.Error) {
	all := s.catalog(ctx)
	tools := make([]catalog.Tool, len(all))
	for i, e := range all {
		tools[i] = e.tool
	}
	visible, err := catalog.Narrow(tools, patterns)
	if err != nil {
		return nil, fault.As(err)
	}
	inherited, err := inheritedFilters(parent)
	if err != nil {
		return nil, fault.As(err)
	}
	visible, forbidden := applyInherited(visible, tools, inherited)
	byName := make(map[string]entry, len(visible))
	for _, e := range all {
		byName[e.tool.FullName()] = e
	}
	entries := make(map[string]entry, len(visible))
	for _, t := range visible {
		entries[t.FullName()] = byName[t.FullName()]
	}
	return &toolSet{all: tools, visible: visible, forbidden: forbidden, entries: entries}, nil
}

func (s *Service) execute(ctx context.Context, req Request, start time.Time) (*Response, *guest.Result) {
	fail := func(err *fault.Error) (*Response, *guest.Result) {
		return &Response{Error: err, Logs: []guest.LogEntry{}, Calls: []trace.Call{}, ExecutionID: req.ExecutionID,
			DurationMS: ms(time.Since(start))}, nil
	}
	if strings.TrimSpace(req.Code) == "" {
		return fail(fault.New(fault.InvalidRequest, "code is empty"))
	}
	if req.TimeoutMS < 0 {
		return fail(fault.New(fault.InvalidRequest, "timeout_ms must not be negative"))
	}
	if ferr := CheckCallDetail(req.CallDetail); ferr != nil {
		return fail(ferr)
	}
	if ferr := CheckApproval(req.Approval); ferr != nil {
		return fail(ferr)
	}
	// A capability run never parks (its calls are refused instead), so
	// only a root execution needs somewhere to suspend to.
	if req.Approval == ApprovalSuspend && req.Parent == nil && s.store == nil {
		return fail(fault.New(fault.InvalidRequest, `approval "suspend" is not available here: this service keeps no suspended executions`))
	}

	ts, ferr := s.toolSet(ctx, req.Tools, req.Parent)
	if ferr != nil {
		return fail(ferr)
	}

	// Every mcp.x.y the code names must resolve before a sandbox starts
	// (when the parser reads the code: else each is checked as it is called).
	prep, perr := script.Prepare(req.Code, req.Lang)
	if perr != nil {
		return fail(fault.As(perr))
	}
	refs := prep.Refs
	if ferr := forbiddenRef(refs, ts.forbidden, req.Parent); ferr != nil {
		return fail(ferr)
	}
	if ferr := s.unresolved(refs, ts.entries, req.Tools); ferr != nil {
		return fail(ferr)
	}

	gtools := make([]guest.Tool, 0, len(ts.visible)+len(ts.forbidden))
	for _, t := range ts.visible {
		gtools = append(gtools, guest.Tool{Server: t.Server, Name: t.Name, Description: t.Description, InputSchema: t.InputSchema})
	}
	gtools = append(gtools, forbiddenGuestTools(ts.all, ts.forbidden)...)
	limits := s.limits
	timeout := s.maxTime
	if req.TimeoutMS > 0 {
		timeout = min(timeout, time.Duration(req.TimeoutMS)*time.Millisecond)
	}
	limits.Timeout = timeout
	host := &toolHost{service: s, req: &req, entries: ts.entries, visible: ts.visible, forbidden: ts.forbidden,
		budget: s.budget(req.Parent)}
	greq := guest.Request{
		ExecutionID: req.ExecutionID,
		Code:        prep.Code,
		Args:        req.Args,
		Tools:       gtools,
		Host:        host,
		Limits:      limits,
	}
	s.hook(ctx, &greq, &req, host)
	res := s.engine.Run(ctx, greq)
	prep.MapError(res.Err)
	return s.response(res, &req, host, start), res
}

// hook connects the engine's callbacks to the request's: the park
// decision, and the calls and console lines the trace sink and OnEvent
// receive as they happen.
func (s *Service) hook(ctx context.Context, greq *guest.Request, req *Request, host *toolHost) {
	entries := host.entries
	if req.Approval == ApprovalSuspend && req.Parent == nil && !req.AllowDestructive {
		greq.Park = func(c guest.Call) bool {
			e, ok := entries[c.Server+":"+c.Tool]
			return ok && e.tool.NeedsApproval()
		}
	}
	rec, _ := s.sink.(trace.CallRecorder)
	if rec != nil || req.OnEvent != nil {
		// Calls go to the sink as they end, complete, so that by the time
		// the script returns most of its trace is already written.
		greq.OnCall = func(c trace.Call) {
			c = finishCall(c, entries, req, host)
			if rec != nil {
				rec.RecordCall(ctx, c)
			}
			if req.OnEvent != nil {
				req.OnEvent(Event{Type: EventCallEnd, Call: c})
			}
		}
	}
	if req.OnEvent != nil {
		greq.OnLog = func(e guest.LogEntry) { req.OnEvent(Event{Type: EventLog, Log: e}) }
		greq.OnCallStart = func(c trace.Call) {
			req.OnEvent(Event{Type: EventCallStart, Call: finishCall(c, entries, req, host)})
		}
	}
}

// response is the Response of a run (or a resumed run) that got as far
// as the engine.
func (s *Service) response(res *guest.Result, req *Request, host *toolHost, start time.Time) *Response {
	for i := range res.Calls {
		res.Calls[i] = finishCall(res.Calls[i], host.entries, req, host)
	}
	// Descendants' calls follow the execution's own, each with its
	// execution id and the parent call that started its run.
	res.Calls = append(res.Calls, host.descendantCalls()...)
	resp := &Response{
		OK:            res.OK,
		Result:        res.Value,
		Logs:          res.Logs,
		LogsTruncated: res.LogsTruncated,
		Error:         res.Err,
		Calls:         res.Calls,
		DurationMS:    ms(time.Since(start)),
		ExecutionID:   res.ExecutionID,
		Sandboxes:     host.budget.Used(),
	}
	if resp.Calls == nil {
		resp.Calls = []trace.Call{}
	}
	return resp
}

// finishCall completes a call record with what only the bridge knows: the
// kind of tool, the parent call of a capability run, the child execution a
// capability call started.
func finishCall(c trace.Call, entries map[string]entry, req *Request, host *toolHost) trace.Call {
	if e, ok := entries[c.Server+":"+c.Tool]; ok {
		c.Kind = e.tool.Kind
	}
	if req.Parent != nil {
		c.ParentCallID = req.Parent.CallID
	}
	c.ChildExecutionID = host.childOf(c.CallID)
	return c
}

// unresolved reports the first mcp.x.y the code names that the tool set
// lacks: a retryable UNAVAILABLE when it names a configured server that is
// down, else TOOL_NOT_FOUND with the nearest names.
func (s *Service) unresolved(refs analysis.Refs, entries map[string]entry, patterns []string) *fault.Error {
	// The patterns already narrowed the tool set, so they parse.
	filter, _ := catalog.ParseFilter(patterns)
	owners := s.serverOwners()
	for _, r := range refs.Tools {
		if _, ok := entries[r.FullName()]; ok {
			continue
		}
		if ferr := downServer(owners, r, filter); ferr != nil {
			return ferr
		}
		names := make([]string, 0, len(entries))
		for n := range entries {
			names = append(names, n)
		}
		slices.Sort(names)
		near := catalog.Suggest(r.FullName(), names, 3)
		msg := "mcp." + r.Server + "." + r.Tool + " (line " + strconv.Itoa(r.Line) + ") is neither a tool nor a capability of this execution"
		if len(near) > 0 {
			js := make([]string, len(near))
			for i, n := range near {
				js[i] = "mcp." + strings.Replace(n, ":", ".", 1)
			}
			msg += "; did you mean " + strings.Join(js, ", ") + "?"
		}
		return &fault.Error{Code: fault.ToolNotFound, Message: msg, Tool: r.FullName(), Details: map[string]any{"suggestions": near, "line": r.Line, "column": r.Column}}
	}
	return nil
}

// execRecord is the trace record of an execution's first run.
func (s *Service) execRecord(req Request, resp *Response, start time.Time) trace.Execution {
	sum := sha256.Sum256([]byte(req.Code))
	ex := trace.Execution{
		ID:          resp.ExecutionID,
		CodeHash:    hex.EncodeToString(sum[:]),
		CodeBytes:   len(req.Code),
		StartedAt:   start,
		DurationMS:  resp.DurationMS,
		Source:      req.Source,
		TraceID:     traceIDFromHeader(req.TraceHeader),
		TraceHeader: req.TraceHeader,
	}
	if p := req.Parent; p != nil {
		ex.ParentExecutionID = p.ExecutionID
		ex.ParentCallID = p.CallID
		ex.Capability = p.Capability
		ex.Depth = p.Depth
	}
	return ex
}

// record sends the execution to the sink, with the status and call count
// resp gives it. It never fails the execution.
func (s *Service) record(ctx context.Context, ex trace.Execution, resp *Response) {
	if s.sink == nil {
		return
	}
	// Descendants' calls in the response belong to their own executions,
	// which record themselves.
	own := make([]trace.Call, 0, len(resp.Calls))
	for _, c := range resp.Calls {
		if c.ExecutionID == resp.ExecutionID {
			own = append(own, c)
		}
	}
	ex.Calls = len(own)
	switch {
	case resp.Status == StatusSuspended:
		ex.Status = trace.StatusSuspended
	case resp.OK:
		ex.Status = trace.StatusOK
	default:
		ex.Status = trace.StatusError
		if resp.Error != nil {
			ex.ErrorCode = resp.Error.Code
		}
	}
	s.sink.Record(ctx, ex, own)
}

// Flush writes buffered trace records (call before a Lambda returns).
func (s *Service) Flush(ctx context.Context) error {
	if s.sink == nil {
		return nil
	}
	return s.sink.Flush(ctx)
}

// traceIDFromHeader extracts Root=... from an X-Ray trace header.
func traceIDFromHeader(h string) string {
	for _, part := range strings.Split(h, ";") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(part), "Root="); ok {
			return v
		}
	}
	return ""
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
