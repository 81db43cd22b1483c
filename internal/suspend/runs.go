package suspend

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/pml-sandbox/pml/internal/fault"
)

// Runs of asynchronous executions. An execution started with async is
// recorded before anything runs — queued, with its request — and whatever
// runs it (a goroutine of pml serve, an asynchronous invocation of the
// execute function, a detached pml process) first claims the record:
// queued → running is a write conditioned on the version it read, as every
// change here is, so however often the start is delivered (Lambda retries
// asynchronous invocations, and may deliver one twice) one claim wins and
// the script runs once. The runner ends its claim with the execution's
// document: completed, cancelled, or suspended (its state then lives in
// the Store of suspensions, under the same id; the run record keeps the
// document callers poll). Someone cancelling a running execution sets a
// flag the runner polls; one that is queued or suspended is settled at
// once. A claim's lease is short and its runner renews it (Renew); a
// claim past its lease (the runner died) is taken over by another runner
// (Takeover), which continues the run from its last checkpoint
// (continuation.go). One that cannot be continued, or that no runner took
// over within TakeoverWindow, is failed with CodeRunAbandoned.
//
// Runs use the suspensions' storage — the same table (partition RUN#<id>
// beside SUSP#<id>) or a directory of their own — and the same protocol:
// versioned conditional writes, bodies under keys unique to the write,
// checked against a SHA-256, and TTL-bounded.

// The states of a run (Suspended and Failed are the suspensions' own).
const (
	// RunQueued: recorded with its request; nothing has claimed it.
	RunQueued State = "queued"
	// RunRunning: claimed by a runner that is running it.
	RunRunning State = "running"
	// RunCompleted: it ran to its end; the body is its document. Final.
	RunCompleted State = "completed"
	// RunCancelled: cancelled before or while it ran. Final.
	RunCancelled State = "cancelled"
)

// CodeRunAbandoned is the failure code of a run whose runner did not end
// its claim within the lease and that could not be continued (it was
// taken over MaxTakeovers times without a new checkpoint, its state grew
// past what checkpoints keep, or nothing took it over within
// TakeoverWindow): it is failed, never started again from its beginning,
// since its tool calls may already have run.
const CodeRunAbandoned fault.Code = "RUN_ABANDONED"

// Run is an asynchronous execution's record.
type Run struct {
	ID        string
	Version   int
	State     State
	Principal string
	// CreatedAt is when it was accepted; UpdatedAt when it last changed;
	// ExpiresAt when the record may go (TTL after it ended or was
	// accepted; a suspended one's, its suspension's expiry).
	CreatedAt, UpdatedAt, ExpiresAt time.Time
	// ClaimedAt, Lease and Runner describe the claim of a running one;
	// RenewedAt is when its runner last renewed the lease (zero: never).
	ClaimedAt time.Time
	RenewedAt time.Time
	Lease     time.Duration
	Runner    string
	// Takeovers counts the runners that took the run over since its last
	// checkpoint; NoContinue says why it cannot be continued, when it
	// cannot; HasCheckpoint whether it has one.
	Takeovers     int
	NoContinue    string
	HasCheckpoint bool
	// Checkpoint is its last checkpoint, as its runner kept it (Takeover
	// hands it out; nil otherwise).
	Checkpoint []byte
	// CancelRequested is set on a running one someone cancelled.
	CancelRequested bool
	// FailureCode says why a Failed run failed (CodeRunAbandoned).
	FailureCode fault.Code
	// Body is the request while queued or running, the execution's
	// document once it has one (suspended, or ended); nil for a failed
	// run.
	Body []byte
}

