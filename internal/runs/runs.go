// Package runs lets executions run without their callers. A request with
// async is recorded (suspend.Runs: queued, with the request) and answered
// at once, StatusRunning with its id; a launcher starts its run elsewhere —
// a goroutine of pml serve, an asynchronous invocation of the execute
// function, a detached pml process — and that run claims the record before
// anything runs, so a start delivered twice runs the script once. The
// caller polls the document (Status: running, the suspended document with
// its pending calls, then the final one) and may cancel it: a queued or
// suspended execution at once, a running one at its next step (the runner
// polls for the request), ending CANCELLED. A runner holds its claim with
// a short lease it renews while the run lives, and keeps the run's
// checkpoints with it; when the runner dies, the next delivery of the
// start, a sweeper (Sweep) or a reader finds the lease lapsed and another
// runner takes the run over, continuing it from its last checkpoint
// (continuation.go).
//
// Service wraps the execution service and is itself an
// execution.Executor: synchronous requests pass through (and can be
// cancelled by id while they run in this process), resumes of an
// asynchronous execution settle its run's document, and every front end
// uses it alike.
package runs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/journal"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/trace"
)

// Launcher starts the run of the queued execution id somewhere it outlives
// the request that started it, eventually calling Service.Run(id) there.
// It must not wait for the run. An error means nothing will run it.
type Launcher func(ctx context.Context, id string) error

// Options configure a Service.
type Options struct {
	// Store keeps the runs; without it asynchronous requests are refused.
	Store suspend.Runs
	// Launch starts a run elsewhere. Nil runs it in this process, on a
	// goroutine of its own (Close stops and waits for them).
	Launch Launcher
	// Policy says who besides an execution's owner may read and cancel
	// it: its approvers.
	Policy approval.Policy
	Logger *slog.Logger
	// PollEvery is how often a runner asks the store whether it was
	// cancelled (default 250 ms): a running execution ends at most this
	// long after a cancel, plus the step it was in.
	PollEvery time.Duration
	// Lease is how long a runner's claim lasts unless it renews it
	// (default DefaultLease); it renews it every Lease/3. A run whose
	// runner died is taken over once its lease has lapsed.
	Lease time.Duration
	// Journal, when set, is the journal of effects: the document of an
	// execution that runs, or whose runner was lost, lists the effects it
	// journalled so far (a finished one's document has them already).
	Journal journal.Reader
}

// Service runs executions, asynchronous ones included. It is safe for
// concurrent use.
type Service struct {
	execution.Executor
	opts Options
	log  *slog.Logger

	base   context.Context // in-process runs, and the sweeper
	stop   context.CancelCauseFunc
	wg     sync.WaitGroup
	sweeps sync.Once
	mu     sync.Mutex
	closed bool
	live   map[string]*liveRun
}

// liveRun is an execution running in this process, which a cancel can
// stop at once.
type liveRun struct {
	principal string
	cancel    context.CancelCauseFunc
	requested bool
}

// New returns a Service over exec, which runs every execution.
func New(exec execution.Executor, opts Options) *Service {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.PollEvery <= 0 {
		opts.PollEvery = 250 * time.Millisecond
	}
	if opts.Lease <= 0 {
		opts.Lease = DefaultLease
	}
	s := &Service{Executor: exec, opts: opts, log: opts.Logger, live: map[string]*liveRun{}}
	s.base, s.stop = context.WithCancelCause(context.Background())
	return s
}

// Close stops the runs of this process, which end failed with their
// document saying so, and waits for them to record it.
func (s *Service) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.stop(fault.New(fault.Unavailable, "the server stopped while the execution ran"))
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// cancelled is the cause a cancelled execution's context ends with: the
// engine ends the run with it (CANCELLED, not TIMEOUT).
func cancelled(id string) *fault.Error {
	return fault.New(fault.Cancelled, "execution %s was cancelled; it stopped at its next step", id)
}

