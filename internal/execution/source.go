package execution

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/trace"
)

// Executor runs executions: the service implements it, front ends and the
// capability runner use it.
type Executor interface {
	// Execute runs one request. It always answers; failures are in
	// Response.Error.
	Execute(ctx context.Context, req Request) *Response
	// Resume continues a suspended execution; the error is a refusal
	// (nothing ran).
	Resume(ctx context.Context, rr ResumeRequest) (*Response, *fault.Error)
	// Waiting is what a suspended execution waits for — its suspended
	// document: pending calls with their arguments, expiry, owner — for
	// someone deciding it; NOT_FOUND, EXPIRED, or CONFLICT once it is not
	// waiting any more.
	Waiting(ctx context.Context, id string) (*Response, *fault.Error)
	// Status is the document of an execution the executor keeps runs of
	// (an asynchronous one), as it stands now: StatusRunning, the
	// suspended document with its pending calls, or the final document;
	// NOT_FOUND for any other id, or one principal may not read (traces
	// keep synchronous executions).
	Status(ctx context.Context, id, principal string) (*Response, *fault.Error)
	// Cancel ends an execution early for cr.Principal (its owner, or an
	// approver): a suspended one at once (its pending calls never run),
	// an asynchronous one that has not started at once, a running one at
	// its next step (the answer is then StatusRunning with
	// CancelRequested; it ends CANCELLED). The answer is the execution's
	// document; the error a refusal: NOT_FOUND, CONFLICT (it ended
	// already), FORBIDDEN, UNAVAILABLE.
	Cancel(ctx context.Context, cr CancelRequest) (*Response, *fault.Error)
	// Rollback runs the compensations of an execution's applied effects,
	// newest first, as an execution of its own, for rr.Principal (its
	// owner, or whoever the policy lets decide for the owner), and says
	// what became of each effect. The error is a refusal, nothing ran:
	// NOT_FOUND (unknown, or another principal's: told alike), CONFLICT
	// (it runs or waits for decisions, a rollback of it is under way, or
	// it was rolled back already), UNAVAILABLE.
	Rollback(ctx context.Context, rr RollbackRequest) (*Rollback, *fault.Error)
	// Session is a session as its owner may read it (never its state);
	// EndSession deletes it and its state. NOT_FOUND for an unknown id
	// and for another principal's alike; EXPIRED past its idle time.
	Session(ctx context.Context, r SessionRequest) (*SessionInfo, *fault.Error)
	EndSession(ctx context.Context, r SessionRequest) *fault.Error
	// Catalog is every tool the executor offers.
	Catalog(ctx context.Context) []catalog.Tool
	// Flush writes buffered trace records (before a Lambda answers).
	Flush(ctx context.Context) error
}

// ToolSource provides tools: MCP servers, capabilities, the demo tools.
// Implementations must be safe for concurrent use.
type ToolSource interface {
	// Tools lists what the source offers now. The slice is read only,
	// for the source and its callers alike: a source may answer the same
	// slice until its list changes (the service then reuses what it
	// built from it), never one it modifies afterwards.
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
	// can be reached now; fixed for the source's life (a service reads it
	// once).
	Servers() []string
	// CheckServer returns nil when server can serve calls now, else the
	// error a call to it would get (a retryable UNAVAILABLE).
	CheckServer(server string) error
}