// Runs keeps runs. Implementations are safe for concurrent use, also by
// several processes sharing the same storage.
type Runs interface {
	// Create records r queued at version 1 with its request in r.Body;
	// ErrConflict if the id exists. It updates r as Save does.
	Create(ctx context.Context, r *Run) error
	// Keep records r, an execution that ran while its caller waited and
	// suspended, as a suspended run at version 1 with its document in
	// r.Body, kept until r.ExpiresAt: from then on it is polled, settled
	// and cancelled as an asynchronous one that suspended, so whoever
	// resumes it, its caller can read how it ended. ErrConflict if the id
	// exists. It updates r as Save does.
	Keep(ctx context.Context, r *Run) error
	// Load returns the run with its body. A running one found past its
	// lease is failed (CodeRunAbandoned) first. ErrNotFound, ErrExpired.
	Load(ctx context.Context, id string) (*Run, error)
	// Claim takes a queued run at exactly version and returns it running
	// at the next version with a fresh Runner token and its request: of
	// several claims, one wins; the others get ErrConflict (a *StateError
	// says what they found).
	Claim(ctx context.Context, id string, version int, lease time.Duration) (*Run, error)
	// Finish ends the claim runner holds: the run becomes state
	// (Suspended, RunCompleted, RunCancelled or Failed) with doc as its
	// body, kept until expires (zero: TTL from now). Cancel requests
	// made meanwhile do not stand in its way; ErrConflict when the claim
	// is not runner's any more (it was deemed abandoned).
	Finish(ctx context.Context, id, runner string, state State, doc []byte, expires time.Time) error
	// Settle moves a run that nothing runs (queued, or suspended) at
	// exactly version to state with doc as its body; ErrConflict when it
	// is not at that version, or is running.
	Settle(ctx context.Context, id string, version int, state State, doc []byte, expires time.Time) error
	// RequestCancel sets CancelRequested on a running run and returns it
	// (without its body); a run in any other state is returned unchanged
	// for the caller to settle.
	RequestCancel(ctx context.Context, id string) (*Run, error)
	// CancelRequested reports whether someone asked the run to stop: what
	// a runner polls (the record alone, never its body).
	CancelRequested(ctx context.Context, id string) (bool, error)
	// Renew extends the lease of the claim runner holds to lease from
	// now (the heartbeat), and reports whether someone asked the run to
	// stop; ErrConflict when the claim is not runner's any more.
	Renew(ctx context.Context, id, runner string, lease time.Duration) (cancelRequested bool, err error)
	// Checkpoint replaces the run's checkpoint with blob, for the claim
	// runner holds (it renews the lease too); ErrConflict when the claim
	// is not runner's any more. Once it returns, a runner that takes the
	// run over continues from blob.
	Checkpoint(ctx context.Context, id, runner string, blob []byte) error
	// DropCheckpoint records that the run cannot be continued (why), and
	// drops its checkpoint: a runner that dies now leaves it failed.
	DropCheckpoint(ctx context.Context, id, runner, why string) error
	// Takeover claims a running run whose lease has lapsed, at exactly
	// version, for a new runner: it returns it with a fresh Runner, its
	// request and its last checkpoint. Of several takeovers one wins; a
	// run that cannot be continued is failed (CodeRunAbandoned) instead,
	// and the caller gets a conflict finding it failed.
	Takeover(ctx context.Context, id string, version int, lease time.Duration) (*Run, error)
	// Lapsed lists running runs whose lease has lapsed, and queued runs
	// nothing started within StrandedAfter (at most limit in all), for a
	// sweeper to launch again.
	Lapsed(ctx context.Context, limit int) ([]*Run, error)
}

// NewFileRuns returns a Runs store in dir, a directory of its own (not a
// Store's: both kinds are named by execution id), as NewFile keeps
// suspensions.
func NewFileRuns(dir string, opts Options) Runs {
	return &runCore{c: newCore(&fileBackend{dir: dir}, opts)}
}

// NewDynamoRuns returns a Runs store in the suspensions' table, partition
// RUN#<id>: sk meta and chunk#… as a suspension's, with the same actions
// (suspend.DynamoAPI).
func NewDynamoRuns(db DynamoAPI, table string, opts Options) Runs {
	return &runCore{c: newCore(&dynamoBackend{db: db, table: table, prefix: runPrefix}, opts)}
}

type runCore struct{ c *core }