// track makes the execution id running in this process, which principal
// owns, cancellable by Cancel until done is called. An entry already there
// stays: it is what a cancel reaches the running execution by, and nothing
// that comes later for the same id may take its place.
func (s *Service) track(ctx context.Context, id, principal string) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	l := &liveRun{principal: principal, cancel: cancel}
	s.mu.Lock()
	if s.live[id] == nil {
		s.live[id] = l
	}
	s.mu.Unlock()
	return ctx, func() {
		s.mu.Lock()
		if s.live[id] == l {
			delete(s.live, id)
		}
		s.mu.Unlock()
		cancel(nil)
	}
}

// Execute implements execution.Executor: an asynchronous request is
// recorded and launched, and answered StatusRunning at once (or failed
// when it cannot be); any other runs here, cancellable while it runs.
func (s *Service) Execute(ctx context.Context, req execution.Request) *execution.Response {
	if req.ExecutionID == "" {
		req.ExecutionID = trace.NewExecutionID()
	}
	if req.Async {
		return s.start(ctx, req)
	}
	if req.Durable && s.opts.Store != nil && req.Parent == nil && !req.InSession() {
		return s.attached(ctx, req)
	}
	ctx, done := s.track(ctx, req.ExecutionID, req.Principal)
	defer done()
	resp := s.Executor.Execute(ctx, req)
	if resp.Suspended() && s.opts.Store != nil && req.Parent == nil {
		s.keep(ctx, req.Principal, resp)
	}
	return resp
}

// keep records a synchronous execution that suspended as a run, so that
// however it is resumed — by an approver on the approval page, in another
// process — its caller can read how it ended (Status: GET
// /executions/{id}, tasks/get, an MCP client's retry after the page).
// Best effort: without it the execution still waits and resumes, and its
// trace tells what ran.
func (s *Service) keep(ctx context.Context, principal string, resp *execution.Response) {
	doc, err := json.Marshal(resp)
	if err == nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
		err = s.opts.Store.Keep(sctx, &suspend.Run{ID: resp.ExecutionID, Principal: principal, Body: doc, ExpiresAt: resp.ExpiresAt})
		cancel()
	}
	if err != nil {
		s.log.WarnContext(ctx, "suspended execution's document not kept", "execution_id", resp.ExecutionID, "err", err)
	}
}

// Resume implements execution.Executor: the resumed run is cancellable
// while it runs here, and an asynchronous execution's document follows
// what the resume ended with. Who asks is weighed before any live state
// is touched: only a resume of a suspended execution its caller may access
// (the owner, an approver) is tracked, under the owner's principal; any
// other goes to the service untracked, which refuses it as it refuses an
// unknown id, and the running execution's entry — what a cancel reaches
// it by — is never touched.
func (s *Service) Resume(ctx context.Context, rr execution.ResumeRequest) (*execution.Response, *fault.Error) {
	rctx, done := ctx, func() {}
	if owner, ok := s.resumable(ctx, rr); ok {
		rctx, done = s.track(ctx, rr.ExecutionID, owner)
	}
	resp, ferr := s.Executor.Resume(rctx, rr)
	done()
	if ferr == nil && s.opts.Store != nil {
		s.settleResumed(ctx, rr.ExecutionID, resp)
	}
	return resp, ferr
}

// resumable reports whether rr is worth tracking, and the owner of the
// execution it resumes: nothing of that id runs in this process, it waits
// for decisions, and rr's principal may access it.
func (s *Service) resumable(ctx context.Context, rr execution.ResumeRequest) (string, bool) {
	if s.liveRun(rr.ExecutionID) != nil {
		return "", false
	}
	w, ferr := s.Executor.Waiting(ctx, rr.ExecutionID)
	if ferr != nil || !s.opts.Policy.MayAccess(rr.Principal, w.Owner) {
		return "", false
	}
	return w.Owner, true
}

// settleResumed moves a suspended run's document on to what its resume
// answered; nothing for an execution that is not a run.
func (s *Service) settleResumed(ctx context.Context, id string, resp *execution.Response) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	run, err := s.opts.Store.Load(ctx, id)
	if err != nil || run.State != suspend.Suspended {
		return
	}
	state, expires := outcome(resp, nil)
	doc, err := json.Marshal(resp)
	if err == nil {
		err = s.opts.Store.Settle(ctx, id, run.Version, state, doc, expires)
	}
	if err != nil {
		s.log.WarnContext(ctx, "resumed run's document not recorded", "execution_id", id, "err", err)
	}
}

