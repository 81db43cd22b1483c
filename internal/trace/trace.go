// Package trace defines what PML Sandbox records about every execution and
// every tool call, and the Sink interface the records flow into. Records are
// made by the host (never parsed from guest output), so a script cannot forge
// or hide them.
package trace

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/pml-sandbox/pml/internal/fault"
)

// Kind tells what a call reached.
type Kind string

// Call kinds.
const (
	KindMCP        Kind = "mcp"
	KindCapability Kind = "capability"
	KindBuiltin    Kind = "builtin"
)

// Call is one tool call made by a script, as the host saw it.
type Call struct {
	ExecutionID string `json:"execution_id"`
	// CallID numbers the calls of one execution from 1, in the order the
	// script started them.
	CallID int `json:"call_id"`
	// ParentCallID is set on calls of a capability run: the call in the
	// parent execution that started this run.
	ParentCallID int        `json:"parent_call_id,omitempty"`
	Server       string     `json:"server"`
	Tool         string     `json:"tool"`
	Kind         Kind       `json:"kind"`
	StartedAt    time.Time  `json:"started_at"`
	DurationMS   float64    `json:"duration_ms"`
	OK           bool       `json:"ok"`
	ErrorCode    fault.Code `json:"error_code,omitempty"`
	ArgsBytes    int        `json:"args_bytes"`
	ResultBytes  int        `json:"result_bytes"`
	// ArgsHash and ResultHash identify big payloads (HashThreshold bytes
	// or more) without storing them: bodies are never traced.
	ArgsHash   string `json:"args_hash,omitempty"`
	ResultHash string `json:"result_hash,omitempty"`
	// ChildExecutionID links a capability call to the execution it
	// started, and Version names the capability version that ran.
	ChildExecutionID string `json:"child_execution_id,omitempty"`
	Version          int    `json:"version,omitempty"`
	// Status is empty for a call that ran, StatusParked for one waiting
	// for a decision, StatusNotRun for one the script ended without.
	Status string `json:"status,omitempty"`
	// Policies are the ids of the policies that decided the call (the
	// permits that let it run, or the forbids that refused it or asked a
	// person): internal/policy.
	Policies []string `json:"policies,omitempty"`
	// Count, when above 1, is how many calls this one record stands for:
	// calls refused past the tool_calls limit are summarised in a single
	// record (Tool "*", ErrorCode LIMIT_EXCEEDED) instead of one each.
	Count int `json:"count,omitempty"`
	// Approval is who approved a call that needed a person and was let
	// run: by a decision on the call itself, or under a grant that
	// covered it.
	Approval *Approval `json:"approval,omitempty"`
}

// Approval is a person's approval of one call.
type Approval struct {
	// By is who approved it (a principal; empty where auth is off), and
	// Via as what (ViaPage, ViaElicitation, ViaApprover, ViaCaller).
	By  string `json:"by,omitempty"`
	Via string `json:"via,omitempty"`
	// Grant names the grant that covered the call (Event.Grants), empty
	// for a call approved on its own.
	Grant string `json:"grant,omitempty"`
}

// Call statuses.
const (
	StatusParked = "parked"  // waiting for a decision (a durable execution is suspended)
	StatusNotRun = "not_run" // parked (or held for a checkpoint), and the script ended without it
)