func (m *meta) run() *Run {
	r := &Run{ID: m.ID, Version: m.Version, State: m.State, Principal: m.Principal, CreatedAt: m.CreatedAt, UpdatedAt: m.UpdatedAt,
		ExpiresAt: m.ExpiresAt, Lease: m.lease(), Runner: m.Runner, CancelRequested: m.CancelRequested, FailureCode: m.FailureCode,
		Takeovers: m.Takeovers, NoContinue: m.NoContinue, HasCheckpoint: m.Checkpoint != nil}
	if m.ClaimedAt != nil {
		r.ClaimedAt = *m.ClaimedAt
	}
	if m.RenewedAt != nil {
		r.RenewedAt = *m.RenewedAt
	}
	return r
}

// Create implements Runs.
func (rc *runCore) Create(ctx context.Context, r *Run) error {
	c := rc.c
	if !validID(r.ID) {
		return fmt.Errorf("suspend: run id %q: %w", r.ID, ErrInvalid)
	}
	if len(r.Body) == 0 {
		return fmt.Errorf("suspend: run %s has no request: %w", r.ID, ErrInvalid)
	}
	now := c.now()
	next := &meta{ID: r.ID, Version: 1, State: RunQueued, Principal: r.Principal, CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(c.opts.TTL)}
	next.RunKey = waitKey(next.ExpiresAt, r.ID)
	ref, err := c.writeChecked(ctx, r.ID, 1, r.Body, next.ExpiresAt)
	if err != nil {
		return fmt.Errorf("suspend: writing run %s: %w", r.ID, err)
	}
	next.Body = ref
	if err := c.b.put(ctx, next, 0); errors.Is(err, errStale) {
		_ = c.b.deleteBody(ctx, r.ID, ref)
		return fmt.Errorf("suspend: run %s exists: %w", r.ID, ErrConflict)
	} else if err != nil {
		return fmt.Errorf("suspend: recording run %s: %w", r.ID, err)
	}
	// Listed from the start: a queued run whose launcher died with it
	// (a pml serve killed) is started by a sweeper.
	rc.markRunning(ctx, next)
	if sw, ok := c.b.(sweeper); ok {
		sw.sweep(ctx, now)
	}
	*r = *next.run()
	r.Body = nil
	return nil
}

// Keep implements Runs.
func (rc *runCore) Keep(ctx context.Context, r *Run) error {
	c := rc.c
	if !validID(r.ID) {
		return fmt.Errorf("suspend: run id %q: %w", r.ID, ErrInvalid)
	}
	if len(r.Body) == 0 {
		return fmt.Errorf("suspend: run %s has no document: %w", r.ID, ErrInvalid)
	}
	now := c.now()
	expires := r.ExpiresAt
	if !expires.After(now) {
		expires = now.Add(c.opts.TTL)
	}
	next := &meta{ID: r.ID, Version: 1, State: Suspended, Principal: r.Principal, CreatedAt: now, UpdatedAt: now, ExpiresAt: expires}
	ref, err := c.writeChecked(ctx, r.ID, 1, r.Body, next.ExpiresAt)
	if err != nil {
		return fmt.Errorf("suspend: writing run %s: %w", r.ID, err)
	}
	next.Body = ref
	if err := c.b.put(ctx, next, 0); errors.Is(err, errStale) {
		_ = c.b.deleteBody(ctx, r.ID, ref)
		return fmt.Errorf("suspend: run %s exists: %w", r.ID, ErrConflict)
	} else if err != nil {
		return fmt.Errorf("suspend: recording run %s: %w", r.ID, err)
	}
	*r = *next.run()
	r.Body = nil
	return nil
}

// abandonRun fails m, a claim past its lease that will not be continued;
// errStale when m moved on.
func (rc *runCore) abandonRun(ctx context.Context, m *meta, now time.Time) (*meta, error) {
	return rc.c.failClaim(ctx, m, now, CodeRunAbandoned, maxTime(m.ExpiresAt, now.Add(rc.c.opts.TTL)))
}