// storeTimeout bounds a store write after a run: it must happen even when
// the caller has gone.
const storeTimeout = 10 * time.Second

// start records an asynchronous request and launches its run.
func (s *Service) start(ctx context.Context, req execution.Request) *execution.Response {
	id := req.ExecutionID
	if s.opts.Store == nil {
		return execution.Failed(id, fault.New(fault.InvalidRequest, "async is not available here: this service keeps no runs (it needs the store of suspended executions)"))
	}
	if !req.Validated() {
		if ferr := req.Validate(); ferr != nil {
			return execution.Failed(id, ferr)
		}
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return execution.Failed(id, retryable(fault.New(fault.Unavailable, "the server is stopping: it starts no more runs")))
	}
	body, err := encodeRequest(req)
	if err != nil {
		return execution.Failed(id, fault.Wrap(fault.InvalidRequest, err, "recording the request"))
	}
	run := &suspend.Run{ID: id, Principal: req.Principal, Body: body}
	if err := s.opts.Store.Create(ctx, run); err != nil {
		s.log.ErrorContext(ctx, "run not recorded", "execution_id", id, "err", err)
		return execution.Failed(id, retryable(fault.Wrap(fault.Unavailable, err, "the execution could not be recorded")))
	}
	launch := s.opts.Launch
	if launch == nil {
		launch = s.launchHere
	}
	if err := launch(ctx, id); err != nil {
		s.log.ErrorContext(ctx, "run not launched", "execution_id", id, "err", err)
		resp := execution.Failed(id, retryable(fault.Wrap(fault.Unavailable, err, "the execution could not be started")))
		resp.Status = execution.StatusFailed
		if doc, jerr := json.Marshal(resp); jerr == nil {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
			_ = s.opts.Store.Settle(sctx, id, run.Version, suspend.Failed, doc, time.Time{})
			cancel()
		}
		return resp
	}
	return &execution.Response{ExecutionID: id, Status: execution.StatusRunning, Logs: []trace.LogEntry{}, CreatedAt: run.CreatedAt, UpdatedAt: run.UpdatedAt}
}

func retryable(fe *fault.Error) *fault.Error {
	fe.Retryable = true
	return fe
}

// launchHere runs id on a goroutine of this process.
func (s *Service) launchHere(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("the server is stopping")
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.Run(s.base, id); err != nil {
			s.log.Error("run failed to start", "execution_id", id, "err", err)
		}
	}()
	return nil
}

// Run runs the queued execution id, once however often it is called: the
// launcher's end. It also takes over a running one whose runner died (its
// lease lapsed), and continues it (continuation.go). A run already claimed
// and alive (a second delivery of the start) or gone is nothing to do; an
// error is one worth trying again (the store could not be read), since
// nothing ran.
func (s *Service) Run(ctx context.Context, id string) error {
	store := s.opts.Store
	if store == nil {
		return errors.New("runs: no store")
	}
	claimed, err := s.claim(ctx, id)
	if err != nil || claimed == nil {
		return err
	}
	// The run is ours: from here on it ends with a document, whatever
	// happens, unless another runner took it over meanwhile.
	resp, cause, lost := s.runClaimed(ctx, claimed)
	if lost {
		s.log.WarnContext(ctx, "run lost to another runner: its document is that runner's to record", "execution_id", id, "cause", cause)
		return nil
	}
	return s.finish(ctx, claimed, resp, cause)
}