// Execution is one run of a script: for a durable execution, all its runs
// across its suspensions, recorded again (under the same id) after each.
type Execution struct {
	ID                string     `json:"execution_id"`
	CodeHash          string     `json:"code_hash"`
	CodeBytes         int        `json:"code_bytes"`
	Status            string     `json:"status"` // StatusOK, StatusError or StatusSuspended
	ErrorCode         fault.Code `json:"error_code,omitempty"`
	StartedAt         time.Time  `json:"started_at"`
	DurationMS        float64    `json:"duration_ms"`
	ParentExecutionID string     `json:"parent_execution_id,omitempty"`
	ParentCallID      int        `json:"parent_call_id,omitempty"`
	Capability        string     `json:"capability,omitempty"`
	// CapabilityVersion and Provenance are, for a capability run, the
	// version it ran and the executions that version came from (as its
	// author said).
	CapabilityVersion int      `json:"capability_version,omitempty"`
	Provenance        []string `json:"provenance,omitempty"`
	// Pins are the capability versions the execution's calls were pinned
	// to (its request's, and those it inherited).
	Pins    map[string]int `json:"pins,omitempty"`
	Depth   int            `json:"depth,omitempty"`
	TraceID string         `json:"trace_id,omitempty"`
	// TraceHeader is the full X-Ray header the execution ran under (root,
	// parent, sampling), for sinks that link to the caller's segment.
	TraceHeader string `json:"-"`
	Source      string `json:"source,omitempty"`
	// Principal is who ran the execution where auth is on (see
	// execution.Request.Principal): only that principal may read it back.
	Principal string `json:"principal,omitempty"`
	Calls     int    `json:"calls"`
	// Limit names the limit a LIMIT_EXCEEDED hit, as its
	// fault.Error.Limit does.
	Limit string `json:"limit,omitempty"`
	// CPUMS is the time the sandbox ran script code (guest.Result.CPUTime),
	// over all the runs of a durable execution.
	CPUMS float64 `json:"cpu_ms,omitempty"`
	// Events are a durable execution's suspensions and resumptions, oldest
	// first.
	Events []Event `json:"events,omitempty"`
	// SessionID is the session the execution ran in, and SessionStep its
	// place among the session's executions (1 for the first): a session's
	// traces read in order.
	SessionID   string `json:"session_id,omitempty"`
	SessionStep int    `json:"session_step,omitempty"`
	// RollbackOf is, for a rollback's own execution, the execution whose
	// effects it compensates.
	RollbackOf string `json:"rollback_of,omitempty"`
	// Pattern is what the learning loop keeps of an execution that
	// succeeded and called tools (nil otherwise). The stores write it
	// beside the record, for the candidates they count; it is not part of
	// the trace a reader gets back.
	Pattern *Pattern `json:"-"`
}

// Pattern is an execution as the learning loop (internal/learn) sees it:
// the shape of its code and what varied, never its arguments, results or
// a literal that looks like a secret.
type Pattern struct {
	// Fingerprint identifies the code with comments, layout and local
	// names ignored and literals lifted out: 16 hex digits.
	Fingerprint string `json:"fp"`
	// Tools are the distinct tools it called (server:tool), in the order
	// of their first call.
	Tools []string `json:"tools,omitempty"`
	// Order, in a stored record that lists the tools beside the pattern
	// (the DynamoDB execution item's sorted tools), stands for Tools:
	// their indexes there, in the order of the first call.
	Order []int `json:"order,omitempty"`
	// Literals are the lifted literals, in the order of the code.
	Literals []Literal `json:"lits,omitempty"`
	// ArgsKeys are the keys of args the code reads (sorted); ArgsWhole
	// that it also uses args as a whole (passes it on, iterates it).
	ArgsKeys  []string `json:"args,omitempty"`
	ArgsWhole bool     `json:"args_whole,omitempty"`
	// Template is the code with the literals cut out, carried by the
	// first execution of a fingerprint a process records (and kept by
	// the candidate), so not every record pays for it.
	Template *Template `json:"tpl,omitempty"`
}

// Literal is one lifted literal of a run.
type Literal struct {
	// Kind is LiteralString or LiteralNumber.
	Kind string `json:"k"`
	// Value is the literal's value (a string's, decoded; a number's
	// source text), absent when withheld.
	Value string `json:"v,omitempty"`
	// Withheld says why the value is not kept: WithheldSecret (it looks
	// like a secret: nothing of it is kept) or WithheldLong (too long to
	// keep: Hash tells runs apart).
	Withheld string `json:"w,omitempty"`
	Hash     string `json:"h,omitempty"`
}

// Literal kinds and reasons a value is withheld.
const (
	LiteralString  = "s"
	LiteralNumber  = "n"
	WithheldSecret = "secret"
	WithheldLong   = "long"
)

// Template is a program's code with its lifted literals cut out.
type Template struct {
	// Code is the JavaScript that ran, each lifted literal removed.
	Code string `json:"code"`
	// Holes are the byte offsets in Code where each literal stood, in
	// order; Names a name for each, from where it stood (the property or
	// variable it is the value of).
	Holes []int    `json:"holes"`
	Names []string `json:"names"`
	// Comments are the code's comments (secret-looking words masked),
	// for a description.
	Comments []string `json:"comments,omitempty"`
}

