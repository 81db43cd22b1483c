package runs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/journal"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/trace"
)

// Continuation. A runner's claim lasts Lease unless renewed: a heartbeat
// renews it every Lease/3 while the run lives (a conditional write keyed
// on the claim's token), and the run keeps its checkpoints with the claim
// (checkpointer). When the runner dies the heartbeat stops, the lease
// lapses, and whoever finds it so takes the run over (Run: suspend.Runs'
// Takeover, conditioned on the version it read) and continues it from its
// last checkpoint: the next delivery of the start (Lambda retries an
// asynchronous invocation that failed, a minute later), a sweeper (Sweep:
// pml serve sweeps its store at start and every SweepEvery, the deployment
// invokes the execute function with {"sweep": {}} every minute), and so
// within a minute or so of the crash. A runner whose claim was taken over
// (it only seemed dead: a long pause) finds out at its next heartbeat or
// checkpoint, both refused, and stops: it sends no effect meanwhile, since
// every effect waits for a checkpoint its claim keeps.

// DefaultLease is a claim's lease unless Options.Lease says otherwise:
// the longest a dead runner's run waits before it may be taken over.
const DefaultLease = 30 * time.Second

// DefaultSweepEvery is how often StartSweeper sweeps unless told.
const DefaultSweepEvery = 10 * time.Second

// maxSweep bounds the runs one sweep takes over.
const maxSweep = 100

// checkpointer keeps an execution's checkpoints with the claim runner
// holds on its run (execution.Checkpointer).
type checkpointer struct {
	store      suspend.Runs
	id, runner string
}

// Checkpoint implements execution.Checkpointer.
func (c *checkpointer) Checkpoint(ctx context.Context, state []byte) error {
	return claimLost(c.store.Checkpoint(ctx, c.id, c.runner, state))
}

// Uncontinuable implements execution.Checkpointer.
func (c *checkpointer) Uncontinuable(ctx context.Context, why string) error {
	return claimLost(c.store.DropCheckpoint(ctx, c.id, c.runner, why))
}

// claimLost says a conflict of the store is the claim lost
// (execution.ErrClaimLost).
func claimLost(err error) error {
	if errors.Is(err, suspend.ErrConflict) {
		return fmt.Errorf("%w: %w", execution.ErrClaimLost, err)
	}
	return err
}

// takenOver prepares req, a run just taken over, to go on from its last
// checkpoint; stop says it must not run, and resp is its document then:
// cancelled (someone asked while nothing ran it), or failed when it has no
// checkpoint and its journal shows effects that may have happened
// (impossible by construction: every effect waits for a checkpoint; it is
// never started again from its code then).
func (s *Service) takenOver(ctx context.Context, claimed *suspend.Run, req *execution.Request) (resp *execution.Response, stop bool) {
	id := claimed.ID
	if claimed.CancelRequested {
		resp = execution.Failed(id, cancelled(id))
		resp.Status = execution.StatusCancelled
		resp.Error.Message = fmt.Sprintf("execution %s was cancelled while its runner was lost; it was not continued", id)
		resp.Effects = s.effects(ctx, id, true)
		return resp, true
	}
	if claimed.Checkpoint != nil {
		req.Checkpoint = claimed.Checkpoint
		return nil, false
	}
	if ferr := s.restartable(ctx, id); ferr != nil {
		resp = execution.Failed(id, ferr)
		resp.Status = execution.StatusFailed
		resp.Effects = s.effects(ctx, id, true)
		return resp, true
	}
	// It died before its first effect: nothing it did reached the world,
	// and it starts again from its code.
	return nil, false
}

// restartable refuses to start id again from its code when its journal
// holds an effect that may have happened.
func (s *Service) restartable(ctx context.Context, id string) *fault.Error {
	if s.opts.Journal == nil {
		return nil
	}
	entries, err := s.opts.Journal.List(ctx, id)
	if err != nil {
		return retryable(fault.Wrap(fault.Unavailable, err, "the journal of effects could not be read, so the execution is not started again"))
	}
	for _, e := range entries {
		if e.Status != journal.NotSent {
			return &fault.Error{Code: fault.Unavailable, Details: map[string]any{"failure_code": suspend.CodeRunAbandoned, "call_id": e.CallID},
				Message: fmt.Sprintf("execution %s lost its runner before any checkpoint was kept, and its journal has an effect that may have happened "+
					"(call %d, %s:%s, %s): it is not started again from its code", id, e.CallID, e.Server, e.Tool, e.Status)}
		}
	}
	return nil
}

// errLostClaim is the cause a run stops with when another runner took it
// over.
var errLostClaim = &fault.Error{Code: fault.Conflict, Message: "another runner took the execution over: this one stops"}

// watch keeps the claim runner holds on id while ctx lives: it renews the
// lease every Lease/3, and polls for a cancel request every PollEvery
// (cancelling the run's context, cause CANCELLED, when it finds one). When
// the claim is lost — another runner took it over, or no renewal
// succeeded for a whole lease — it ends the run with lose. The returned
// func stops it and reports whether the claim was lost.
func (s *Service) watch(ctx context.Context, id, runner string, lose context.CancelCauseFunc) func() (lost bool) {
	ctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var lost bool
	wg.Go(func() {
		poll := time.NewTicker(s.opts.PollEvery)
		defer poll.Stop()
		beat := time.NewTicker(s.opts.Lease / 3)
		defer beat.Stop()
		renewed, asked := time.Now(), false
		for {
			var cancel bool
			var err error
			select {
			case <-ctx.Done():
				return
			case <-poll.C:
				if asked {
					continue
				}
				cancel, err = s.opts.Store.CancelRequested(ctx, id)
			case <-beat.C:
				cancel, err = s.opts.Store.Renew(ctx, id, runner, s.opts.Lease)
				switch {
				case errors.Is(err, suspend.ErrConflict), err != nil && time.Since(renewed) > s.opts.Lease:
					s.log.WarnContext(ctx, "run's claim lost", "execution_id", id, "err", err)
					lost = true
					lose(errLostClaim)
					return
				case err == nil:
					renewed = time.Now()
				}
			}
			if err != nil && ctx.Err() == nil {
				s.log.WarnContext(ctx, "run's claim not renewed, or its cancel not checked", "execution_id", id, "err", err)
			}
			if cancel && !asked {
				asked = true
				s.cancelLive(id)
			}
		}
	})
	return func() bool { stop(); wg.Wait(); return lost }
}

