package suspend

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// SessionHolder is a Sessions store whose claims can be held for longer
// than the run that took them: an execution of a session that waits for a
// person keeps its session, which no other execution may claim, until it
// is decided (or its suspension expires, when the claim's lease ends too
// and the next execution takes the session over from its last saved
// state).
type SessionHolder interface {
	// Hold extends s's claim (s as Claim, Create or an earlier Hold left
	// it, with the state the claim handed out in s.Sandbox) to until: at
	// the next version, still running for s.Running, its lease ending and
	// the session expiring no earlier than until. The saved state is
	// written again to live as long (a stored body keeps the expiry it was
	// written with). ErrConflict when the claim is not s's any more. It
	// updates s in place, Sandbox kept.
	Hold(ctx context.Context, s *Session, until time.Time) error
}

var _ SessionHolder = (*sessionCore)(nil)

// Hold implements SessionHolder.
func (sc *sessionCore) Hold(ctx context.Context, s *Session, until time.Time) error {
	c := sc.c
	m, err := c.getMeta(ctx, s.ID)
	if err != nil {
		return err
	}
	if m.State != SessionRunning || m.Version != s.Version || m.Runner != s.Running {
		return fmt.Errorf("suspend: holding the claim of session %s at version %d: %w", s.ID, s.Version, m.conflict())
	}
	now := c.now()
	next := *m
	next.Version++
	next.UpdatedAt = now
	next.ClaimedAt = &now
	next.LeaseMS = max(until.Sub(now), 0).Milliseconds()
	next.ExpiresAt = maxTime(m.ExpiresAt, until)
	if s.Sandbox != nil {
		blob, err := encodeState(s.Sandbox)
		if err != nil {
			return fmt.Errorf("suspend: session %s: %w", s.ID, err)
		}
		if next.Body, err = c.writeChecked(ctx, s.ID, next.Version, blob, next.ExpiresAt); err != nil {
			return fmt.Errorf("suspend: writing session %s: %w", s.ID, err)
		}
	}
	if err := c.b.put(ctx, &next, m.Version); err != nil {
		if s.Sandbox != nil {
			_ = c.b.deleteBody(ctx, s.ID, next.Body)
		}
		if errors.Is(err, errStale) {
			return fmt.Errorf("suspend: holding the claim of session %s at version %d: someone else changed it: %w", s.ID, s.Version, ErrConflict)
		}
		return fmt.Errorf("suspend: holding the claim of session %s: %w", s.ID, err)
	}
	if s.Sandbox != nil && m.Body != nil {
		_ = c.b.deleteBody(ctx, s.ID, m.Body)
	}
	state := s.Sandbox
	*s = *next.session()
	s.Sandbox = state
	return nil
}