// Execution statuses.
const (
	StatusOK        = "ok"
	StatusError     = "error"
	StatusSuspended = "suspended" // waiting for decisions on its parked calls
)

// Event is a moment in a durable execution's life between its runs.
type Event struct {
	Type string    `json:"type"` // EventSuspend, EventResume or EventCancel
	At   time.Time `json:"at"`
	// Pending are the parked calls a suspension waits for (call ids).
	Pending []int `json:"pending,omitempty"`
	// Decisions are what a resumption decided, and Principal who decided
	// (the caller's IAM or JWT principal; empty where auth is off).
	Decisions []Decision `json:"decisions,omitempty"`
	Principal string     `json:"principal,omitempty"`
	// Via is what the decider was allowed to decide as: ViaElicitation,
	// ViaPage, ViaApprover or ViaCaller.
	Via string `json:"via,omitempty"`
	// Grants are the grants a resumption made: decisions that cover more
	// than one call of one call site (each covered call's record names
	// its grant in its Approval).
	Grants []Grant `json:"grants,omitempty"`
	// Policies are the ids of the policies that let the decider decide
	// (internal/policy).
	Policies []string `json:"policies,omitempty"`
}

// Grant is a person's approval of up to Max calls of one call site of one
// tool in one execution, while the Pinned arguments keep their values.
type Grant struct {
	ID   string `json:"id"`
	Tool string `json:"tool"` // server:tool
	// Site is the call site ("line:column" in the code that runs), Line
	// its line in the script as written.
	Site   string   `json:"site"`
	Line   int      `json:"line,omitempty"`
	Max    int      `json:"max"`
	Pinned []string `json:"pinned,omitempty"`
}

// Event types.
const (
	EventSuspend = "suspend"
	EventResume  = "resume"
	EventCancel  = "cancel" // cancelled while suspended (Principal: who)
)

// Who decided a resumption, as Event.Via.
const (
	ViaElicitation = "elicitation" // the MCP client's user, asked by the server (form mode)
	ViaPage        = "page"        // a person signed in on the approval page
	ViaApprover    = "approver"    // a principal the deployment names an approver
	ViaCaller      = "caller"      // the principal that ran the script
)

// Decision is what was decided about one parked call.
type Decision struct {
	CallID   int    `json:"call_id"`
	Decision string `json:"decision"` // "approve" or "reject"
	Reason   string `json:"reason,omitempty"`
}

// HashThreshold is the payload size from which calls record a hash of their
// arguments and results, so equal big payloads can be recognised across
// traces while small ones cost nothing extra.
const HashThreshold = 1024

// Hash returns the first 16 hex digits of the payload's SHA-256 when it is
// at least HashThreshold bytes, else "".
func Hash(payload []byte) string {
	if len(payload) < HashThreshold {
		return ""
	}
	sum := sha256.Sum256(payload)
	return hex.EncodeToString(sum[:8])
}

// CallRecorder is implemented by sinks that can take call records one by
// one while an execution runs (and then skip them in Record), so most of
// a trace is written before the execution ends.
type CallRecorder interface {
	RecordCall(ctx context.Context, c Call)
}

// Spans is implemented by sinks that trace live (internal/otelsink): the
// service opens an execution's span as the execution starts and a call's
// as the call leaves for its tool source, so the context the call runs
// under carries that span into whatever it reaches (an MCP server's
// traceparent, a capability run). The spans end when Record and
// RecordCall receive the records, which give them their attributes; a
// record whose span was never opened gets one from its own times.
type Spans interface {
	// StartExecution opens ex's span (ex holds what is known as it
	// starts: ID, StartedAt, Source, the parent and trace header) under
	// the span context ctx carries, and returns ctx carrying the new one.
	StartExecution(ctx context.Context, ex Execution) context.Context
	// StartCall opens the span of c (ExecutionID, CallID, Server, Tool,
	// Kind) under its execution's, and returns ctx carrying it.
	StartCall(ctx context.Context, c Call) context.Context
}

// Sink receives records. Implementations must be safe for concurrent use and
// must not block the caller on I/O: buffer, and write on Flush.
type Sink interface {
	// Record takes one finished execution and its calls.
	Record(ctx context.Context, exec Execution, calls []Call)
	// Flush writes what is buffered, within ctx's deadline.
	Flush(ctx context.Context) error
}
