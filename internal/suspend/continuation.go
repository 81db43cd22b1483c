package suspend

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"
)

// Continuation of runs. A runner holds its claim with a short lease it
// renews (Renew: a conditional update keyed on its claim's token, the
// heartbeat), and keeps the run's last checkpoint with it (Checkpoint: a
// body under a key unique to the write, like a suspension's, then the
// record pointing at it, conditioned on the claim). A claim whose lease
// lapsed — its runner died — is taken over (Takeover, conditioned on the
// version read) by another runner, which continues the run from that
// checkpoint. Runs that have not ended are listed in an index beside the
// records (the hints of waiting.go under the owner runningOwner), so a
// sweeper finds the lapsed ones, and the queued ones whose launcher died
// with its process (Lapsed), without reading every record.

// MaxTakeovers bounds the runners that may take a run over without it
// keeping a new checkpoint in between: a run whose continuation kills its
// runner every time is failed (CodeRunAbandoned) rather than taken over
// for ever.
const MaxTakeovers = 5

// TakeoverWindow is how long after its lease lapsed a run waits to be
// taken over: past it, nothing will (no sweeper runs over the store), and
// a reader fails it CodeRunAbandoned.
const TakeoverWindow = 10 * time.Minute

// StrandedAfter is how long a queued run waits for its launcher before a
// sweeper launches it again: a pml serve killed between recording a run
// and starting it leaves it queued, with nothing else to start it.
const StrandedAfter = 10 * time.Second

// MaxCheckpointBytes bounds a checkpoint. A run whose state outgrows it
// goes on without being continued should its runner die (DropCheckpoint).
const MaxCheckpointBytes = 4 << 20

// runningOwner is the owner the index of running runs lists them under
// ('~' is not a character of a principal the fronts make, and the runs'
// index holds nothing else).
const runningOwner = "~running"

// lastBeat is when m's runner last showed it lived: its last renewal, or
// its claim.
func (m *meta) lastBeat() time.Time {
	switch {
	case m.RenewedAt != nil:
		return *m.RenewedAt
	case m.ClaimedAt != nil:
		return *m.ClaimedAt
	}
	return m.UpdatedAt
}

// lapsed reports whether m is a running run whose lease has lapsed.
func (m *meta) lapsed(now time.Time) bool {
	return m.State == RunRunning && now.After(m.lastBeat().Add(m.lease()))
}

// continuable reports whether m may be taken over.
func (m *meta) continuable() bool {
	return m.NoContinue == "" && m.Takeovers < MaxTakeovers
}

// runAbandoned reports whether m is a lapsed claim nothing will continue:
// it cannot be, or nothing took it over within TakeoverWindow.
func (m *meta) runAbandoned(now time.Time) bool {
	return m.lapsed(now) && (!m.continuable() || now.After(m.lastBeat().Add(m.lease()+TakeoverWindow)))
}

// Lapsed reports whether r (as loaded) is running with its lease lapsed:
// its runner is gone, and Takeover may continue it.
func (r *Run) Lapsed(now time.Time) bool {
	beat := r.RenewedAt
	if beat.IsZero() {
		beat = r.ClaimedAt
	}
	return r.State == RunRunning && now.After(beat.Add(r.Lease))
}

// runHintFor is m's hint in the index of running runs, if it has one.
func runHintFor(m *meta) (waitHint, bool) {
	if m.RunKey == "" {
		return waitHint{}, false
	}
	return hintOf(runningOwner, m.RunKey)
}

// markRunning lists m, just claimed, in the index of running runs. Best
// effort: a run missing from it is still taken over by the next delivery
// of its start, or by a reader that finds it lapsed.
func (rc *runCore) markRunning(ctx context.Context, m *meta) {
	if h, ok := runHintFor(m); ok {
		_ = rc.c.b.markWaiting(ctx, h, m.ExpiresAt)
	}
}

// held reads id's record and checks that runner holds its claim.
func (rc *runCore) held(ctx context.Context, id, runner string) (*meta, error) {
	m, err := rc.c.getMeta(ctx, id)
	if err != nil {
		return nil, err
	}
	if m.State != RunRunning || m.Runner != runner {
		return nil, m.conflict()
	}
	return m, nil
}

// update applies change to the record of the claim runner holds, one
// conditional write per attempt, and returns the record as written.
func (rc *runCore) update(ctx context.Context, id, runner, what string, change func(m *meta, now time.Time)) (*meta, error) {
	for range maxAttempts {
		m, err := rc.held(ctx, id, runner)
		if err != nil {
			return nil, fmt.Errorf("suspend: %s run %s: %w", what, id, err)
		}
		now := rc.c.now()
		next := *m
		next.Version++
		next.UpdatedAt = now
		change(&next, now)
		next.ExpiresAt = maxTime(next.ExpiresAt, now.Add(next.lease()))
		if err := rc.c.b.put(ctx, &next, m.Version); errors.Is(err, errStale) {
			continue // a cancel request, or a takeover: read it again
		} else if err != nil {
			return nil, fmt.Errorf("suspend: %s run %s: %w", what, id, err)
		}
		return &next, nil
	}
	return nil, fmt.Errorf("suspend: %s run %s: it kept changing: %w", what, id, ErrConflict)
}

// Renew implements Runs.
func (rc *runCore) Renew(ctx context.Context, id, runner string, lease time.Duration) (bool, error) {
	m, err := rc.update(ctx, id, runner, "renewing", func(m *meta, now time.Time) {
		m.RenewedAt = &now
		m.LeaseMS = lease.Milliseconds()
	})
	if err != nil {
		return false, err
	}
	return m.CancelRequested, nil
}

