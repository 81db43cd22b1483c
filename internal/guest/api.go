package guest

import (
	"context"
	"encoding/json"
	"time"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/trace"
)

// Tool describes one tool a script may call as mcp.<Server>.<Name>(args).
// The guest builds its `mcp` object from these definitions and nothing else.
type Tool struct {
	Server      string          `json:"server"`
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
}

// FullName is "server:name", the form used in errors, traces and tool filters.
func (t Tool) FullName() string { return t.Server + ":" + t.Name }

// Call is one tool call a script made.
type Call struct {
	// ID numbers the calls of one execution from 1.
	ID     int
	Server string
	Tool   string
	// Args is the JSON the script passed ("{}" when it passed nothing).
	Args json.RawMessage
	// Line and Column are the call's site: where in the script (1-based,
	// columns in characters, as QuickJS counts them: lines end at \n
	// only) the call expression's opening parenthesis is, in the frame of
	// the script's own code that made it; 0 when the call came from no
	// such frame (eval'd code, a promise job) — see glue.c's call_site.
	// The engine reports it; the script cannot choose it but by where it
	// writes the call.
	Line, Column int
	// Question and Answer are set on the retry of a call that parked on
	// a question its tool asked (Asked): the host's record of the
	// question, and what was answered (Decision.Answer). Both are opaque
	// to the engine.
	Question json.RawMessage
	Answer   json.RawMessage
}

// Asked is a host's answer that parks a call after it was sent: the tool
// asked a question someone must answer before it can go on (a remote MCP
// server's input_required). The call waits as a parked call does, and the
// run suspends when every call it waits for waits so; a decision that
// approves it (with an Answer) sends it again, with Question and Answer
// set. Question is the host's own record, kept with the suspension
// (ParkedCall.Question) and never shown to the script.
type Asked struct {
	Question json.RawMessage
}

func (a *Asked) Error() string { return "the tool asked a question before it would answer" }

// ToolHost serves the tool calls of one execution. Calls arrive concurrently
// (a script may have many in flight); CallTool must return when ctx is done.
// The returned JSON is what the script's promise resolves to; an error
// rejects it (use *fault.Error to control the code the script sees).
type ToolHost interface {
	CallTool(ctx context.Context, call Call) (json.RawMessage, error)
}

// ImmediateHost is implemented by hosts that can answer some calls at once,
// without blocking (in-memory tools such as the demo set or catalog
// look-ups). The engine asks it first, on the script's own goroutine, and
// skips the hand-off to a new goroutine when it answers; handled=false
// means "call CallTool as usual". It must never block or do I/O.
type ImmediateHost interface {
	CallImmediate(call Call) (result json.RawMessage, handled bool, err error)
}

// Resolver is implemented by hosts that resolve tool names as the script
// reaches them. A name the run's Tools lack, reached dynamically
// (mcp[name], mcp.x[name]), is asked of it before the script gets
// TOOL_NOT_FOUND: given a server and a tool, Resolve returns the tool to
// append to the run's table (its Server and Name are the ones asked), or
// false; given a server and the empty tool, whether the server may have
// tools to resolve (the script then gets an object for it whose names are
// resolved in turn). It runs on the script's goroutine while the script
// waits, and may do I/O bounded by ctx; names longer than
// MaxResolveName bytes are never asked.
type Resolver interface {
	Resolve(ctx context.Context, server, tool string) (Tool, bool)
}

// Gate is what Request.Park says of a call.
type Gate struct {
	// Park: the call waits for a decision instead of running.
	Park bool
	// Approval, for a call that runs, is the decision made ahead of time
	// that lets it (a person's grant), for its trace record.
	Approval *trace.Approval
}

// ParkAll is a Park hook that parks every call that matches.
func ParkAll(match func(Call) bool) func(Call) Gate {
	return func(c Call) Gate { return Gate{Park: match(c)} }
}

// MaxResolveName bounds the names a run asks its Resolver about.
const MaxResolveName = 1024

// Request is one execution.
type Request struct {
	// ExecutionID identifies the run in traces; generated when empty.
	ExecutionID string
	// Code is the body of an async function: `return x` gives the result.
	Code string
	// Args is the JSON value bound to `args` inside the script (null if empty).
	Args json.RawMessage
	// Tools is the complete tool set of this run.
	Tools []Tool
	// Host serves the calls; nil means every call fails with TOOL_NOT_FOUND.
	// A Host that is also a Resolver resolves names Tools lacks.
	Host ToolHost
	// Limits override the engine's defaults field by field (zero = default).
	Limits Limits
	// Helpers are extra JS globals the host provides, as name → JSON value
	// (e.g. the catalog for tools.search). Optional.
	Globals map[string]json.RawMessage
	// Park, when set, is asked about every tool call before it runs; a
	// call it parks (Gate.Park) waits for a decision instead of running,
	// and when every call the script waits for is parked the run suspends
	// (Result.Suspended). A call it lets run with an Approval carries it
	// in its record. It runs on the execution's goroutine and must not
	// block.
	Park func(Call) Gate
	// OnCall, when set, receives each call's record as soon as the call
	// ends, so traces can be written while the script still runs. It is
	// called from the goroutine that served the call and must not block.
	OnCall func(trace.Call)
	// OnCallStart, when set, receives each call's record as the call
	// starts, before it is served; OnLog receives each console line as it
	// is kept. Both are called on the script's goroutine and must not
	// block. Together with OnCall they let a front end show progress.
	OnCallStart func(trace.Call)
	OnLog       func(trace.LogEntry)
	// ArgsDeclared says the code declares its own `args` at top level
	// (analysis.TopLevel.ArgsDeclared): it runs without the `args`
	// parameter, which would make that declaration a SyntaxError, and its
	// declaration shadows the input, which stays globalThis.args.
	ArgsDeclared bool
	// Session runs the code as an execution of a session: the top-level
	// bindings it hands the guest (internal/js/script's Persist) become
	// globals once it succeeds, and its Result carries the sandbox's
	// State for the session's next execution.
	Session bool
	// From is the State a session's previous execution left, to continue
	// from (nil for the session's first: the post-init snapshot). Only
	// with Session; another guest build's is RESUME_INCOMPATIBLE.
	From *State
	// Checkpoint, when set, is handed a checkpoint of the live run (a
	// Suspension whose InFlight lists the calls not yet answered;
	// checkpoint.go) at its wait points: before any call IsEffect says is
	// an effect is sent, and at least every CheckpointEvery of running
	// otherwise. It runs on the script's goroutine and the run waits for
	// it. When it fails, the effects held for it are not sent: each fails
	// with its error (a *fault.Error as it is, anything else a retryable
	// UNAVAILABLE). Engine.Resume continues a run from one.
	Checkpoint func(ctx context.Context, s *Suspension) error
	// IsEffect says which calls are effects, held until a checkpoint is
	// kept (only with Checkpoint). It runs on the script's goroutine and
	// must not block.
	IsEffect func(Call) bool
	// CheckpointEvery is the longest a run goes without a checkpoint
	// where it waits (default DefaultCheckpointEvery).
	CheckpointEvery time.Duration
}

