package execution

import (
	"strings"
	"time"

	"github.com/pml-sandbox/pml/internal/fault"
)

// Sessions. An agent rarely solves a task in one program: it fetches,
// looks, then filters what it fetched. A request with Session SessionNew
// starts a session and the response names it (ResponseSession.ID); a
// request with SessionID continues it. What an execution of a session
// declares at its top level (const, let, function, class, var) and puts on
// globalThis lives on into the session's next execution, served by
// whichever process or container gets it; a later execution may declare a
// name again. Timers, calls in flight and open promises do not cross
// executions. One execution of a session runs at a time (another at once
// is CONFLICT, retryable, naming the one that runs), an execution that
// fails leaves the session as the one before it left it, and a session is
// its creator's alone: to anyone else it does not exist.

// SessionNew is Request.Session's one value: start a session.
const SessionNew = "new"

// The session's idle time: how long it lives without an execution
// (Request.SessionTTLS, or the deployment's default).
const (
	DefaultSessionTTL = time.Hour
	MaxSessionTTL     = 24 * time.Hour
)

// SessionPrefix starts every session id.
const SessionPrefix = "ss_"

// ValidSessionID reports whether id can name a session: SessionPrefix
// and 1 to 64 letters, digits, '_' or '-'.
func ValidSessionID(id string) bool {
	rest, ok := strings.CutPrefix(id, SessionPrefix)
	if !ok || len(rest) == 0 || len(rest) > 64 {
		return false
	}
	for _, r := range rest {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
		default:
			return false
		}
	}
	return true
}

// InSession reports whether the request runs in a session (new or
// continued).
func (r *Request) InSession() bool { return r.Session != "" || r.SessionID != "" }

// checkSession validates the session fields (Validate calls it).
func (r *Request) checkSession() *fault.Error {
	switch {
	case r.Session != "" && r.Session != SessionNew:
		return fault.New(fault.InvalidRequest, `session must be "new" (to continue one, send its id as session_id), not %q`, r.Session)
	case r.Session != "" && r.SessionID != "":
		return fault.New(fault.InvalidRequest, `session "new" and session_id exclude each other`)
	case r.SessionID != "" && !ValidSessionID(r.SessionID):
		return fault.New(fault.InvalidRequest, "session_id %q is not a session id (ss_…)", r.SessionID)
	case r.SessionTTLS < 0 || r.SessionTTLS > int(MaxSessionTTL/time.Second):
		return fault.New(fault.InvalidRequest, "session_ttl_s must be between 1 and %d", int(MaxSessionTTL/time.Second))
	case r.SessionTTLS > 0 && r.Session != SessionNew:
		return fault.New(fault.InvalidRequest, `session_ttl_s is set when a session starts (session "new")`)
	case !r.InSession():
		return nil
	case r.Parent != nil:
		return fault.New(fault.InvalidRequest, "a capability run cannot be a session's execution")
	case r.Session == SessionNew && (r.Async || r.Source.Queued()):
		return fault.New(fault.InvalidRequest, `session "new" needs a caller that reads the answer, which names the session: start it with a synchronous request, then continue it (session_id) from %s`, sourceOr(r.Source, "anywhere"))
	}
	return nil
}

func sourceOr(s Source, or string) string {
	if s == "" {
		return or
	}
	return string(s)
}

// ResponseSession is what an execution's answer says of its session.
type ResponseSession struct {
	// ID names the session: send it as session_id to continue.
	ID string `json:"id"`
	// Saved reports that this execution's state was kept: false when the
	// execution failed (or its state could not be kept), and the session
	// is as the execution before it left it (Note says why).
	Saved bool `json:"saved"`
	// Executions counts the session's executions that were kept, this
	// one included when Saved.
	Executions int `json:"executions"`
	// Names are the top-level names the session's kept executions
	// declared, sorted.
	Names []string `json:"names,omitempty"`
	// SizeBytes is the saved state's size (compressed).
	SizeBytes int `json:"size_bytes"`
	// ExpiresAt is when the session ends unless an execution continues it.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// Left is the work this execution left running when it returned:
	// none of it reaches the next execution.
	Left *Left `json:"left,omitempty"`
	// Note says, in words, what became of the session when it is not
	// simply this execution's state kept.
	Note string `json:"note,omitempty"`
}

// Left counts what a script left running when it returned.
type Left struct {
	Calls  int `json:"calls,omitempty"`
	Timers int `json:"timers,omitempty"`
}

// SessionInfo is a session as GET /sessions/{id} shows it: never its
// state.
type SessionInfo struct {
	ID    string `json:"session_id"`
	State string `json:"state"` // "idle" or "running"
	// Running names the execution that holds it, when running.
	Running    string    `json:"running,omitempty"`
	Executions int       `json:"executions"`
	Names      []string  `json:"names,omitempty"`
	SizeBytes  int       `json:"size_bytes"`
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
	ExpiresAt  time.Time `json:"expires_at"`
	TTLS       int       `json:"ttl_s"`
	// Tools is the narrowing fixed when the session was created (empty:
	// none); AllowDestructive whether it was consented to then.
	Tools            []string `json:"tools,omitempty"`
	AllowDestructive bool     `json:"allow_destructive,omitempty"`
	// History is the session's executions, oldest first (the last
	// MaxSessionHistory), each with whether it was kept.
	History []SessionStep `json:"history"`
}

// SessionStep is one execution of a session.
type SessionStep struct {
	// Step numbers the session's executions from 1.
	Step        int       `json:"step"`
	ExecutionID string    `json:"execution_id"`
	At          time.Time `json:"at"`
	Kept        bool      `json:"kept"`
}

// MaxSessionHistory bounds SessionInfo.History.
const MaxSessionHistory = 100

// SessionRequest names a session for reading or ending it, by its owner.
type SessionRequest struct {
	SessionID string
	Principal string
}
