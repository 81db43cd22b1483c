package executor

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/js/analysis"
	"github.com/pml-sandbox/pml/internal/suspend"
)

// Sessions (execution/session.go). An execution of a session claims the
// session's saved state before anything runs (a new session is created
// held by it), runs in a sandbox restored from it, and ends the claim:
// with the sandbox's new state when the script succeeded and the state
// fits the size cap, with the state it had otherwise. The guest keeps the
// script's top-level bindings as globals (script.Prepared.Persist), so the
// service only carries state: it never rewrites what the script means.

// DefaultSessionMaxBytes bounds a session's saved state (compressed)
// unless Options.SessionMaxBytes says otherwise.
const DefaultSessionMaxBytes = 16 << 20

// maxSessionNames bounds the names a session's record lists (its
// description, not what it keeps: the sandbox keeps them all).
const maxSessionNames = 1000

// sessionData is what the service keeps about a session beside its state
// (suspend.Session.Bridge), in the clear: never the state's content.
type sessionData struct {
	// Tools is the narrowing the session was created with, which every
	// execution of it inherits; AllowDestructive the consent it was
	// created with, which none may widen.
	Tools            []string `json:"tools,omitempty"`
	AllowDestructive bool     `json:"allow_destructive,omitempty"`
	// Executions counts the executions kept; Steps every execution.
	Executions int `json:"executions"`
	Steps      int `json:"steps"`
	// Names are the top-level names the kept executions declared.
	Names   []string                `json:"names,omitempty"`
	History []execution.SessionStep `json:"history,omitempty"`
	// Last is the execution whose state the session holds.
	Last string `json:"last,omitempty"`
}

func (d *sessionData) encode() (json.RawMessage, error) {
	for {
		b, err := json.Marshal(d)
		if err != nil || len(b) <= suspend.MaxBridgeBytes || len(d.History) == 0 {
			return b, err
		}
		d.History = d.History[1:]
	}
}

// sessionRun is a session held by the execution under way.
type sessionRun struct {
	claim *suspend.Session
	data  sessionData
	isNew bool
	// kept are the bindings this execution hands over (nil: none, or the
	// code was not read).
	kept    []analysis.Binding
	checked bool
}

// newSessionID mints a session id: 128 random bits.
func newSessionID() string { return execution.SessionPrefix + strings.ToLower(rand.Text()) }

// sessionFault turns a store's error about session id into what callers
// see: another principal's session is as unknown as one that never was.
func sessionFault(id string, err error) *fault.Error {
	var busy *suspend.BusyError
	var limit *fault.Error
	switch {
	case errors.As(err, &limit) && limit.Code == fault.LimitExceeded:
		// The principal's quota (suspend.Quota): which, and how to make
		// room, as the store says it.
		return limit
	case errors.Is(err, suspend.ErrNotFound), errors.Is(err, suspend.ErrForbidden):
		return fault.New(fault.NotFound, "no session %q", id)
	case errors.Is(err, suspend.ErrExpired):
		return fault.New(fault.Expired, "session %s expired: it had no execution for longer than its idle time; start a new one", id)
	case errors.As(err, &busy):
		fe := fault.New(fault.Conflict, "session %s is running execution %s: one execution of a session runs at a time; retry once it has ended", id, busy.Execution)
		fe.Retryable, fe.Details = true, map[string]any{"running": busy.Execution}
		return fe
	case errors.Is(err, suspend.ErrConflict):
		fe := fault.New(fault.Conflict, "session %s moved on while this execution claimed it; retry", id)
		fe.Retryable = true
		return fe
	}
	fe := fault.Wrap(fault.Unavailable, err, "the session store failed")
	fe.Retryable = true
	return fe
}

