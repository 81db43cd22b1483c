package execution

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/fault"
)

// Source is the front end a request came through; traces keep it.
type Source string

// The front ends.
const (
	SourceCLI         Source = "cli"
	SourceHTTP        Source = "http"
	SourceMCP         Source = "mcp"
	SourceInvoke      Source = "invoke"      // a direct Lambda invocation
	SourceSQS         Source = "sqs"         // a queued message
	SourceEventBridge Source = "eventbridge" // an event rule's target
	SourceCapability  Source = "capability"  // a capability run started by a call
)

// Queued reports whether nobody waits for the answer of a request from s:
// a suspended execution's pending calls would never be seen.
func (s Source) Queued() bool { return s == SourceSQS || s == SourceEventBridge }

// The languages of Request.Lang.
const (
	LangAuto = ""   // JavaScript, then TypeScript when it does not parse
	LangJS   = "js" // JavaScript only
	LangTS   = "ts" // TypeScript: types are stripped first
)

// DefaultCodeBytes is how large Request.Code may be when neither the
// engine's options nor the request say otherwise: the engine's default
// (guest.DefaultLimits), here in the contract so that what reads code
// before the engine (internal/js/script) bounds it alike without linking
// the engine.
const DefaultCodeBytes = 256 << 10

// Request.Approval values.
const (
	ApprovalRefuse  = "refuse"  // a call that needs approval fails FORBIDDEN (the default)
	ApprovalSuspend = "suspend" // it is parked, and the execution may suspend
)

// How much of an execution's calls a response carries (Request.CallDetail).
// Traces keep every record whatever the response carries.
const (
	CallDetailFull    = "full"    // every call record (the default)
	CallDetailSummary = "summary" // counts per tool and the failed calls
	CallDetailNone    = "none"    // nothing about calls
)

// Request is one execution, as callers send it. Decode reads one from
// JSON; a front end that builds one itself (the CLI, a capability run)
// calls Validate before handing it over.
type Request struct {
	// Code is the body of an async function, JavaScript or TypeScript.
	Code string `json:"code"`
	// Lang is LangTS to strip TypeScript's types first, LangJS for
	// JavaScript only; LangAuto reads JavaScript, then TypeScript.
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
	// script awaits is parked the execution suspends until someone decides.
	Approval string `json:"approval,omitempty"`
	// Capabilities pins capability versions: {"math:sum": 2} runs version
	// 2 of math:sum wherever this execution, or a capability run below it,
	// calls it; a name not pinned runs its published head. A pin to a
	// version that does not exist fails the execution before it starts.
	Capabilities map[string]int `json:"capabilities,omitempty"`
	// Async asks for the execution to run on without the caller: the
	// answer is at once, status StatusRunning with the execution's id,
	// and the caller polls its document (Executor.Status: GET
	// /executions/{id}) or cancels it (Executor.Cancel). Only where an
	// executor keeps runs (internal/runs); refused from the queued
	// sources, whose every execution already runs without a caller.
	Async bool `json:"async,omitempty"`
	// Session is SessionNew to start a session: the execution's top-level
	// declarations and globals live on into the next execution that names
	// the session (SessionID), and the response names it. See session.go.
	Session string `json:"session,omitempty"`
	// SessionID continues a session: the execution runs in the sandbox
	// the session's last successful execution left.
	SessionID string `json:"session_id,omitempty"`
	// SessionTTLS is how long, in seconds, a new session lives without an
	// execution (default the service's, at most MaxSessionTTL); only with
	// SessionNew.
	SessionTTLS int `json:"session_ttl_s,omitempty"`

	// Set by the host, never by the caller's JSON.

	// ExecutionID names the execution; the service mints one when empty.
	ExecutionID string `json:"-"`
	// Principal is the caller's identity where auth is on (an IAM ARN, a
	// JWT's "jwt:<iss>#<sub>"), "" where it is off: only the same
	// principal may resume the execution if it suspends.
	Principal string `json:"-"`
	// Source is the front end the request came through.
	Source Source `json:"-"`
	// OnEvent, when set, receives the execution's progress as it happens:
	// each console line, each call's start and end. It may be called from
	// several goroutines at once and must not block.
	OnEvent func(Event) `json:"-"`
	// Parent is the call that started a capability run; nil for a
	// request from a front end.
	Parent *Parent `json:"-"`
	// TraceHeader is the X-Ray trace header, propagated to capability runs.
	TraceHeader string `json:"-"`
	// Narrowing is what the host narrows the request to beyond its own
	// filter and its callers' (a session's filter, fixed when the session
	// was created): inherited like theirs by everything the request starts.
	Narrowing Narrowing `json:"-"`
	// RollbackOf is set on a rollback's own execution (Executor.Rollback):
	// the execution whose effects it compensates. Its trace names it, and
	// when it ends its compensations' outcomes are recorded on that
	// execution's journal.
	RollbackOf string `json:"-"`
	// Checkpoints, when set, keeps the execution's checkpoints: the host
	// that runs it under a claim (internal/runs) sets it, and the
	// service checkpoints the run before each effect it sends (see
	// Checkpointer).
	Checkpoints Checkpointer `json:"-"`
	// Durable asks the host that keeps runs (internal/runs) to record the
	// execution as a run while its caller follows it (a streamed
	// execution, whose id went out first): should its process die, it
	// is taken over and continued like an asynchronous one, and its
	// caller finds its document by id.
	Durable bool `json:"-"`
	// Checkpoint, when set, is the execution's last checkpoint, as the
	// service handed it to Checkpoints: the service continues the run
	// from it instead of starting the code (a runner taking over a run
	// whose runner died).
	Checkpoint []byte `json:"-"`

	// filter is Tools parsed, by Validate: the service and everything the
	// request starts use it, never the patterns again.
	filter catalog.Filter
	// validated is set by Validate.
	validated bool
}