// Sweep takes over the runs whose runner died: each running run whose
// lease lapsed is launched again (the launcher's Run takes it over and
// continues it), and reports how many. pml serve sweeps at start and every
// few seconds (StartSweeper); the deployment's execute function on a
// schedule ({"sweep": {}}).
func (s *Service) Sweep(ctx context.Context) (int, error) {
	if s.opts.Store == nil {
		return 0, nil
	}
	lapsed, err := s.opts.Store.Lapsed(ctx, maxSweep)
	if err != nil {
		return 0, fmt.Errorf("runs: sweeping: %w", err)
	}
	launch := s.opts.Launch
	if launch == nil {
		launch = s.launchHere
	}
	n := 0
	for _, r := range lapsed {
		if err := launch(ctx, r.ID); err != nil {
			s.log.ErrorContext(ctx, "lapsed run not launched", "execution_id", r.ID, "err", err)
			continue
		}
		s.log.InfoContext(ctx, "lapsed run launched to be taken over", "execution_id", r.ID)
		n++
	}
	return n, nil
}

// StartSweeper sweeps at once and then every every (DefaultSweepEvery
// when 0) until Close: a restarted pml serve continues what the one
// before it ran over the same stores. Calls after the first do nothing.
func (s *Service) StartSweeper(every time.Duration) {
	if every <= 0 {
		every = DefaultSweepEvery
	}
	s.sweeps.Do(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed || s.opts.Store == nil {
			return
		}
		s.wg.Go(func() {
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				if _, err := s.Sweep(s.base); err != nil && s.base.Err() == nil {
					s.log.Warn("sweep failed", "err", err)
				}
				select {
				case <-s.base.Done():
					return
				case <-t.C:
				}
			}
		})
	})
}

// abandoned is the error of a run failed RUN_ABANDONED: why it could not
// be continued.
func abandoned(id string, run *suspend.Run) *fault.Error {
	why := fmt.Sprintf("no runner took it over within %v of its lease lapsing (nothing sweeps this store)", suspend.TakeoverWindow)
	switch {
	case run.NoContinue == "checkpoint_bytes":
		why = fmt.Sprintf("its state grew past the %d MiB a checkpoint keeps", suspend.MaxCheckpointBytes>>20)
	case run.NoContinue != "":
		why = "it was marked not to be continued (" + run.NoContinue + ")"
	case run.Takeovers >= suspend.MaxTakeovers:
		why = fmt.Sprintf("it was taken over %d times without getting further: each runner died", run.Takeovers)
	}
	return &fault.Error{Code: fault.Unavailable, Details: map[string]any{"failure_code": run.FailureCode},
		Message: fmt.Sprintf("execution %s stopped before it ended: its runner was lost (a crash, or a recycled container) and it could not be "+
			"continued, since %s; it is not run again, since its calls up to then may have run", id, why)}
}

// running is the document of a run that runs.
func running(id string, run *suspend.Run) *execution.Response {
	return &execution.Response{ExecutionID: id, Status: execution.StatusRunning, Logs: []trace.LogEntry{}, CancelRequested: run.CancelRequested}
}

// attached runs req, which its caller follows (Request.Durable), as a run
// of this process: recorded and claimed at once, checkpointed and
// heartbeaten as any, and answered to its caller when it ends. Should
// this process die meanwhile, the run is taken over and continued like an
// asynchronous one, and its caller, who has its id, reads its document.
// A run the store cannot record runs unrecorded, as before.
func (s *Service) attached(ctx context.Context, req execution.Request) *execution.Response {
	id := req.ExecutionID
	body, err := encodeRequest(req)
	run := &suspend.Run{ID: id, Principal: req.Principal, Body: body}
	if err == nil {
		err = s.opts.Store.Create(ctx, run)
	}
	var claimed *suspend.Run
	if err == nil {
		claimed, err = s.opts.Store.Claim(ctx, id, run.Version, s.opts.Lease)
		if err != nil {
			// Recorded and not claimed: a sweeper would start it. It is
			// failed instead, and nothing of it runs.
			s.log.ErrorContext(ctx, "followed run not claimed", "execution_id", id, "err", err)
			resp := execution.Failed(id, retryable(fault.Wrap(fault.Unavailable, err, "the execution could not be started")))
			resp.Status = execution.StatusFailed
			_ = s.settle(ctx, run, suspend.Failed, resp)
			return resp
		}
	}
	if err != nil {
		s.log.WarnContext(ctx, "followed run not recorded: it runs without continuation", "execution_id", id, "err", err)
		req.Durable = false
		return s.Execute(ctx, req)
	}
	resp, cause, lost := s.runRequest(ctx, claimed, req)
	if !lost {
		// The run's document says how it ended (completed, cancelled);
		// its caller's answer stays what it would have been unrecorded.
		doc := *resp
		_ = s.finish(ctx, claimed, &doc, cause)
	}
	return resp
}