// openSession creates or claims req's session for the execution, which
// may run for lease; it sets what the session imposes on req (its
// narrowing). A refusal means nothing ran.
func (s *Service) openSession(ctx context.Context, req *execution.Request, lease time.Duration) (*sessionRun, *fault.Error) {
	if s.sessions == nil {
		return nil, fault.New(fault.InvalidRequest, "sessions are not available here: this service keeps none")
	}
	if req.Session == execution.SessionNew {
		run := &sessionRun{isNew: true, data: sessionData{Tools: req.Tools, AllowDestructive: req.AllowDestructive}}
		bridge, err := run.data.encode()
		if err != nil {
			return nil, fault.Wrap(fault.Internal, err, "recording the session")
		}
		idle := s.sessionTTL
		if req.SessionTTLS > 0 {
			idle = time.Duration(req.SessionTTLS) * time.Second
		}
		c := &suspend.Session{ID: newSessionID(), Principal: req.Principal, Running: req.ExecutionID, Lease: lease, Idle: idle, Bridge: bridge}
		if err := s.sessions.Create(ctx, c); err != nil {
			return nil, sessionFault(c.ID, err)
		}
		run.claim = c
		return run, nil
	}
	id := req.SessionID
	cur, err := s.sessions.Load(ctx, id, false)
	if err != nil {
		return nil, sessionFault(id, err)
	}
	if cur.Principal != req.Principal {
		return nil, sessionFault(id, suspend.ErrForbidden)
	}
	var data sessionData
	if err := json.Unmarshal(cur.Bridge, &data); err != nil {
		return nil, fault.Wrap(fault.Internal, err, "reading the session's record")
	}
	// Before claiming, so that the session stays for a process of the
	// right build.
	if h := cur.GuestHash; h != "" && h != s.engine.WasmHash() {
		return nil, fault.New(fault.ResumeIncompatible,
			"session %s was saved by another build of the sandbox (guest %s; this one runs %s): continue it where that build runs, or start a new session", id, h, s.engine.WasmHash())
	}
	if req.AllowDestructive && !data.AllowDestructive {
		return nil, &fault.Error{Code: fault.Forbidden, Details: map[string]any{"reason": "session"},
			Message: fmt.Sprintf("session %s was started without allow_destructive, and its executions may only narrow what it was started with", id)}
	}
	if len(data.Tools) > 0 {
		n, err := execution.ParseNarrowing([][]string{data.Tools})
		if err != nil {
			return nil, fault.Wrap(fault.Internal, err, "reading the session's narrowing")
		}
		req.Narrowing = append(slices.Clip(req.Narrowing), n...)
	}
	c, err := s.sessions.Claim(ctx, id, cur.Version, req.Principal, req.ExecutionID, lease)
	if err != nil {
		return nil, sessionFault(id, err)
	}
	return &sessionRun{claim: c, data: data}, nil
}

// closeSession ends the execution's claim on its session: the sandbox's
// new state is kept when the script succeeded (and it fits), the state it
// had otherwise. It says what became of the session in resp.
func (s *Service) closeSession(ctx context.Context, run *sessionRun, resp *execution.Response, res *guest.Result) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	c := run.claim
	out := &execution.ResponseSession{ID: c.ID}
	resp.Session = out
	var notes []string
	if res != nil && !res.Left.None() {
		out.Left = &execution.Left{Calls: res.Left.Calls, Timers: res.Left.Timers}
		notes = append(notes, fmt.Sprintf("the script returned with %d calls and %d timers still pending: none of them continues into the next execution", res.Left.Calls, res.Left.Timers))
	}
	keep := resp.OK && res != nil && res.State != nil
	if keep && len(res.State.Memory) > s.sessionMax {
		keep = false
		resp.OK, resp.Result = false, nil
		resp.Error = fault.Limitf(fault.LimitSessionSize, "the session's state would be %d bytes; the limit is %d", len(res.State.Memory), s.sessionMax)
		resp.Error.Details = map[string]int{"size": len(res.State.Memory), "limit": s.sessionMax}
	}
	now := time.Now().UTC()
	run.data.Steps++
	step := execution.SessionStep{Step: run.data.Steps, ExecutionID: resp.ExecutionID, At: now, Kept: keep}
	run.data.History = append(run.data.History, step)
	if over := len(run.data.History) - execution.MaxSessionHistory; over > 0 {
		run.data.History = run.data.History[over:]
	}
	before := run.data // as it was, should the store refuse the new state
	if keep {
		run.data.Executions++
		run.data.Last = resp.ExecutionID
		for _, b := range run.kept {
			if !slices.Contains(run.data.Names, b.Name) && len(run.data.Names) < maxSessionNames {
				run.data.Names = append(run.data.Names, b.Name)
			}
		}
		slices.Sort(run.data.Names)
		if !run.checked {
			notes = append(notes, "the parser could not read this code, so its top-level declarations were not kept (what it put on globalThis was)")
		}
	}
	bridge, err := run.data.encode()
	if err == nil {
		c.Bridge = bridge
		if keep {
			err = s.sessions.Save(ctx, c, res.State)
			if fe := sessionFault(c.ID, err); err != nil && fe.Code == fault.LimitExceeded {
				// Past the principal's quota: the new state is not kept,
				// the execution fails as for a state past the size cap,
				// and the session keeps the state it had.
				keep, err = false, nil
				resp.OK, resp.Result, resp.Error = false, nil, fe
				history := run.data.History
				history[len(history)-1].Kept = false
				run.data = before
				run.data.History = history
				if c.Bridge, err = run.data.encode(); err == nil {
					err = s.sessions.Release(ctx, c)
				}
			}
		} else {
			err = s.sessions.Release(ctx, c)
		}
	}
	switch {
	case err != nil && keep:
		s.log.ErrorContext(ctx, "session state not saved", "session_id", c.ID, "execution_id", resp.ExecutionID, "err", err)
		run.data.Executions--
		notes = append(notes, "the session's new state could not be saved: it is as its previous execution left it")
		keep = false
	case err != nil:
		// The claim stays until its lease ends; the next execution then
		// takes it over from the last saved state.
		s.log.ErrorContext(ctx, "session claim not released", "session_id", c.ID, "execution_id", resp.ExecutionID, "err", err)
	case !keep && resp.Error != nil:
		prev := "as it was started, with nothing kept yet"
		if run.data.Last != "" {
			prev = "as execution " + run.data.Last + " left it"
		}
		notes = append(notes, "this execution failed, so the session keeps nothing of it: it is "+prev)
	}
	out.Saved = keep
	out.Executions = run.data.Executions
	out.Names = run.data.Names
	out.SizeBytes = c.Size
	out.ExpiresAt = c.ExpiresAt
	if err != nil {
		out.SizeBytes, out.ExpiresAt = 0, time.Time{}
	}
	out.Note = strings.Join(notes, "; ")
}

