package execution

import (
	"cmp"
	"encoding/json"
	"slices"
	"time"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/trace"
)

// Statuses of an execution's document (Response.Status). A synchronous
// answer carries one only when the execution suspended; a document read
// back (Executor.Status: GET /executions/{id} of an asynchronous
// execution, MCP's tasks/get) always carries one.
const (
	// StatusRunning: started and not ended (an asynchronous execution, or
	// a resumed one whose run is under way).
	StatusRunning = "running"
	// StatusSuspended: waiting for decisions on its Pending calls.
	StatusSuspended = "suspended"
	// StatusCompleted: it ran to its end; OK and Error say how.
	StatusCompleted = "completed"
	// StatusCancelled: someone cancelled it (Error is CANCELLED).
	StatusCancelled = "cancelled"
	// StatusFailed: the host lost it before it ended — its runner stopped
	// (a crash, a recycled container) — so there is no result; Error says
	// why.
	StatusFailed = "failed"
)

// SuspensionTTL is how long a suspended execution waits for decisions
// unless the deployment says otherwise (PML_SUSPENSION_TTL).
const SuspensionTTL = 24 * time.Hour

// The reasons a call is pending (Pending.Reason).
const (
	// PendingApproval: the call needs approval before it runs.
	PendingApproval = "approval"
	// PendingQuestion: the call was sent, and its remote MCP server asked
	// a question (Pending.Questions) before it would answer; it is sent
	// again with the answers.
	PendingQuestion = "question"
)

