// Package fault defines the structured errors every layer of PML Sandbox
// speaks: a stable machine-readable code plus a human message, so that a
// script inside the sandbox, a Lambda caller and a trace record all see the
// same failure the same way.
package fault

import (
	"errors"
	"fmt"
)

// Code names a class of failure. Callers branch on codes, never on messages.
type Code string

// The codes a caller can see. They are part of the public contract: add new
// ones, never rename.
const (
	// ToolNotFound: the script named a tool that is not in its tool set.
	ToolNotFound Code = "TOOL_NOT_FOUND"
	// InvalidArguments: tool arguments failed the tool's input schema.
	InvalidArguments Code = "INVALID_ARGUMENTS"
	// ToolError: the tool ran and reported failure (MCP isError).
	ToolError Code = "TOOL_ERROR"
	// Timeout: a deadline passed (the execution's or one call's).
	Timeout Code = "TIMEOUT"
	// Unavailable: the tool's server cannot be reached now; retryable.
	Unavailable Code = "UNAVAILABLE"
	// LimitExceeded: an execution limit was hit; Details names which.
	LimitExceeded Code = "LIMIT_EXCEEDED"
	// Forbidden: the request may not use this tool (e.g. a destructive tool
	// the request did not allow), or `pml serve` refused its Host or Origin.
	Forbidden Code = "FORBIDDEN"
	// Unauthorized: the request lacks the bearer token the server requires
	// (`pml serve --token`), or sent a wrong one.
	Unauthorized Code = "UNAUTHORIZED"
	// CapabilityCycle: a capability called itself through a chain.
	CapabilityCycle Code = "CAPABILITY_CYCLE"
	// ScriptError: the user's code threw (SyntaxError, TypeError, a thrown
	// value...). Message and Stack come from the script.
	ScriptError Code = "SCRIPT_ERROR"
	// InvalidResult: the script's return value cannot be represented as JSON.
	InvalidResult Code = "INVALID_RESULT"
	// Deadlock: the script awaits a promise nothing can ever settle.
	Deadlock Code = "DEADLOCK"
	// InvalidRequest: the request itself is malformed (bad JSON, no code...).
	InvalidRequest Code = "INVALID_REQUEST"
	// NotFound: the execution, capability or route asked for does not exist.
	NotFound Code = "NOT_FOUND"
	// SandboxError: the sandbox itself failed (a trap, a corrupt instance).
	SandboxError Code = "SANDBOX_ERROR"
	// Rejected: a call that waited for approval was rejected.
	Rejected Code = "REJECTED"
	// ResumeIncompatible: a suspended execution cannot be resumed by this
	// build of the sandbox (its guest differs).
	ResumeIncompatible Code = "RESUME_INCOMPATIBLE"
	// Conflict: a suspended execution is not waiting any more: another
	// resume claimed it first, or it has finished (Details say how).
	Conflict Code = "CONFLICT"
	// Expired: a suspended execution waited past its expiry.
	Expired Code = "EXPIRED"
	// Internal: a bug or an unexpected host failure.
	Internal Code = "INTERNAL"
	// Cancelled: someone cancelled the execution (DELETE
	// /executions/{id}, an MCP tasks/cancel, pml cancel); a running one
	// ends at its next step.
	Cancelled Code = "CANCELLED"
	// OutcomeUnknown: an effect (a call that is not read-only) may or may
	// not have happened: it left the host and no answer was recorded, and
	// its tool does not honour idempotency keys, so it is not sent again.
	// Details carry its server, tool, key and call id (docs/EFFECTS.md).
	OutcomeUnknown Code = "OUTCOME_UNKNOWN"
)

// Limit names, carried in Error.Limit when Code is LimitExceeded, so callers
// see which limit was hit.
const (
	LimitMemory      = "memory"
	LimitStack       = "stack"
	LimitCodeSize    = "code_size"
	LimitCodeDepth   = "code_depth" // nesting of the source, bounded before any parser reads it
	LimitToolCalls   = "tool_calls"
	LimitInFlight    = "calls_in_flight"
	LimitLogBytes    = "log_bytes"
	LimitLogEntries  = "log_entries"
	LimitResultBytes = "result_bytes"
	LimitArgsBytes   = "args_bytes"
	LimitDepth       = "depth"
	LimitSandboxes   = "sandboxes"    // capability runs one request tree may start
	LimitLookups     = "name_lookups" // names one run resolves as its script reaches them
	LimitTimers      = "timers"       // setTimeout calls per execution
	LimitJSONDepth   = "json_depth"   // nesting of a result, a call's arguments or a reported error
	LimitSessionSize = "session_size" // a session's saved state
	// Quotas of what a store keeps for one principal (or in all), past
	// which it keeps no more until some is closed, deleted or expires.
	LimitDrafts         = "drafts"          // capability drafts waiting: one author's, or the deployment's
	LimitSessions       = "sessions"        // sessions one principal holds
	LimitSessionBytes   = "session_bytes"   // their saved state, in all
	LimitSuspended      = "suspended"       // suspended executions one principal has waiting
	LimitSuspendedBytes = "suspended_bytes" // their saved state, in all
)

// Server budgets, carried in Error.Limit when Code is Unavailable: `pml
// serve` refused or stopped an execution because the whole server's
// budget, not the execution's own limit, was spent (retryable).
const (
	LimitServerMemory     = "server_memory"
	LimitServerExecutions = "server_executions"
)

// Error is the one structured error type. It marshals to the wire shape
// `{code, message, tool, limit, retryable, stack, details}`.
type Error struct {
	Code      Code   `json:"code"`
	Message   string `json:"message"`
	Tool      string `json:"tool,omitempty"`
	Limit     string `json:"limit,omitempty"`
	Retryable bool   `json:"retryable,omitempty"`
	Stack     string `json:"stack,omitempty"`
	Details   any    `json:"details,omitempty"`

	cause error
}

// Error implements error.
func (e *Error) Error() string {
	var s string
	switch {
	case e.Tool != "":
		s = fmt.Sprintf("%s: %s: %s", e.Code, e.Tool, e.Message)
	default:
		s = fmt.Sprintf("%s: %s", e.Code, e.Message)
	}
	return s
}

// Unwrap returns the underlying cause, if any.
func (e *Error) Unwrap() error { return e.cause }

// New returns an Error with a formatted message.
func New(code Code, format string, a ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, a...)}
}

// Wrap returns an Error with the given code whose cause is err; the message
// is msg followed by err's text.
func Wrap(code Code, err error, msg string) *Error {
	m := msg
	if err != nil {
		if m != "" {
			m += ": "
		}
		m += err.Error()
	}
	return &Error{Code: code, Message: m, cause: err}
}

// Limitf returns a LimitExceeded error naming the limit hit.
func Limitf(limit string, format string, a ...any) *Error {
	return &Error{Code: LimitExceeded, Limit: limit, Message: fmt.Sprintf(format, a...)}
}

// WithTool returns e with its Tool set (for chaining at construction).
func (e *Error) WithTool(tool string) *Error { e.Tool = tool; return e }

// As converts any error into an *Error: an *Error anywhere in the chain is
// returned as is; anything else becomes Internal.
func As(err error) *Error {
	if err == nil {
		return nil
	}
	var fe *Error
	if errors.As(err, &fe) {
		return fe
	}
	return Wrap(Internal, err, "")
}

// CodeOf returns the code of err, or "" for nil.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	return As(err).Code
}
