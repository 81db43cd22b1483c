package suspend

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/pml-sandbox/pml/internal/fault"
)

// Quotas: what one principal may keep in a store — sessions, or suspended
// executions — in records and in bytes of saved state, so that no caller
// fills the store for everyone (a session lives up to a day idle, a
// suspension waits up to its TTL).
//
// Each principal has a ledger in the store beside its records: the ids it
// holds, each with the size of its saved state and when it stops counting
// (its expiry and the grace a claim may add). A record that adds to what
// the principal holds (a new one, a larger state) is written only after
// the ledger took it, with a write conditioned on the ledger's version, as
// every record's is: the count is the one every process and container
// sees, never a process's own. A record finished, deleted or failed
// leaves the ledger; one that expires stops counting at its expiry; and
// before a refusal the ledger is checked against the records themselves,
// so that an entry whose write never happened (a crash between the two)
// holds nothing back.

// Quota bounds what one principal keeps in a store. Zero fields take the
// store's defaults (Options.Quota).
type Quota struct {
	// Count is how many records one principal may keep.
	Count int
	// Bytes is how many bytes of saved state they may hold in all.
	Bytes int64
}

// The default quotas, sized for a person's agent: a handful of sessions
// (each at most executor.DefaultSessionMaxBytes, 16 MiB, of state), and
// enough suspended executions for an agent whose loop parks a call per
// item while its person is away.
const (
	DefaultSessionsPerPrincipal       = 8
	DefaultSessionBytesPerPrincipal   = 64 << 20
	DefaultSuspendedPerPrincipal      = 50
	DefaultSuspendedBytesPerPrincipal = 128 << 20
)

// quotaKind names what a store's quota counts, for its defaults and its
// refusals.
type quotaKind struct {
	def                   Quota
	countLimit, byteLimit string
	what, countEnv, bytes string
	free                  string
}

var (
	sessionQuota = quotaKind{def: Quota{DefaultSessionsPerPrincipal, DefaultSessionBytesPerPrincipal},
		countLimit: fault.LimitSessions, byteLimit: fault.LimitSessionBytes, what: "sessions",
		countEnv: "PML_SESSIONS_PER_PRINCIPAL", bytes: "PML_SESSION_BYTES_PER_PRINCIPAL",
		free: "end one (DELETE /sessions/ID, end_session, pml session rm ID) or let one expire"}
	suspendedQuota = quotaKind{def: Quota{DefaultSuspendedPerPrincipal, DefaultSuspendedBytesPerPrincipal},
		countLimit: fault.LimitSuspended, byteLimit: fault.LimitSuspendedBytes, what: "suspended executions",
		countEnv: "PML_SUSPENDED_PER_PRINCIPAL", bytes: "PML_SUSPENDED_BYTES_PER_PRINCIPAL",
		free: "have their calls decided, cancel one (DELETE /executions/ID) or let one expire"}
)

// orDefault is q with its zero fields at k's defaults.
func (k quotaKind) orDefault(q Quota) Quota {
	if q.Count <= 0 {
		q.Count = k.def.Count
	}
	if q.Bytes <= 0 {
		q.Bytes = k.def.Bytes
	}
	return q
}

// ledger is what one principal holds in a store, by record id.
type ledger struct {
	Version int                `json:"version" dynamodbav:"version"`
	Held    map[string]holding `json:"held" dynamodbav:"held"`
}

// holding is one record in a ledger: the bytes of its saved state, until
// when it counts, and since when (epoch seconds).
type holding struct {
	Bytes int64 `json:"b" dynamodbav:"b"`
	Until int64 `json:"u" dynamodbav:"u"`
	Since int64 `json:"s" dynamodbav:"s"`
}

// writeWindow is how long a ledger entry may stand before its record is
// written (a large state takes a while to store): younger, an entry whose
// record is not there yet still counts; older, it holds nothing back.
const writeWindow = 5 * time.Minute

// ledgerBackend is what a backend adds for quotas.
type ledgerBackend interface {
	// getLedger returns principal's ledger (empty at version 0 when it
	// has none).
	getLedger(ctx context.Context, principal string) (*ledger, error)
	// putLedger writes l if the stored ledger is at version prev (0: if
	// there is none), errStale otherwise; expires is when the whole
	// ledger may go (its last holding's end).
	putLedger(ctx context.Context, principal string, l *ledger, prev int, expires time.Time) error
}

// ledgerAttempts bounds the writes of a ledger that others change at the
// same time (one principal's executions ending at once).
const ledgerAttempts = 16