// Response is what every front end returns: an execution's document.
type Response struct {
	OK            bool             `json:"ok"`
	Result        json.RawMessage  `json:"result"`
	Logs          []trace.LogEntry `json:"logs"`
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
	// the Pending calls (OK is false, Error nil), until ExpiresAt;
	// StatusRunning in the answer to an asynchronous request; empty in a
	// synchronous answer of an execution that ended. A document read back
	// always has one (see the Status constants).
	Status    string    `json:"status,omitempty"`
	Pending   []Pending `json:"pending,omitempty"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// Approvers says, for a suspended execution, who may decide its
	// pending calls under the deployment's policy.
	Approvers string `json:"approvers,omitempty"`
	// ApprovalURL is, for a suspended execution, its page on the
	// approval page, where a person signs in and decides (set by the
	// front end that serves the page).
	ApprovalURL string `json:"approval_url,omitempty"`
	// CancelRequested is set on a running execution someone cancelled: it
	// ends CANCELLED at its next step.
	CancelRequested bool `json:"cancel_requested,omitempty"`
	// CreatedAt and UpdatedAt are when an asynchronous execution was
	// accepted and when its document last changed (documents read back).
	CreatedAt time.Time `json:"created_at,omitzero"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`

	// Session is the session the execution ran in, when it ran in one.
	Session *ResponseSession `json:"session,omitempty"`
	// Plan is, for a suspended execution, its script's plan: the call
	// sites of tools that need a person, and the grants in force.
	Plan *Plan `json:"plan,omitempty"`

	// Effects are the execution's effects — its calls of tools that are
	// not read-only — in call order, as its journal records them
	// (internal/journal, docs/EFFECTS.md); reads are never listed. Left
	// out when it made none.
	Effects []Effect `json:"effects,omitempty"`
	// Rollback is the execution's rollback state (RollbackState of its
	// effects: rolled_back, partially_rolled_back…), left out when no
	// rollback has touched it.
	Rollback string `json:"rollback,omitempty"`
	// RollbackOf is, for a rollback's own execution, the execution it
	// rolls back.
	RollbackOf string `json:"rollback_of,omitempty"`

	// StateVersion is the version of a suspended execution's stored state
	// (set by the host, never sent): a question put to a person names it,
	// so that its answer can resume that version and no other.
	StateVersion int `json:"-"`
	// Owner is the principal a suspended execution belongs to (set by the
	// host, never sent).
	Owner string `json:"-"`
	// Code is a suspended execution's script as its caller wrote it, for
	// whoever decides its pending calls (Executor.Waiting; never sent).
	Code string `json:"-"`
	// Refused is set (by the host, never sent) when nothing ran because
	// the request named something it may not use now — a session another
	// execution holds, one that expired or is not the caller's — which
	// fronts answer as a refused resume (409, 410, 404), not as a failed
	// script.
	Refused bool `json:"-"`
}

// The statuses of an effect (Effect.Status).
const (
	// EffectApplied: its server answered, and not with an error.
	EffectApplied = "applied"
	// EffectFailed: its server answered with an error (a tool error), or
	// the call was rejected after its server asked a question: the server
	// says it did not happen.
	EffectFailed = "failed"
	// EffectNotSent: it never left the host (refused by a check, or its
	// intent could not be journalled).
	EffectNotSent = "not_sent"
	// EffectUnknown: it left the host and no answer was recorded (a
	// timeout, a lost connection, a crash): it may or may not have
	// happened.
	EffectUnknown = "unknown"
	// EffectPending: sent or about to be, its outcome not recorded yet;
	// only in the document of an execution that has not ended (a running
	// or suspended one). Once it has ended, pending reads unknown.
	EffectPending = "pending"
)

// Effect is one effect of an execution, as its document lists it.
type Effect struct {
	CallID int    `json:"call_id"`
	Server string `json:"server"`
	Tool   string `json:"tool"`
	// Key is the idempotency key the call carried upstream.
	Key    string `json:"key"`
	Status string `json:"status"`
	// Error is why it failed, was not sent, or is unknown.
	Error *fault.Error `json:"error,omitempty"`
	// Compensation is what a rollback did about it, when one did.
	Compensation *EffectCompensation `json:"compensation,omitempty"`
}

// SuspensionNotice announces that an execution waits for decisions, to
// whoever the deployment tells (an EventBridge event, a log line): enough
// to find it and decide, never the calls' arguments.
type SuspensionNotice struct {
	ExecutionID string `json:"execution_id"`
	// Principal is whom the execution belongs to ("" with auth off).
	Principal string `json:"principal,omitempty"`
	Source    Source `json:"source"`
	// Pending names each call waiting, as call id and "server:tool".
	Pending   []PendingTool `json:"pending"`
	ExpiresAt time.Time     `json:"expires_at"`
	// ApprovalURL is the approval page of the execution, where a person
	// signs in and decides (where the deployment names its page's URL).
	ApprovalURL string `json:"approval_url,omitempty"`
}

// PendingTool is a pending call without its arguments.
type PendingTool struct {
	CallID int    `json:"call_id"`
	Tool   string `json:"tool"`
	// Question is what the call's remote server asked, for a call parked
	// on its question: each elicitation's message.
	Question string `json:"question,omitempty"`
}

// Failed is the document of an execution that failed before it ran, or
// of a request refused before anything ran: err and the execution's id.
func Failed(executionID string, err *fault.Error) *Response {
	return &Response{Error: err, Logs: []trace.LogEntry{}, Calls: []trace.Call{}, ExecutionID: executionID}
}

// Suspended reports whether the execution waits for decisions.
func (r *Response) Suspended() bool { return r.Status == StatusSuspended && r.Error == nil }

// Running reports whether the execution has not ended: it runs on without
// the caller (an asynchronous execution's first answer, or a document read
// while it runs).
func (r *Response) Running() bool { return r.Status == StatusRunning }

// Ended reports whether the document is final: the execution completed,
// was cancelled or was lost, and nothing will change it any more.
func (r *Response) Ended() bool { return !r.Running() && !r.Suspended() }

// Pending is a parked call a suspended execution waits on.
type Pending struct {
	CallID int             `json:"call_id"`
	Server string          `json:"server"`
	Tool   string          `json:"tool"`
	Args   json.RawMessage `json:"args"`
	Reason string          `json:"reason"` // PendingApproval or PendingQuestion
	// Site is the call's call site ("line:column" in the code that runs,
	// as Plan's sites name them; empty when it has none), Line its line
	// in the script as written.
	Site string `json:"site,omitempty"`
	Line int    `json:"line,omitempty"`
	// Questions, for PendingQuestion, are what the server asked: its
	// elicitation requests' params (message, requestedSchema; mode and url
	// for a URL-mode one), by the server's keys, as it sent them. What the
	// server needs to go on from where it was (its requestState) stays with
	// the suspended execution, never here.
	Questions map[string]json.RawMessage `json:"questions,omitempty"`
}

// maxFailures is the most failed calls a summary lists one by one.
const maxFailures = 20

// CallSummary stands for an execution's call records, small enough for a
// model's context whatever the number of calls.
type CallSummary struct {
	Total  int `json:"total"`
	Failed int `json:"failed"`
	// ByTool counts the calls of each tool ("server:tool"), most called
	// first.
	ByTool []ToolCount `json:"by_tool"`
	// Failures lists the first failed calls, in the order they were made;
	// FailuresOmitted counts the rest.
	Failures        []FailedCall `json:"failures,omitempty"`
	FailuresOmitted int          `json:"failures_omitted,omitempty"`
}

// ToolCount is how often one tool was called, and how often that failed.
type ToolCount struct {
	Tool   string `json:"tool"`
	Calls  int    `json:"calls"`
	Failed int    `json:"failed,omitempty"`
}

// FailedCall names one failed call.
type FailedCall struct {
	// ExecutionID is set for a call of a capability run below this one.
	ExecutionID string     `json:"execution_id,omitempty"`
	CallID      int        `json:"call_id"`
	Tool        string     `json:"tool"`
	ErrorCode   fault.Code `json:"error_code"`
	// Count is how many calls a summary record stands for (calls refused
	// past the tool_calls limit).
	Count int `json:"count,omitempty"`
}

// Summarize counts calls (of executionID and any run below it).
func Summarize(executionID string, calls []trace.Call) *CallSummary {
	s := &CallSummary{ByTool: []ToolCount{}}
	index := map[string]int{}
	for _, c := range calls {
		n := max(c.Count, 1)
		name := c.Server + ":" + c.Tool
		i, ok := index[name]
		if !ok {
			i = len(s.ByTool)
			index[name] = i
			s.ByTool = append(s.ByTool, ToolCount{Tool: name})
		}
		s.Total += n
		s.ByTool[i].Calls += n
		if c.OK || c.Status != "" {
			// Parked, or never run: neither failed.
			continue
		}
		s.Failed += n
		s.ByTool[i].Failed += n
		if len(s.Failures) == maxFailures {
			s.FailuresOmitted++
			continue
		}
		f := FailedCall{CallID: c.CallID, Tool: name, ErrorCode: c.ErrorCode, Count: c.Count}
		if c.ExecutionID != executionID {
			f.ExecutionID = c.ExecutionID
		}
		s.Failures = append(s.Failures, f)
	}
	slices.SortStableFunc(s.ByTool, func(a, b ToolCount) int {
		return cmp.Or(cmp.Compare(b.Calls, a.Calls), cmp.Compare(a.Tool, b.Tool))
	})
	return s
}

// ApplyCallDetail trims the calls to what a request asked for. A nil
// Calls is left out of the JSON, so "calls": [] still means no calls.
func (r *Response) ApplyCallDetail(detail string) {
	switch detail {
	case CallDetailSummary:
		r.CallSummary = Summarize(r.ExecutionID, r.Calls)
		r.Calls = nil
	case CallDetailNone:
		r.Calls = nil
	}
}