// Decode reads an execute request from JSON, strictly (see the package
// comment), as front end src received it — the body of POST /execute,
// execute_code's arguments, a direct invocation, an SQS message, an
// EventBridge event's detail — and validates it. The host-only fields are
// not JSON fields at all, so a caller cannot set them.
func Decode(data []byte, src Source) (Request, *fault.Error) {
	var r Request
	if ferr := decodeStrict(data, &r, "an execute request"); ferr != nil {
		return Request{}, ferr
	}
	r.Source = src
	if ferr := r.Validate(); ferr != nil {
		return Request{}, ferr
	}
	return r, nil
}

// Validate checks a request as every front end must, and parses its tools
// filter once for everything done on its behalf (Filter). Errors are
// INVALID_REQUEST, or TOOL_NOT_FOUND… never: a filter naming no tool is
// the service's to judge, against its catalog.
func (r *Request) Validate() *fault.Error {
	if strings.TrimSpace(r.Code) == "" {
		return fault.New(fault.InvalidRequest, "code is missing or empty")
	}
	if r.TimeoutMS < 0 {
		return fault.New(fault.InvalidRequest, "timeout_ms must not be negative")
	}
	if ferr := CheckLang(r.Lang); ferr != nil {
		return ferr
	}
	if ferr := CheckCallDetail(r.CallDetail); ferr != nil {
		return ferr
	}
	if ferr := CheckApproval(r.Approval); ferr != nil {
		return ferr
	}
	if len(r.Args) > 0 && !json.Valid(r.Args) {
		return fault.New(fault.InvalidRequest, "args is not valid JSON")
	}
	if r.Async && (r.Source.Queued() || r.Parent != nil) {
		return fault.New(fault.InvalidRequest, "async is for callers that poll: a request from %s already runs without anyone waiting", r.Source)
	}
	if ferr := CheckPins(r.Capabilities); ferr != nil {
		return ferr
	}
	if ferr := r.checkSession(); ferr != nil {
		return ferr
	}
	if ferr := r.SetTools(r.Tools); ferr != nil {
		return ferr
	}
	r.validated = true
	return nil
}

// SetTools sets the request's tools filter and parses it (Validate does
// for a request as decoded; a resumed execution's request is rebuilt from
// what was kept of it).
func (r *Request) SetTools(patterns []string) *fault.Error {
	f, err := catalog.ParseFilter(patterns)
	if err != nil {
		return fault.As(err)
	}
	r.Tools, r.filter = patterns, f
	return nil
}

// CheckQueued refuses approval "suspend" from a front end whose answer
// nobody reads (SQS, EventBridge) unless suspensions are announced to
// someone who can decide (notified: the deployment sends a notice of each
// suspension, see SuspensionNotice): otherwise the pending calls would
// never be seen and the execution would wait a day for nothing.
func (r *Request) CheckQueued(notified bool) *fault.Error {
	if r.Approval != ApprovalSuspend || !r.Source.Queued() || notified {
		return nil
	}
	return fault.New(fault.InvalidRequest,
		`approval "suspend" is refused from %s: nobody would see the pending calls (this deployment announces no suspensions to approvers); send the request through the HTTP API, the MCP endpoint or a direct invocation`, r.Source)
}