// current reads id's record, failing first a lapsed claim that will not
// be continued (runAbandoned).
func (rc *runCore) current(ctx context.Context, id string) (*meta, error) {
	for range maxAttempts {
		m, err := rc.c.getMeta(ctx, id)
		if err != nil {
			return nil, err
		}
		now := rc.c.now()
		if !m.runAbandoned(now) {
			return m, nil
		}
		if m, err = rc.abandonRun(ctx, m, now); err == nil {
			return m, nil
		} else if !errors.Is(err, errStale) {
			return nil, fmt.Errorf("suspend: failing abandoned run %s: %w", id, err)
		}
	}
	return nil, fmt.Errorf("suspend: reading run %s: it kept changing: %w", id, ErrConflict)
}

// Load implements Runs.
func (rc *runCore) Load(ctx context.Context, id string) (*Run, error) {
	gone := 0
	for range maxAttempts {
		m, err := rc.current(ctx, id)
		if err != nil {
			return nil, err
		}
		if m.State != RunRunning && m.expired(rc.c.now()) {
			return nil, expired(m.Principal, fmt.Errorf("suspend: run %s expired at %s: %w", id, m.ExpiresAt.Format(time.RFC3339), ErrExpired))
		}
		b, err := rc.c.readChecked(ctx, m)
		if errors.Is(err, errBodyGone) {
			if err := bodyGone(m, &gone); err != nil {
				return nil, err
			}
			continue
		} else if err != nil {
			return nil, fmt.Errorf("suspend: loading run %s: %w", id, err)
		}
		r := m.run()
		r.Body = b
		return r, nil
	}
	return nil, fmt.Errorf("suspend: loading run %s: it kept changing: %w", id, ErrConflict)
}

// Claim implements Runs.
func (rc *runCore) Claim(ctx context.Context, id string, version int, lease time.Duration) (*Run, error) {
	c := rc.c
	gone := 0
	for range maxAttempts {
		m, err := rc.current(ctx, id)
		if err != nil {
			return nil, err
		}
		now := c.now()
		if m.State != RunQueued || m.Version != version {
			return nil, fmt.Errorf("suspend: claiming run %s at version %d: %w", id, version, m.conflict())
		}
		if m.expired(now) {
			return nil, fmt.Errorf("suspend: run %s expired at %s: %w", id, m.ExpiresAt.Format(time.RFC3339), ErrExpired)
		}
		// The request is read before the claim: a claim that succeeds
		// hands out what it claimed.
		b, err := rc.c.readChecked(ctx, m)
		if errors.Is(err, errBodyGone) {
			if err := bodyGone(m, &gone); err != nil {
				return nil, err
			}
			continue
		} else if err != nil {
			return nil, fmt.Errorf("suspend: claiming run %s: %w", id, err)
		}
		next := *m
		next.Version++
		next.State = RunRunning
		next.ClaimedAt = &now
		next.UpdatedAt = now
		next.LeaseMS = lease.Milliseconds()
		next.Runner = rand.Text()
		next.ExpiresAt = maxTime(m.ExpiresAt, now.Add(lease))
		unlisted := next.RunKey == ""
		if unlisted {
			next.RunKey = waitKey(next.ExpiresAt, id)
		}
		if err := c.b.put(ctx, &next, m.Version); errors.Is(err, errStale) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("suspend: claiming run %s: %w", id, err)
		}
		if unlisted {
			rc.markRunning(ctx, &next)
		}
		r := next.run()
		r.Body = b
		return r, nil
	}
	return nil, fmt.Errorf("suspend: claiming run %s: it kept changing: %w", id, ErrConflict)
}

// checkRunEnd refuses a state a run cannot end a claim or settle in.
func checkRunEnd(id string, state State) error {
	switch state {
	case Suspended, RunCompleted, RunCancelled, Failed:
		return nil
	}
	return fmt.Errorf("suspend: run %s cannot become %q: %w", id, state, ErrInvalid)
}