// Checkpoint implements Runs.
func (rc *runCore) Checkpoint(ctx context.Context, id, runner string, blob []byte) error {
	if len(blob) == 0 || len(blob) > MaxCheckpointBytes {
		return fmt.Errorf("suspend: a checkpoint of %d bytes for run %s (at most %d): %w", len(blob), id, MaxCheckpointBytes, ErrInvalid)
	}
	m, err := rc.held(ctx, id, runner)
	if err != nil {
		return fmt.Errorf("suspend: checkpointing run %s: %w", id, err)
	}
	ref, err := rc.c.writeChecked(ctx, id, m.Version+1, blob, maxTime(m.ExpiresAt, rc.c.now().Add(m.lease())))
	if err != nil {
		return fmt.Errorf("suspend: writing the checkpoint of run %s: %w", id, err)
	}
	var old *bodyRef
	_, err = rc.update(ctx, id, runner, "checkpointing", func(m *meta, now time.Time) {
		old = m.Checkpoint
		m.Checkpoint, m.Takeovers, m.RenewedAt = ref, 0, &now
	})
	if err != nil {
		// The record does not point at it: garbage, deleted now or by
		// DynamoDB's TTL (a lost response may have written it after all).
		_ = rc.c.b.deleteBody(ctx, id, ref)
		return err
	}
	if old != nil {
		_ = rc.c.b.deleteBody(ctx, id, old)
	}
	return nil
}

// DropCheckpoint implements Runs.
func (rc *runCore) DropCheckpoint(ctx context.Context, id, runner, why string) error {
	if why == "" {
		why = "dropped"
	}
	var old *bodyRef
	_, err := rc.update(ctx, id, runner, "dropping the checkpoint of", func(m *meta, now time.Time) {
		old = m.Checkpoint
		m.Checkpoint, m.NoContinue, m.RenewedAt = nil, why, &now
	})
	if err == nil && old != nil {
		_ = rc.c.b.deleteBody(ctx, id, old)
	}
	return err
}

// Takeover implements Runs.
func (rc *runCore) Takeover(ctx context.Context, id string, version int, lease time.Duration) (*Run, error) {
	c := rc.c
	gone := 0
	for range maxAttempts {
		m, err := c.getMeta(ctx, id)
		if err != nil {
			return nil, err
		}
		now := c.now()
		if m.State != RunRunning || m.Version != version || !m.lapsed(now) {
			return nil, fmt.Errorf("suspend: taking over run %s at version %d: %w", id, version, m.conflict())
		}
		if m.runAbandoned(now) {
			next, err := rc.abandonRun(ctx, m, now)
			if errors.Is(err, errStale) {
				continue
			} else if err != nil {
				return nil, fmt.Errorf("suspend: failing abandoned run %s: %w", id, err)
			}
			return nil, fmt.Errorf("suspend: taking over run %s: %w", id, next.conflict())
		}
		// Read before the claim: a takeover that succeeds hands out what
		// it took over.
		req, err := c.readChecked(ctx, m)
		var ckpt []byte
		if err == nil && m.Checkpoint != nil {
			ckpt, err = c.readChecked(ctx, &meta{ID: m.ID, Body: m.Checkpoint})
		}
		if errors.Is(err, errBodyGone) {
			if err := bodyGone(m, &gone); err != nil {
				return nil, err
			}
			continue
		} else if err != nil {
			return nil, fmt.Errorf("suspend: taking over run %s: %w", id, err)
		}
		next := *m
		next.Version++
		next.ClaimedAt, next.RenewedAt, next.UpdatedAt = &now, &now, now
		next.LeaseMS = lease.Milliseconds()
		next.Runner = rand.Text()
		next.Takeovers++
		next.ExpiresAt = maxTime(m.ExpiresAt, now.Add(lease))
		if err := c.b.put(ctx, &next, m.Version); errors.Is(err, errStale) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("suspend: taking over run %s: %w", id, err)
		}
		r := next.run()
		r.Body, r.Checkpoint = req, ckpt
		return r, nil
	}
	return nil, fmt.Errorf("suspend: taking over run %s: it kept changing: %w", id, ErrConflict)
}

// Lapsed implements Runs: it reads the index of runs that have not ended
// (queued or running), and the records of its hints; a hint whose run has
// ended is removed as it is met.
func (rc *runCore) Lapsed(ctx context.Context, limit int) ([]*Run, error) {
	if limit <= 0 || limit > maxListPage {
		limit = maxListPage
	}
	now := rc.c.now()
	var out []*Run
	cursor := ""
	for budget := scanFactor*limit + scanSlack; budget > 0 && len(out) < limit; {
		hs, more, err := rc.c.b.waitingOf(ctx, runningOwner, cursor, min(limit, budget))
		if err != nil {
			return nil, fmt.Errorf("suspend: listing running runs: %w", err)
		}
		for _, h := range hs {
			budget--
			cursor = h.Key
			m, err := rc.c.b.get(ctx, h.ID)
			if err != nil {
				return nil, fmt.Errorf("suspend: reading run %s: %w", h.ID, err)
			}
			switch {
			case m == nil || (m.State != RunRunning && m.State != RunQueued) || m.RunKey != h.Key:
				_ = rc.c.b.unmarkWaiting(ctx, h)
			case len(out) == limit:
			case m.lapsed(now), m.State == RunQueued && now.Sub(m.CreatedAt) > StrandedAfter:
				out = append(out, m.run())
			}
		}
		if !more {
			break
		}
	}
	return out, nil
}