// Validated reports whether Validate accepted the request (and parsed its
// filter).
func (r *Request) Validated() bool { return r.validated }

// Filter is the request's own tools filter, parsed by Validate.
func (r *Request) Filter() catalog.Filter { return r.filter }

// Inherited is what the runs above this one narrowed to, and what the host
// narrowed the request to (Narrowing): nothing for a request from a front
// end outside a session.
func (r *Request) Inherited() Narrowing {
	if r.Parent == nil {
		return r.Narrowing
	}
	if len(r.Narrowing) == 0 {
		return r.Parent.Narrowing
	}
	return append(slices.Clip(r.Parent.Narrowing), r.Narrowing...)
}

// MaxPins bounds the capability versions one request (or one capability)
// pins.
const MaxPins = 100

// CheckPins checks pinned capability versions: at most MaxPins, each a
// "namespace:action" name and a version from 1. Errors are
// INVALID_REQUEST; whether the versions exist is the registry's to say.
func CheckPins(pins map[string]int) *fault.Error {
	if len(pins) > MaxPins {
		return fault.New(fault.InvalidRequest, "capabilities pins %d versions; at most %d", len(pins), MaxPins)
	}
	for name, v := range pins {
		ns, action, ok := strings.Cut(name, ":")
		if !ok || catalog.ValidName(ns) != nil || catalog.ValidName(action) != nil {
			return fault.New(fault.InvalidRequest, "capabilities: %q is not a capability name (namespace:action)", name)
		}
		if v < 1 {
			return fault.New(fault.InvalidRequest, "capabilities: %s pins version %d; versions start at 1", name, v)
		}
	}
	return nil
}

// Pins are the capability versions this execution's calls run: what the
// runs above it pinned, then its own pins (Capabilities) for names they
// left free. The outermost pin wins: whoever started the request tree
// decides what runs on its behalf.
func (r *Request) Pins() map[string]int {
	var inherited map[string]int
	if r.Parent != nil {
		inherited = r.Parent.Pins
	}
	if len(r.Capabilities) == 0 {
		return inherited
	}
	out := make(map[string]int, len(inherited)+len(r.Capabilities))
	for name, v := range r.Capabilities {
		out[name] = v
	}
	for name, v := range inherited {
		out[name] = v
	}
	return out
}

// CallLineage is the lineage of the request's call callID: what a run the
// call starts inherits. consented is whether the call may do what needs
// approval (the request's allow_destructive, or a person approved it).
func (r *Request) CallLineage(callID int, consented bool) Lineage {
	l := Lineage{ExecutionID: r.ExecutionID, CallID: callID, TraceHeader: r.TraceHeader, Approval: r.Approval,
		AllowDestructive: r.AllowDestructive || consented, Narrowing: r.Inherited(), Pins: r.Pins()}
	if r.Parent != nil {
		l.Chain = r.Parent.Path()
	}
	if !r.filter.IsZero() {
		l.Narrowing = append(l.Narrowing[:len(l.Narrowing):len(l.Narrowing)], r.filter)
	}
	return l
}

// CheckLang returns an INVALID_REQUEST error for an unknown language.
func CheckLang(l string) *fault.Error {
	switch l {
	case LangAuto, LangJS, LangTS:
		return nil
	}
	return fault.New(fault.InvalidRequest, `lang must be "js" or "ts", not %q`, l)
}

// CheckCallDetail returns an INVALID_REQUEST error for an unknown level.
func CheckCallDetail(d string) *fault.Error {
	switch d {
	case "", CallDetailFull, CallDetailSummary, CallDetailNone:
		return nil
	}
	return fault.New(fault.InvalidRequest, `call_detail must be "full", "summary" or "none", not %q`, d)
}

// CheckApproval returns an INVALID_REQUEST error for an unknown mode.
func CheckApproval(a string) *fault.Error {
	switch a {
	case "", ApprovalRefuse, ApprovalSuspend:
		return nil
	}
	return fault.New(fault.InvalidRequest, `approval must be "refuse" or "suspend", not %q`, a)
}