// moveRun writes m's successor in state with doc, conditioned on m's
// version; errStale when m moved on (its new body is deleted then).
func (rc *runCore) moveRun(ctx context.Context, m *meta, state State, doc []byte, expires time.Time) error {
	c := rc.c
	now := c.now()
	if expires.IsZero() {
		expires = now.Add(c.opts.TTL)
	}
	next := *m
	next.Version++
	next.State = state
	next.UpdatedAt = now
	next.ExpiresAt = expires
	next.Body, next.Checkpoint = nil, nil
	if state != Failed {
		next.FailureCode = ""
	}
	if len(doc) > 0 {
		ref, err := rc.c.writeChecked(ctx, m.ID, next.Version, doc, expires)
		if err != nil {
			return fmt.Errorf("suspend: writing run %s: %w", m.ID, err)
		}
		next.Body = ref
	}
	if err := c.b.put(ctx, &next, m.Version); err != nil {
		if next.Body != nil {
			_ = c.b.deleteBody(ctx, m.ID, next.Body)
		}
		return err
	}
	for _, b := range []*bodyRef{m.Body, m.Checkpoint} {
		if b != nil {
			_ = c.b.deleteBody(ctx, m.ID, b)
		}
	}
	if h, ok := runHintFor(m); ok {
		_ = c.b.unmarkWaiting(ctx, h)
	}
	return nil
}

// Finish implements Runs.
func (rc *runCore) Finish(ctx context.Context, id, runner string, state State, doc []byte, expires time.Time) error {
	if err := checkRunEnd(id, state); err != nil {
		return err
	}
	for range maxAttempts {
		m, err := rc.current(ctx, id)
		if err != nil {
			return err
		}
		if m.State != RunRunning || m.Runner != runner {
			return fmt.Errorf("suspend: ending run %s: %w", id, m.conflict())
		}
		if err := rc.moveRun(ctx, m, state, doc, expires); errors.Is(err, errStale) {
			continue // a cancel request moved it on: read it again
		} else if err != nil {
			return fmt.Errorf("suspend: ending run %s: %w", id, err)
		}
		return nil
	}
	return fmt.Errorf("suspend: ending run %s: it kept changing: %w", id, ErrConflict)
}

// Settle implements Runs.
func (rc *runCore) Settle(ctx context.Context, id string, version int, state State, doc []byte, expires time.Time) error {
	if err := checkRunEnd(id, state); err != nil {
		return err
	}
	m, err := rc.current(ctx, id)
	if err != nil {
		return err
	}
	if m.Version != version || m.State == RunRunning {
		return fmt.Errorf("suspend: settling run %s at version %d: %w", id, version, m.conflict())
	}
	if err := rc.moveRun(ctx, m, state, doc, expires); errors.Is(err, errStale) {
		return fmt.Errorf("suspend: settling run %s at version %d: someone else changed it: %w", id, version, ErrConflict)
	} else if err != nil {
		return fmt.Errorf("suspend: settling run %s: %w", id, err)
	}
	return nil
}

// RequestCancel implements Runs.
func (rc *runCore) RequestCancel(ctx context.Context, id string) (*Run, error) {
	for range maxAttempts {
		m, err := rc.current(ctx, id)
		if err != nil {
			return nil, err
		}
		if m.State != RunRunning || m.CancelRequested {
			return m.run(), nil
		}
		next := *m
		next.Version++
		next.CancelRequested = true
		next.UpdatedAt = rc.c.now()
		if err := rc.c.b.put(ctx, &next, m.Version); errors.Is(err, errStale) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("suspend: cancelling run %s: %w", id, err)
		}
		return next.run(), nil
	}
	return nil, fmt.Errorf("suspend: cancelling run %s: it kept changing: %w", id, ErrConflict)
}

// CancelRequested implements Runs.
func (rc *runCore) CancelRequested(ctx context.Context, id string) (bool, error) {
	m, err := rc.c.getMeta(ctx, id)
	if err != nil {
		return false, err
	}
	return m.CancelRequested, nil
}
