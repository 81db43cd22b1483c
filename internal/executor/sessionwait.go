package executor

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/js/analysis"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/trace"
)

// Executions of a session that wait for a person. A session is held by
// one execution at a time (its claim); an execution of it that suspends
// keeps holding it, for as long as it may wait (its suspension's expiry),
// so that no other execution runs in the session meanwhile and the
// session's state cannot fork. The suspension records which session it
// holds (durableState.Session); the resumption, in whichever process,
// takes the claim up again — refusing to run on if the session moved on
// (it was ended, or the claim ran out) — and closes it as the execution's
// first run would have: the new state kept if the script succeeded, the
// state before it otherwise. A cancelled execution releases the session as
// it was.

// maxHeldNames bounds the top-level names a suspension keeps of its
// session's execution (a description of the session, never what it
// keeps: the sandbox keeps them all).
const maxHeldNames = 200

// heldSession is what a suspended execution keeps of the session it
// holds.
type heldSession struct {
	ID string `json:"id"`
	// Kept are the top-level bindings the execution hands over, Checked
	// whether the parser read its code (sessionRun's).
	Kept    []analysis.Binding `json:"kept,omitempty"`
	Checked bool               `json:"checked,omitempty"`
	New     bool               `json:"new,omitempty"`
}

func heldOf(run *sessionRun) *heldSession {
	if run == nil {
		return nil
	}
	kept := run.kept
	if len(kept) > maxHeldNames {
		kept = kept[:maxHeldNames]
	}
	return &heldSession{ID: run.claim.ID, Kept: kept, Checked: run.checked, New: run.isNew}
}

// waitNote is what a suspended execution's answer says of its session.
const waitNote = "this execution waits for a person: it holds the session until it is decided (no other execution runs in it meanwhile), " +
	"and the session keeps what it does only if it then succeeds"

// holdSession keeps run's session for the suspended execution rec until
// it may expire. When it cannot, the execution cannot wait: it ends now
// (its pending calls never run) and the session is released as it was.
func (s *Service) holdSession(ctx context.Context, run *sessionRun, rec *suspend.Record, resp *execution.Response) {
	if !resp.Suspended() {
		// Not saved: park made the answer a failure.
		s.closeSession(ctx, run, resp, nil)
		return
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	err := s.hold(sctx, run, rec.ExpiresAt.Add(suspend.LeaseMargin))
	if err != nil {
		s.log.ErrorContext(ctx, "session not held for a suspended execution", "session_id", run.claim.ID, "execution_id", rec.ID, "err", err)
		if ferr := s.store.Finish(sctx, rec.ID, rec.Version, suspend.Failed, fault.Unavailable); ferr != nil {
			s.log.ErrorContext(ctx, "suspended execution not recorded as finished", "execution_id", rec.ID, "err", ferr)
		}
		resp.Status, resp.Pending, resp.Plan, resp.ExpiresAt = "", nil, nil, time.Time{}
		resp.Error = fault.Wrap(fault.Unavailable, err, "the execution would wait for a person, but its session could not be held meanwhile; its pending calls will not run")
		resp.Error.Retryable = true
		for i, c := range resp.Calls {
			if c.Status == trace.StatusParked {
				resp.Calls[i].Status = trace.StatusNotRun
			}
		}
		s.closeSession(ctx, run, resp, nil)
		return
	}
	resp.Session = &execution.ResponseSession{ID: run.claim.ID, Executions: run.data.Executions, Names: run.data.Names,
		SizeBytes: run.claim.Size, ExpiresAt: run.claim.ExpiresAt, Note: waitNote}
}

// hold extends run's claim to until.
func (s *Service) hold(ctx context.Context, run *sessionRun, until time.Time) error {
	h, ok := s.sessions.(suspend.SessionHolder)
	if !ok {
		return errors.New("this session store cannot hold a session for an execution that waits")
	}
	return h.Hold(ctx, run.claim, until)
}

// resumeSession takes up the session a suspended execution holds, for its
// resumption to run in: CONFLICT when it is not the execution's any more.
func (s *Service) resumeSession(ctx context.Context, execID, principal string, held *heldSession) (*sessionRun, *fault.Error) {
	moved := func(why string) *fault.Error {
		return fault.New(fault.Conflict, "session %s moved on while execution %s waited (%s): the execution does not run on, and its pending calls did not run", held.ID, execID, why)
	}
	if s.sessions == nil {
		return nil, moved("this service keeps no sessions")
	}
	cur, err := s.sessions.Load(ctx, held.ID, true)
	switch {
	case err != nil:
		return nil, moved(sessionFault(held.ID, err).Message)
	case cur.Principal != principal:
		return nil, moved("it is another principal's")
	case cur.State != suspend.SessionRunning || cur.Running != execID:
		return nil, moved("another execution holds it, or none")
	}
	var data sessionData
	if err := json.Unmarshal(cur.Bridge, &data); err != nil {
		return nil, fault.Wrap(fault.Internal, err, "reading the session's record")
	}
	run := &sessionRun{claim: cur, data: data, kept: held.Kept, checked: held.Checked, isNew: held.New}
	// Held for the run now, not only for the wait: a decision taken just
	// before the suspension expires must not let another execution take
	// the session over while this one runs on.
	if err := s.hold(ctx, run, time.Now().Add(s.maxTime+suspend.LeaseMargin)); err != nil {
		return nil, moved(err.Error())
	}
	return run, nil
}

// lostSession says in resp that the session the execution held could not
// be taken up again.
func (s *Service) lostSession(_ context.Context, held *heldSession, resp *execution.Response) {
	resp.Session = &execution.ResponseSession{ID: held.ID, Note: "the session was not this execution's any more when it was resumed: nothing of it is kept"}
}

// releaseHeld gives the session a cancelled execution held back, as it
// was.
func (s *Service) releaseHeld(ctx context.Context, execID, principal string, held *heldSession) {
	if s.sessions == nil {
		return
	}
	cur, err := s.sessions.Load(ctx, held.ID, true)
	if err != nil || cur.Principal != principal || cur.State != suspend.SessionRunning || cur.Running != execID {
		return // not ours any more: nothing to give back
	}
	if err := s.sessions.Release(ctx, cur); err != nil {
		s.log.ErrorContext(ctx, "session not released after a cancel", "session_id", held.ID, "execution_id", execID, "err", err)
	}
}