// hold records that principal keeps id, of size bytes, until until, if
// the quota lets it: a change that adds nothing (a smaller or equal state)
// is never refused. A refusal is a LIMIT_EXCEEDED *fault.Error.
func (c *core) hold(ctx context.Context, k quotaKind, principal, id string, bytes int64, until time.Time) error {
	lb, ok := c.b.(ledgerBackend)
	if !ok {
		return nil
	}
	q := k.orDefault(c.opts.Quota)
	for try := range ledgerAttempts {
		l, err := lb.getLedger(ctx, principal)
		if err != nil {
			return fmt.Errorf("reading the quota of %s: %w", k.what, err)
		}
		prev := l.Version
		now := c.now()
		prune(l, now)
		old, had := l.Held[id]
		next := holding{Bytes: bytes, Until: until.Add(ttlGrace).Unix(), Since: now.Unix()}
		if had {
			next.Since = old.Since
		}
		if !had || bytes > old.Bytes {
			if err := c.withinQuota(ctx, k, q, l, principal, id, next, had); err != nil {
				return err
			}
		}
		l.Held[id] = next
		l.Version = prev + 1
		err = lb.putLedger(ctx, principal, l, prev, ledgerEnd(l))
		if err == nil {
			return nil
		}
		if !errors.Is(err, errStale) {
			// A write whose answer was lost may have happened: it did
			// if the ledger is the one written.
			if got, gerr := lb.getLedger(ctx, principal); gerr == nil && got.Version == l.Version && got.Held[id] == next {
				return nil
			}
			return fmt.Errorf("writing the quota of %s: %w", k.what, err)
		}
		backoff(ctx, try)
	}
	return fmt.Errorf("the quota of %s kept changing: %w", k.what, ErrConflict)
}

// release removes id from principal's ledger (best effort: an entry left
// behind stops counting at its end, and is dropped when the ledger is
// checked before a refusal).
func (c *core) release(ctx context.Context, principal, id string) {
	lb, ok := c.b.(ledgerBackend)
	if !ok {
		return
	}
	for try := range ledgerAttempts {
		l, err := lb.getLedger(ctx, principal)
		if err != nil {
			return
		}
		if _, held := l.Held[id]; !held {
			return
		}
		prev := l.Version
		prune(l, c.now())
		delete(l.Held, id)
		l.Version = prev + 1
		if err := lb.putLedger(ctx, principal, l, prev, ledgerEnd(l)); !errors.Is(err, errStale) {
			return
		}
		backoff(ctx, try)
	}
}

// withinQuota checks that l with id holding next stays within q; past it,
// it checks each other entry against its record (dropping what no longer
// holds anything) and checks again. had tells that id was held already.
func (c *core) withinQuota(ctx context.Context, k quotaKind, q Quota, l *ledger, principal, id string, next holding, had bool) error {
	over := func() error {
		count, total := 0, next.Bytes
		for other, h := range l.Held {
			if other != id {
				count++
				total += h.Bytes
			}
		}
		switch {
		case !had && count+1 > q.Count:
			return fault.Limitf(k.countLimit, "this principal keeps %d %s already, the most one principal may (%s=%d): %s", count, k.what, k.countEnv, q.Count, k.free)
		case total > q.Bytes:
			return fault.Limitf(k.byteLimit, "this principal's %s would hold %d bytes of saved state, more than one principal may (%s=%d): %s", k.what, total, k.bytes, q.Bytes, k.free)
		}
		return nil
	}
	if over() == nil {
		return nil
	}
	now := c.now()
	for other, h := range l.Held {
		if other == id {
			continue
		}
		m, err := c.b.get(ctx, other)
		if err != nil {
			return fmt.Errorf("checking the quota of %s: %w", k.what, err)
		}
		switch {
		case m == nil && now.Unix()-h.Since < int64(writeWindow/time.Second):
			// Its record may be on its way.
		case m == nil || m.Principal != principal || m.State == Done || m.State == Failed || m.State != Resuming && !m.held(now) && m.expired(now):
			delete(l.Held, other)
		case m.Body != nil:
			h := l.Held[other]
			h.Bytes = int64(m.Body.Size)
			l.Held[other] = h
		}
	}
	return over()
}

// prune drops the holdings past their end.
func prune(l *ledger, now time.Time) {
	if l.Held == nil {
		l.Held = map[string]holding{}
	}
	for id, h := range l.Held {
		if h.Until <= now.Unix() {
			delete(l.Held, id)
		}
	}
}

// ledgerEnd is when the last of l's holdings ends.
func ledgerEnd(l *ledger) time.Time {
	var end int64
	for _, h := range l.Held {
		end = max(end, h.Until)
	}
	return time.Unix(end, 0)
}

// backoff waits a little, more with each try, before a ledger is read
// again after a lost race.
func backoff(ctx context.Context, try int) {
	t := time.NewTimer(rand.N(min(2*time.Millisecond<<try, 200*time.Millisecond)))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