// State is a sandbox between two executions of a session: its linear
// memory, as what changed from the post-init snapshot, in groups of pages
// (groups.go). It holds the script's data: store it, never show it.
type State struct {
	// GuestHash is the guest build that made it; another cannot run it.
	GuestHash string `json:"guest_hash"`
	// Pages is the size of linear memory, in 64 KiB pages.
	Pages uint32 `json:"pages"`
	// Memory is the compressed difference from the post-init snapshot.
	Memory []byte `json:"memory"`
}

// Left is the work an execution had started and not finished when its
// script returned. In a session none of it crosses into the next
// execution: the calls' and timers' promises never settle.
type Left struct {
	Calls  int `json:"calls,omitempty"`
	Timers int `json:"timers,omitempty"`
}

// None reports that nothing was left.
func (l Left) None() bool { return l.Calls == 0 && l.Timers == 0 }

// MemoryBudget is charged for the linear memory of the runs started under
// a context that carries it (WithMemoryBudget), as that memory grows: a
// server shares one budget among its executions (internal/admission). Grow
// asks for n more bytes; false refuses them, and the guest's memory.grow
// fails as it does at the run's own limit (the script runs out of memory).
// Free gives back what was granted, when the memory is unmapped. Both are
// called on the engine's goroutines and must not block.
type MemoryBudget interface {
	Grow(n int64) bool
	Free(n int64)
}

type memoryBudgetKey struct{}

// WithMemoryBudget returns ctx carrying b: Engine.Run and Engine.Resume
// under it (capability runs included, as they run under their caller's
// context) charge their linear memory's growth past its post-init size to
// b, where MemoryCharged.
func WithMemoryBudget(ctx context.Context, b MemoryBudget) context.Context {
	return context.WithValue(ctx, memoryBudgetKey{}, b)
}

func memoryBudgetFrom(ctx context.Context) MemoryBudget {
	b, _ := ctx.Value(memoryBudgetKey{}).(MemoryBudget)
	return b
}

// Limits bound one execution. Every limit hit is reported as LIMIT_EXCEEDED
// (or TIMEOUT for the deadline) with the limit's name.
type Limits struct {
	Timeout        time.Duration // wall clock for the whole execution
	MemoryBytes    int64         // JS heap (JS_SetMemoryLimit)
	StackBytes     int64         // JS stack (JS_SetMaxStackSize)
	CodeBytes      int           // size of Code
	ToolCalls      int           // calls per execution
	InFlight       int           // calls in flight at once
	LogBytes       int           // console output kept: each line costs its length plus LogEntryOverhead
	LogEntries     int           // console lines kept
	ResultBytes    int           // size of the JSON result
	ToolArgsBytes  int           // size of one call's arguments
	ToolResultSize int           // size of one call's result as given to the script
}

// Result is what one execution produced. Err is nil when the script returned
// normally; otherwise it carries the code, message and (for script errors)
// the JS stack.
type Result struct {
	ExecutionID   string           `json:"execution_id"`
	OK            bool             `json:"ok"`
	Value         json.RawMessage  `json:"result,omitempty"`
	Logs          []trace.LogEntry `json:"logs"`
	LogsTruncated bool             `json:"logs_truncated,omitempty"`
	Err           *fault.Error     `json:"error,omitempty"`
	Calls         []trace.Call     `json:"calls"`
	StartedAt     time.Time        `json:"-"`
	Duration      time.Duration    `json:"-"`
	// CPUTime is how long the run kept its goroutine busy in the sandbox:
	// its duration less the time it waited for tool calls, timers and
	// name look-ups. It is the script's CPU time where the machine has a
	// CPU for each busy goroutine; under load it also counts the time the
	// OS gave the thread to others.
	CPUTime time.Duration `json:"-"`
	// Suspended is set, with OK false and Err nil, when the run stopped
	// waiting for decisions on its parked calls: Engine.Resume continues
	// it.
	Suspended *Suspension `json:"-"`
	// State is the sandbox after an execution of a session that
	// succeeded (Request.Session): what the next continues from. Nil when
	// it failed: the session stays where it was.
	State *State `json:"-"`
	// Left is what the script left running when it returned.
	Left Left `json:"-"`
	// SaveTime is how long taking State took (part of Duration).
	SaveTime time.Duration `json:"-"`
	// checkpoints counts the checkpoints kept (Checkpoints).
	checkpoints int
}