// CallOptions travel with each tool call to its source.
type CallOptions struct {
	// Lineage describes the call: who made it, and what a run it starts
	// inherits (AllowDestructive is whether this call may do what needs
	// approval).
	Lineage
	// ParseJSONText asks for a text result to be parsed as JSON.
	ParseJSONText bool
	// Sandboxes is the calling execution's share of the request tree's
	// sandbox budget, which a capability call spends from.
	Sandboxes *Budget
	// OnChild, when the call starts another execution (a capability run),
	// receives that execution's id, the capability version it ran and its
	// calls, so traces link parent and child, the call names the version,
	// and the caller's response shows the whole tree.
	OnChild func(executionID string, version int, calls []trace.Call)
	// Retry, when set, sends the call again with the answers to the
	// question its remote server asked (a source's *Question error).
	Retry *Retry
	// IdempotencyKey is set on a call that is an effect (its tool is not
	// read-only): the key its source sends upstream so that a server
	// which deduplicates recognises the call sent again (an MCP server
	// over HTTP and an OpenAPI service get it as the Idempotency-Key
	// header, an MCP server also in _meta as io.pml/idempotency-key, a
	// Lambda function in its client context). The host derives it from
	// the execution and the call's position (internal/journal.Key); it
	// is never the script's, and it wins over any header the arguments
	// would set.
	IdempotencyKey string
	// NotSent, when set, is called by a source that refuses the call
	// before anything of it left the host (its own checks, a server known
	// to be down): the effect certainly did not happen. A source that
	// does not call it leaves a failed call's outcome for its error to
	// say, which the journal of effects reads conservatively (a TOOL_ERROR
	// failed, anything else unknown).
	NotSent func()
}

// Refused tells the call's caller that nothing of it was sent (NotSent),
// when it asked to know.
func (o CallOptions) Refused() {
	if o.NotSent != nil {
		o.NotSent()
	}
}

// Retry is what goes with a call sent again after its remote MCP server
// asked a question (2026-07-28 input_required): the answers, and the
// server's own state, echoed verbatim.
type Retry struct {
	// InputResponses are the answers by the server's keys (elicitation
	// results).
	InputResponses map[string]json.RawMessage
	// RequestState is the server's requestState, as it sent it.
	RequestState string
}

// Question is a source's answer to a call whose remote MCP server asked
// something before it would answer (2026-07-28 input_required): the call
// can go on only when someone answers, with a Retry.
type Question struct {
	Server, Tool string
	// Requests are the server's elicitation requests' params, by its keys.
	Requests map[string]json.RawMessage
	// RequestState is the server's state, to echo on the retry; it is
	// never shown to the script or the caller.
	RequestState string
}

func (q *Question) Error() string {
	return fmt.Sprintf("%s:%s asked a question before it would answer", q.Server, q.Tool)
}

// Prechecker is a ToolSource that can tell, without sending anything,
// that a call would be refused (toolsource.Set: the tool missing, its
// configuration not letting it run at all, its arguments not matching its
// input schema). The service asks it before a call waits for a person, so
// that no one is asked about a call that can never run: opt is the
// call's options as if the person had approved it. nil means nothing
// refuses it now (a source that cannot tell yet, a server not loaded,
// answers nil); an error is the refusal the call would get, and the call
// fails with it at once.
type Prechecker interface {
	Precheck(ctx context.Context, t catalog.Tool, args json.RawMessage, opt CallOptions) error
}

// PinChecker is a ResolvingSource whose tools have versions a request
// may pin (capabilities): the service asks it whether a request's pins
// all exist before the sandbox starts.
type PinChecker interface {
	CheckPins(ctx context.Context, pins map[string]int) error
}

// ResolvingSource is a ToolSource too large to list for every execution
// (the capability registry): the service asks it only for the names an
// execution's code references, statically before the run and dynamically
// (mcp[name]) when the script reaches them, and lists it (Tools) only for
// discovery, which the source serves from an index of its own.
type ResolvingSource interface {
	ToolSource
	// Resolve returns the tools among names ("server:tool") that exist
	// now, reading those names and nothing else; names it does not have
	// are left out.
	Resolve(ctx context.Context, names []string) ([]catalog.Tool, error)
	// HasServer reports whether the source has tools under server now.
	HasServer(ctx context.Context, server string) (bool, error)
}

// Flusher is a ToolSource with writes it batches (the capability source's
// call counts): the service's Flush, which a Lambda calls before it
// answers, flushes it too.
type Flusher interface {
	Flush(ctx context.Context) error
}