// finish ends claimed, the claim on a run that ran, with resp.
func (s *Service) finish(ctx context.Context, claimed *suspend.Run, resp *execution.Response, cause error) error {
	id := claimed.ID
	state, expires := outcome(resp, cause)
	doc, err := json.Marshal(resp)
	if err != nil {
		return fmt.Errorf("runs: encoding the document of %s: %w", id, err)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	if err := s.opts.Store.Finish(sctx, id, claimed.Runner, state, doc, expires); err != nil {
		// The script has run: trying again would not run it twice (the
		// claim is spent), and only its document is lost.
		s.log.ErrorContext(ctx, "run's document not recorded", "execution_id", id, "err", err)
	}
	return nil
}

// claim claims id's run: a queued one, or a running one whose lease
// lapsed (Takeover). Nil, and no error, when there is nothing to run.
func (s *Service) claim(ctx context.Context, id string) (*suspend.Run, error) {
	store := s.opts.Store
	run, err := store.Load(ctx, id)
	switch {
	case errors.Is(err, suspend.ErrNotFound), errors.Is(err, suspend.ErrExpired):
		s.log.WarnContext(ctx, "run not found", "execution_id", id, "err", err)
		return nil, nil
	case err != nil:
		return nil, err
	}
	var claimed *suspend.Run
	switch run.State {
	case suspend.RunQueued:
		claimed, err = store.Claim(ctx, id, run.Version, s.opts.Lease)
	case suspend.RunRunning:
		// The store decides whether its lease lapsed: a live runner's
		// run is a conflict.
		claimed, err = store.Takeover(ctx, id, run.Version, s.opts.Lease)
		if err == nil {
			s.log.WarnContext(ctx, "run taken over: its runner was lost", "execution_id", id, "takeovers", claimed.Takeovers,
				"checkpoint", claimed.Checkpoint != nil)
		}
	default:
		s.log.InfoContext(ctx, "run already ended", "execution_id", id, "state", string(run.State))
		return nil, nil
	}
	if errors.Is(err, suspend.ErrConflict) || errors.Is(err, suspend.ErrExpired) {
		s.log.InfoContext(ctx, "run claimed elsewhere", "execution_id", id, "err", err)
		return nil, nil
	}
	return claimed, err
}

// runClaimed runs claimed, ours now, and returns its document, why its
// context ended if it did, and whether the claim was lost to another
// runner meanwhile.
func (s *Service) runClaimed(ctx context.Context, claimed *suspend.Run) (resp *execution.Response, cause error, lost bool) {
	id := claimed.ID
	req, err := decodeRequest(claimed.Body)
	if err != nil {
		return execution.Failed(id, fault.Wrap(fault.Internal, err, "reading the recorded request")), nil, false
	}
	req.ExecutionID = id
	return s.runRequest(ctx, claimed, req)
}

// runRequest runs req under claimed, the claim on its run (see
// runClaimed).
func (s *Service) runRequest(ctx context.Context, claimed *suspend.Run, req execution.Request) (resp *execution.Response, cause error, lost bool) {
	id := claimed.ID
	if claimed.Takeovers > 0 {
		if resp, stop := s.takenOver(ctx, claimed, &req); stop {
			return resp, nil, false
		}
	}
	req.Checkpoints = &checkpointer{store: s.opts.Store, id: id, runner: claimed.Runner}
	rctx, done := s.track(ctx, id, claimed.Principal)
	rctx, lose := context.WithCancelCause(rctx)
	stopWatch := s.watch(rctx, id, claimed.Runner, lose)
	resp = s.Executor.Execute(rctx, req)
	lost = stopWatch()
	cause = context.Cause(rctx)
	lose(nil)
	done()
	// A cancel that reached the run stopped it (cause); one that came
	// after its last step found nothing left to stop, and the document
	// says how the run ended: a cancel is never recorded for a run that
	// went on.
	return resp, cause, lost
}

// cancelLive stops id if it runs in this process, and reports whether it
// did.
func (s *Service) cancelLive(id string) bool {
	s.mu.Lock()
	l := s.live[id]
	if l != nil {
		l.requested = true
	}
	s.mu.Unlock()
	if l == nil {
		return false
	}
	l.cancel(cancelled(id))
	return true
}

// outcome is the run state resp ends in, and how long its record is kept
// (zero: the store's TTL). cause is why the run's context ended, if it did:
// a cancel makes a failed run cancelled, a stop of this process (another
// fault) makes it failed; a run that got to its end anyway completed.
func outcome(resp *execution.Response, cause error) (suspend.State, time.Time) {
	var fe *fault.Error
	switch {
	case resp.Suspended():
		return suspend.Suspended, resp.ExpiresAt
	case !resp.OK && errors.As(cause, &fe) && fe.Code == fault.Cancelled:
		resp.Status, resp.Error = execution.StatusCancelled, fe
		return suspend.RunCancelled, time.Time{}
	case !resp.OK && errors.As(cause, &fe):
		resp.Status, resp.Error = execution.StatusFailed, fe
		return suspend.Failed, time.Time{}
	case resp.Status == execution.StatusCancelled:
		return suspend.RunCancelled, time.Time{}
	case resp.Status == execution.StatusFailed:
		// Failed before it ran (a run taken over that may not go on).
		return suspend.Failed, time.Time{}
	}
	resp.Status = execution.StatusCompleted
	return suspend.RunCompleted, time.Time{}
}

// Status implements execution.Executor: the document of an asynchronous
// execution as it stands, for its owner or an approver (NOT_FOUND for
// anyone else, as for an unknown id, so ids cannot be probed); a
// synchronous one running in this process reads as running.
func (s *Service) Status(ctx context.Context, id, principal string) (*execution.Response, *fault.Error) {
	run, ferr := s.load(ctx, id, principal)
	if ferr != nil && ferr.Code == fault.NotFound {
		if l := s.liveRun(id); l != nil && s.opts.Policy.MayAccess(principal, l.principal) {
			return &execution.Response{ExecutionID: id, Status: execution.StatusRunning, Logs: []trace.LogEntry{}, CancelRequested: l.requested}, nil
		}
		return s.Executor.Status(ctx, id, principal)
	}
	if ferr != nil {
		return nil, ferr
	}
	if !s.opts.Policy.MayAccess(principal, run.Principal) {
		return nil, notFound(id)
	}
	return s.document(ctx, run), nil
}

// liveRun is a copy of id's entry if it runs in this process, nil
// otherwise.
func (s *Service) liveRun(id string) *liveRun {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.live[id]; l != nil {
		c := *l
		return &c
	}
	return nil
}

func notFound(id string) *fault.Error {
	return fault.New(fault.NotFound, "no execution %q", id)
}

// load reads id's run for principal: NOT_FOUND (also without a store, and
// for an expired run principal may not access), EXPIRED, or a retryable
// UNAVAILABLE.
func (s *Service) load(ctx context.Context, id, principal string) (*suspend.Run, *fault.Error) {
	if s.opts.Store == nil {
		return nil, notFound(id)
	}
	run, err := s.opts.Store.Load(ctx, id)
	var ee *suspend.ExpiredError
	switch {
	case errors.Is(err, suspend.ErrNotFound), errors.As(err, &ee) && !s.opts.Policy.MayAccess(principal, ee.Principal):
		return nil, notFound(id)
	case errors.Is(err, suspend.ErrExpired):
		return nil, fault.Wrap(fault.Expired, err, "")
	case err != nil:
		return nil, retryable(fault.Wrap(fault.Unavailable, err, "the store of runs failed"))
	}
	return run, nil
}

// document is run's document now. A suspended one's pending calls are read
// from the suspension it waits in, so they are exactly what a decision
// applies to; once that is not waiting any more its resume is under way
// (running) or was lost (failed).
func (s *Service) document(ctx context.Context, run *suspend.Run) *execution.Response {
	id := run.ID
	var doc *execution.Response
	switch run.State {
	case suspend.RunQueued, suspend.RunRunning:
		doc = running(id, run)
	case suspend.Failed:
		doc = execution.Failed(id, lost(id, run))
		doc.Status = execution.StatusFailed
	default:
		doc = &execution.Response{}
		if err := json.Unmarshal(run.Body, doc); err != nil {
			doc = execution.Failed(id, fault.Wrap(fault.Internal, err, "reading the recorded document"))
			doc.Status = execution.StatusFailed
		}
	}
	if run.State == suspend.Suspended {
		s.refreshSuspended(ctx, doc)
	}
	switch {
	case doc.Running() || (run.State == suspend.Failed && doc.Effects == nil):
		doc.Effects = s.effects(ctx, id, !doc.Running())
	case doc.Ended() && doc.Effects != nil:
		// Read again: a rollback records on the journal what became of
		// each effect's compensation since the document was written.
		if now := s.effects(ctx, id, true); now != nil {
			doc.Effects = now
		}
	}
	doc.Rollback = execution.RollbackState(doc.Effects)
	doc.ExecutionID, doc.CreatedAt, doc.UpdatedAt = id, run.CreatedAt, run.UpdatedAt
	return doc
}

// effects are id's effects as its journal has them now (pending reads
// unknown once ended): what a run that has no document of its own yet, or
// will never have one, did to the world.
func (s *Service) effects(ctx context.Context, id string, ended bool) []execution.Effect {
	if s.opts.Journal == nil {
		return nil
	}
	entries, err := s.opts.Journal.List(ctx, id)
	if err != nil {
		s.log.WarnContext(ctx, "the journal of effects could not be read for the document", "execution_id", id, "err", err)
	}
	return journal.Effects(entries, ended)
}

// lost is the error of a failed run without a document of its own.
func lost(id string, run *suspend.Run) *fault.Error {
	if run.Body != nil {
		var doc execution.Response
		if json.Unmarshal(run.Body, &doc) == nil && doc.Error != nil {
			return doc.Error
		}
	}
	if run.FailureCode == suspend.CodeRunAbandoned {
		return abandoned(id, run)
	}
	return fault.New(fault.Internal, "execution %s failed (%s)", id, run.FailureCode)
}

// refreshSuspended brings a suspended document up to date with its
// suspension.
func (s *Service) refreshSuspended(ctx context.Context, doc *execution.Response) {
	w, ferr := s.Executor.Waiting(ctx, doc.ExecutionID)
	switch {
	case ferr == nil:
		doc.Pending, doc.ExpiresAt, doc.Approvers = w.Pending, w.ExpiresAt, w.Approvers
		return
	case ferr.Code == fault.Expired:
		doc.Status, doc.Error, doc.Pending = execution.StatusFailed, ferr, nil
		return
	case ferr.Code != fault.Conflict:
		return // the store failed: what was recorded stands
	}
	details, _ := ferr.Details.(map[string]any)
	if state, _ := details["state"].(suspend.State); state == suspend.Failed {
		code, _ := details["failure_code"].(fault.Code)
		doc.Status, doc.Pending = execution.StatusFailed, nil
		doc.Error = fault.New(fault.Unavailable, "execution %s stopped while a resume ran it (%s)", doc.ExecutionID, code)
		if code == fault.Cancelled {
			doc.Status, doc.Error = execution.StatusCancelled, cancelled(doc.ExecutionID)
		}
		return
	}
	// Claimed by a resume (or done, and its document on its way here).
	doc.Status, doc.Pending, doc.ExpiresAt, doc.Approvers = execution.StatusRunning, nil, time.Time{}, ""
}

// Rollback implements execution.Executor: an execution that runs — an
// asynchronous one queued or running, or any running in this process — is
// refused CONFLICT (to whom may see it: anyone else is told the id is
// unknown, by the executor); any other is the executor's to roll back.
func (s *Service) Rollback(ctx context.Context, rr execution.RollbackRequest) (*execution.Rollback, *fault.Error) {
	id := rr.ExecutionID
	if rr.DryRun {
		// What would run, whatever the execution is doing now.
		return s.Executor.Rollback(ctx, rr)
	}
	busy := fault.New(fault.Conflict, "execution %s is running: roll it back once it has ended (cancel it first to stop it: DELETE /executions/%s)", id, id)
	if l := s.liveRun(id); l != nil && s.opts.Policy.MayAccess(rr.Principal, l.principal) {
		return nil, busy
	}
	run, ferr := s.load(ctx, id, rr.Principal)
	switch {
	case ferr != nil && ferr.Code == fault.Unavailable:
		return nil, ferr
	case ferr == nil && s.opts.Policy.MayAccess(rr.Principal, run.Principal) && (run.State == suspend.RunQueued || run.State == suspend.RunRunning):
		return nil, busy
	}
	return s.Executor.Rollback(ctx, rr)
}

// Cancel implements execution.Executor.
func (s *Service) Cancel(ctx context.Context, cr execution.CancelRequest) (*execution.Response, *fault.Error) {
	id := cr.ExecutionID
	for range 3 {
		run, ferr := s.load(ctx, id, cr.Principal)
		if ferr != nil && ferr.Code == fault.NotFound {
			if l := s.liveRun(id); l != nil && s.opts.Policy.MayAccess(cr.Principal, l.principal) {
				s.cancelLive(id)
				return &execution.Response{ExecutionID: id, Status: execution.StatusRunning, Logs: []trace.LogEntry{}, CancelRequested: true}, nil
			}
			return s.Executor.Cancel(ctx, cr)
		}
		if ferr != nil {
			return nil, ferr
		}
		if !s.opts.Policy.MayAccess(cr.Principal, run.Principal) {
			// Answered by the path an unknown id takes, so that the two
			// cannot be told apart (the service refuses it as unknown).
			return s.Executor.Cancel(ctx, cr)
		}
		switch run.State {
		case suspend.RunQueued:
			doc := execution.Failed(id, cancelled(id))
			doc.Status, doc.Error.Message = execution.StatusCancelled, fmt.Sprintf("execution %s was cancelled before it started", id)
			if ferr := s.settle(ctx, run, suspend.RunCancelled, doc); ferr != nil {
				if ferr.Code == fault.Conflict {
					continue // claimed meanwhile: cancel it running
				}
				return nil, ferr
			}
			doc.CreatedAt, doc.UpdatedAt = run.CreatedAt, time.Now().UTC()
			return doc, nil
		case suspend.RunRunning:
			r, err := s.opts.Store.RequestCancel(ctx, id)
			if err != nil {
				return nil, retryable(fault.Wrap(fault.Unavailable, err, "the store of runs failed"))
			}
			if r.State != suspend.RunRunning {
				continue
			}
			s.cancelLive(id)
			return &execution.Response{ExecutionID: id, Status: execution.StatusRunning, Logs: []trace.LogEntry{}, CancelRequested: true,
				CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}, nil
		case suspend.Suspended:
			doc, ferr := s.Executor.Cancel(ctx, cr)
			if ferr != nil {
				return nil, ferr
			}
			if ferr := s.settle(ctx, run, suspend.RunCancelled, doc); ferr != nil {
				s.log.WarnContext(ctx, "cancelled run's document not recorded", "execution_id", id, "err", ferr)
			}
			doc.CreatedAt, doc.UpdatedAt = run.CreatedAt, time.Now().UTC()
			return doc, nil
		}
		doc := s.document(ctx, run)
		return nil, &fault.Error{Code: fault.Conflict, Details: map[string]any{"status": doc.Status},
			Message: fmt.Sprintf("execution %s has ended (%s): there is nothing to cancel", id, doc.Status)}
	}
	return nil, retryable(fault.New(fault.Unavailable, "execution %s kept changing while it was cancelled; try again", id))
}

// settle moves run, which nothing runs, to state with doc.
func (s *Service) settle(ctx context.Context, run *suspend.Run, state suspend.State, doc *execution.Response) *fault.Error {
	b, err := json.Marshal(doc)
	if err != nil {
		return fault.Wrap(fault.Internal, err, "encoding the document")
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	err = s.opts.Store.Settle(ctx, run.ID, run.Version, state, b, time.Time{})
	switch {
	case errors.Is(err, suspend.ErrConflict):
		return fault.Wrap(fault.Conflict, err, "")
	case err != nil:
		return retryable(fault.Wrap(fault.Unavailable, err, "the store of runs failed"))
	}
	return nil
}

// storedRequest is a request as a run keeps it: its JSON as a caller
// sends it, and what the host set.
type storedRequest struct {
	Request     json.RawMessage  `json:"request"`
	Principal   string           `json:"principal,omitempty"`
	Source      execution.Source `json:"source"`
	TraceHeader string           `json:"trace_header,omitempty"`
}

func encodeRequest(req execution.Request) ([]byte, error) {
	wire, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	return json.Marshal(storedRequest{Request: wire, Principal: req.Principal, Source: req.Source, TraceHeader: req.TraceHeader})
}

// decodeRequest reads a recorded request back through the one decoder,
// as it was checked when it came in, to run now (not async).
func decodeRequest(b []byte) (execution.Request, error) {
	var sr storedRequest
	if err := json.Unmarshal(b, &sr); err != nil {
		return execution.Request{}, err
	}
	req, ferr := execution.Decode(sr.Request, sr.Source)
	if ferr != nil {
		return execution.Request{}, ferr
	}
	req.Async = false
	req.Principal, req.TraceHeader = sr.Principal, sr.TraceHeader
	return req, nil
}