// Session implements execution.Executor: the session as its owner may read
// it, never its state.
func (s *Service) Session(ctx context.Context, r execution.SessionRequest) (*execution.SessionInfo, *fault.Error) {
	return DescribeSession(ctx, s.sessions, r)
}

// EndSession implements execution.Executor: the session and its state are
// deleted, whatever it is doing (an execution holding it finds nothing to
// save into).
func (s *Service) EndSession(ctx context.Context, r execution.SessionRequest) *fault.Error {
	return EndSession(ctx, s.sessions, r)
}

// DescribeSession reads r's session from store as its owner may see it
// (what `pml session show` prints without a sandbox engine).
func DescribeSession(ctx context.Context, store suspend.Sessions, r execution.SessionRequest) (*execution.SessionInfo, *fault.Error) {
	if store == nil || !execution.ValidSessionID(r.SessionID) {
		return nil, fault.New(fault.NotFound, "no session %q", r.SessionID)
	}
	cur, err := store.Load(ctx, r.SessionID, false)
	if err != nil {
		return nil, sessionFault(r.SessionID, err)
	}
	if cur.Principal != r.Principal {
		return nil, sessionFault(r.SessionID, suspend.ErrForbidden)
	}
	return SessionInfoOf(cur)
}

// SessionInfoOf describes a stored session (never its state).
func SessionInfoOf(cur *suspend.Session) (*execution.SessionInfo, *fault.Error) {
	var data sessionData
	if err := json.Unmarshal(cur.Bridge, &data); err != nil {
		return nil, fault.Wrap(fault.Internal, err, "reading the session's record")
	}
	info := &execution.SessionInfo{ID: cur.ID, State: string(cur.State), Running: cur.Running, Executions: data.Executions,
		Names: data.Names, SizeBytes: cur.Size, CreatedAt: cur.CreatedAt, UpdatedAt: cur.UpdatedAt, ExpiresAt: cur.ExpiresAt,
		TTLS: int(cur.Idle / time.Second), Tools: data.Tools, AllowDestructive: data.AllowDestructive, History: data.History}
	if info.History == nil {
		info.History = []execution.SessionStep{}
	}
	return info, nil
}

// EndSession deletes r's session and its state from store, for its owner.
func EndSession(ctx context.Context, store suspend.Sessions, r execution.SessionRequest) *fault.Error {
	if store == nil || !execution.ValidSessionID(r.SessionID) {
		return fault.New(fault.NotFound, "no session %q", r.SessionID)
	}
	if err := store.Delete(ctx, r.SessionID, r.Principal); err != nil {
		return sessionFault(r.SessionID, err)
	}
	return nil
}
