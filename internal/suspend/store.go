package suspend

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/pml-sandbox/pml/internal/fault"
)

// meta is a record without its suspension: what the stores keep as the
// record itself (a JSON file, a DynamoDB item), small and bounded. The
// suspension lives in a body (see blob.go) that meta points at.
type meta struct {
	ID          string     `json:"id" dynamodbav:"id"`
	Version     int        `json:"version" dynamodbav:"version"`
	State       State      `json:"state" dynamodbav:"state"`
	Principal   string     `json:"principal,omitempty" dynamodbav:"principal,omitempty"`
	Bridge      []byte     `json:"bridge,omitempty" dynamodbav:"bridge,omitempty"` // bytes, not RawMessage: kept byte for byte
	CreatedAt   time.Time  `json:"created_at" dynamodbav:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at" dynamodbav:"updated_at"`
	ExpiresAt   time.Time  `json:"expires_at" dynamodbav:"expires_at"`
	ClaimedAt   *time.Time `json:"claimed_at,omitempty" dynamodbav:"claimed_at,omitempty"`
	LeaseMS     int64      `json:"lease_ms" dynamodbav:"lease_ms"`
	FailureCode fault.Code `json:"failure_code,omitempty" dynamodbav:"failure_code,omitempty"`
	// GuestHash repeats the suspension's guest build, so a record can be
	// told incompatible without reading its body.
	GuestHash string   `json:"guest_hash,omitempty" dynamodbav:"guest_hash,omitempty"`
	Body      *bodyRef `json:"body,omitempty" dynamodbav:"body,omitempty"`
	// WaitKey is the key of the hint that lists a suspended record under
	// its principal (waiting.go), written with it.
	WaitKey string `json:"wait_key,omitempty" dynamodbav:"wait_key,omitempty"`
	// A run's (runs.go): the token of the claim that runs it, and whether
	// someone asked it to stop.
	Runner          string `json:"runner,omitempty" dynamodbav:"runner,omitempty"`
	CancelRequested bool   `json:"cancel_requested,omitempty" dynamodbav:"cancel_requested,omitempty"`
	// A session's (sessions.go): how long it lives idle. Runner names the
	// execution that holds it.
	IdleMS int64 `json:"idle_ms,omitempty" dynamodbav:"idle_ms,omitempty"`
	// A running run's continuation (continuation.go): its last
	// checkpoint, when its runner last renewed its lease, the takeovers
	// since its last checkpoint, why it cannot be continued (when it
	// cannot), and its hint in the index of running runs.
	Checkpoint *bodyRef   `json:"checkpoint,omitempty" dynamodbav:"checkpoint,omitempty"`
	RenewedAt  *time.Time `json:"renewed_at,omitempty" dynamodbav:"renewed_at,omitempty"`
	Takeovers  int        `json:"takeovers,omitempty" dynamodbav:"takeovers,omitempty"`
	NoContinue string     `json:"no_continue,omitempty" dynamodbav:"no_continue,omitempty"`
	RunKey     string     `json:"run_key,omitempty" dynamodbav:"run_key,omitempty"`
}

// bodyRef names a stored suspension blob. Key is unique to the write (the
// version it was written for and a random part), so a write that fails
// half way, or loses its conditional update, never mixes with the blob
// the record points at; SHA256 catches anything else.
type bodyRef struct {
	Key    string `json:"key" dynamodbav:"key"`
	Size   int    `json:"size" dynamodbav:"size"`
	Chunks int    `json:"chunks,omitempty" dynamodbav:"chunks,omitempty"`
	SHA256 string `json:"sha256" dynamodbav:"sha256"`
}

// backend is what a storage medium provides; core builds the protocol on
// it. Only put must be atomic.
type backend interface {
	// get returns id's metadata, nil when there is none.
	get(ctx context.Context, id string) (*meta, error)
	// put writes m if the stored record is at version prev (0: if there is
	// none); errStale otherwise.
	put(ctx context.Context, m *meta, prev int) error
	// writeBody stores blob under a fresh key for id's version, which
	// expires at expires.
	writeBody(ctx context.Context, id string, version int, blob []byte, expires time.Time) (*bodyRef, error)
	// readBody returns a blob writeBody stored; errBodyGone when it is
	// not there (any more).
	readBody(ctx context.Context, id string, ref *bodyRef) ([]byte, error)
	// deleteBody removes a blob. Callers ignore its error: an orphan blob
	// is garbage, never read again (DynamoDB's TTL removes it eventually).
	deleteBody(ctx context.Context, id string, ref *bodyRef) error
	// markWaiting notes in the index of what waits (waiting.go) that h's
	// record is suspended, until expires; unmarkWaiting that it is not.
	// Both are hints: a record's own state is the truth.
	markWaiting(ctx context.Context, h waitHint, expires time.Time) error
	unmarkWaiting(ctx context.Context, h waitHint) error
	// owners lists the owners the index holds, in the backend's order,
	// after the cursor after ("": from the first), at most limit, and
	// whether more may follow.
	owners(ctx context.Context, after string, limit int) ([]ownerHint, bool, error)
	// waitingOf lists owner's hints in order of their keys (the soonest
	// to expire first), after the key after, at most limit, and whether
	// more may follow.
	waitingOf(ctx context.Context, owner, after string, limit int) ([]waitHint, bool, error)
	// deleteMeta removes id's metadata, whatever its version (a session
	// deleted by its owner).
	deleteMeta(ctx context.Context, id string) error
}

var (
	// errStale is put's refusal: the record is not at the version given.
	errStale = errors.New("stale version")
	// errBodyGone is readBody's: the record moved on and its body was
	// deleted under the reader.
	errBodyGone = errors.New("body gone")
)

// ttlGrace is how long after its expiry a record may be deleted (by
// DynamoDB's TTL, by the file store's sweep). It must exceed any lease: a
// claim extends the record's expiry by up to its lease, while DynamoDB
// chunks keep the ttl they were written with.
const ttlGrace = time.Hour

// maxAttempts bounds the re-reads after a lost race; each attempt reads
// anew, and the second one normally sees the winner's version and reports
// a conflict.
const maxAttempts = 4

// core implements Store over a backend.
type core struct {
	b    backend
	opts Options
}

func newCore(b backend, opts Options) *core { return &core{b: b, opts: opts.withDefaults()} }

// now strips the monotonic reading (UTC does) so stored and compared
// times agree.
func (c *core) now() time.Time { return c.opts.Now().UTC() }

// validID keeps ids safe as file names and keys.
func validID(id string) bool {
	if id == "" || len(id) > 128 || id[0] == '.' {
		return false
	}
	for _, r := range id {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-', r == '.':
		default:
			return false
		}
	}
	return true
}

func bodyKey(version int) string { return fmt.Sprintf("%010d-%016x", version, rand.Uint64()) }

func (m *meta) lease() time.Duration { return time.Duration(m.LeaseMS) * time.Millisecond }

func (m *meta) abandoned(now time.Time) bool {
	return m.State == Resuming && m.ClaimedAt != nil && now.After(m.ClaimedAt.Add(m.lease()))
}

func (m *meta) expired(now time.Time) bool { return !now.Before(m.ExpiresAt) }

func (m *meta) conflict() error {
	return &StateError{ID: m.ID, State: m.State, Version: m.Version, FailureCode: m.FailureCode}
}

// record returns m as a Record, without its suspension.
func (m *meta) record() *Record {
	r := &Record{ID: m.ID, Version: m.Version, State: m.State, Bridge: m.Bridge, Principal: m.Principal,
		CreatedAt: m.CreatedAt, UpdatedAt: m.UpdatedAt, ExpiresAt: m.ExpiresAt, Lease: m.lease(), FailureCode: m.FailureCode}
	if m.ClaimedAt != nil {
		r.ClaimedAt = *m.ClaimedAt
	}
	return r
}

// getMeta is get with ErrNotFound.
func (c *core) getMeta(ctx context.Context, id string) (*meta, error) {
	if !validID(id) {
		return nil, fmt.Errorf("suspend: %q: %w", id, ErrNotFound)
	}
	m, err := c.b.get(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("suspend: reading %s: %w", id, err)
	}
	if m == nil {
		return nil, fmt.Errorf("suspend: %s: %w", id, ErrNotFound)
	}
	return m, nil
}

// loadBody reads and checks m's body and fills r.Suspension.
func (c *core) loadBody(ctx context.Context, m *meta, r *Record) error {
	blob, err := c.readChecked(ctx, m)
	if err != nil || blob == nil {
		return err
	}
	s, err := DecodeSuspension(blob)
	if err != nil {
		return fmt.Errorf("suspend: %s: %w", m.ID, err)
	}
	r.Suspension = s
	return nil
}

// readChecked reads m's body (nil for none) and checks it against the
// size and checksum its metadata recorded.
func (c *core) readChecked(ctx context.Context, m *meta) ([]byte, error) {
	if m.Body == nil {
		return nil, nil
	}
	blob, err := c.b.readBody(ctx, m.ID, m.Body)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(blob)
	if len(blob) != m.Body.Size || hex.EncodeToString(sum[:]) != m.Body.SHA256 {
		// A body deleted and rewritten under us reads as gone; anything
		// else is damage, and a damaged image must never run.
		return nil, fmt.Errorf("suspend: %s: the stored state is corrupt (%d bytes, want %d; checksum mismatch)", m.ID, len(blob), m.Body.Size)
	}
	return blob, nil
}

// writeChecked stores blob as id's body for version and returns its
// reference, with the checksum readChecked verifies.
func (c *core) writeChecked(ctx context.Context, id string, version int, blob []byte, expires time.Time) (*bodyRef, error) {
	ref, err := c.b.writeBody(ctx, id, version, blob, expires)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(blob)
	ref.SHA256 = hex.EncodeToString(sum[:])
	return ref, nil
}

// abandon turns m, a claim past its lease, into failed. It returns the
// new metadata, or errStale when m moved on meanwhile.
func (c *core) abandon(ctx context.Context, m *meta, now time.Time) (*meta, error) {
	next, err := c.failClaim(ctx, m, now, CodeAbandoned, m.ExpiresAt)
	if err == nil {
		c.release(ctx, m.Principal, m.ID)
	}
	return next, err
}

// failClaim records m, a claim past its lease, as failed with code, kept
// until expires, and drops its body: the suspension and the run stores
// abandon claims the same way. errStale when m moved on meanwhile.
func (c *core) failClaim(ctx context.Context, m *meta, now time.Time, code fault.Code, expires time.Time) (*meta, error) {
	next := *m
	next.Version++
	next.State = Failed
	next.FailureCode = code
	next.UpdatedAt = now
	next.ExpiresAt = expires
	next.Body, next.Checkpoint = nil, nil
	if err := c.b.put(ctx, &next, m.Version); err != nil {
		return nil, err
	}
	for _, b := range []*bodyRef{m.Body, m.Checkpoint} {
		if b != nil {
			_ = c.b.deleteBody(ctx, m.ID, b)
		}
	}
	if h, ok := hintFor(m); ok {
		_ = c.b.unmarkWaiting(ctx, h)
	}
	if h, ok := runHintFor(m); ok {
		_ = c.b.unmarkWaiting(ctx, h)
	}
	return &next, nil
}

// sweeper is a backend that must remove expired records itself (DynamoDB
// has its TTL; a directory has nothing).
type sweeper interface {
	sweep(ctx context.Context, now time.Time)
}

// Save implements Store.
func (c *core) Save(ctx context.Context, r *Record) error {
	switch {
	case !validID(r.ID):
		return fmt.Errorf("suspend: id %q: %w", r.ID, ErrInvalid)
	case r.Suspension == nil:
		return fmt.Errorf("suspend: %s has no suspension: %w", r.ID, ErrInvalid)
	case len(r.Bridge) > MaxBridgeBytes:
		return fmt.Errorf("suspend: %s: bridge data of %d bytes exceeds %d: %w", r.ID, len(r.Bridge), MaxBridgeBytes, ErrInvalid)
	case len(r.Bridge) > 0 && !json.Valid(r.Bridge):
		return fmt.Errorf("suspend: %s: bridge data is not JSON: %w", r.ID, ErrInvalid)
	}
	blob, err := EncodeSuspension(r.Suspension)
	if err != nil {
		return fmt.Errorf("suspend: %s: %w", r.ID, err)
	}
	s := r.Suspension
	now := c.now()
	lease := max(s.Limits.Timeout-s.Used, 0) + LeaseMargin
	next := &meta{ID: r.ID, Version: 1, State: Suspended, Principal: r.Principal, Bridge: bytes.Clone(r.Bridge),
		CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(c.opts.TTL), LeaseMS: lease.Milliseconds(), GuestHash: s.GuestHash}
	var prev *meta
	if r.Version != 0 {
		// A re-save: the caller must hold the claim on exactly this version.
		if prev, err = c.getMeta(ctx, r.ID); err != nil {
			return err
		}
		if prev.Principal != r.Principal {
			return fmt.Errorf("suspend: %s: %w", r.ID, ErrForbidden)
		}
		if prev.State != Resuming || prev.Version != r.Version {
			return fmt.Errorf("suspend: saving %s at version %d: %w", r.ID, r.Version, prev.conflict())
		}
		next.Version, next.CreatedAt = prev.Version+1, prev.CreatedAt
	}
	next.WaitKey = waitKey(next.ExpiresAt, r.ID)
	// The quota first: a suspension it refuses writes nothing. (The
	// ledger entry of a write that then fails holds nothing back for
	// long: it is checked against the records before any refusal.)
	if err := c.hold(ctx, suspendedQuota, r.Principal, r.ID, int64(len(blob)), next.ExpiresAt); err != nil {
		return fmt.Errorf("suspend: saving %s: %w", r.ID, err)
	}
	ref, err := c.writeChecked(ctx, r.ID, next.Version, blob, next.ExpiresAt)
	if err != nil {
		return fmt.Errorf("suspend: writing %s: %w", r.ID, err)
	}
	next.Body = ref
	if err := c.b.put(ctx, next, r.Version); errors.Is(err, errStale) {
		_ = c.b.deleteBody(ctx, r.ID, ref)
		return fmt.Errorf("suspend: saving %s at version %d: someone else changed it: %w", r.ID, r.Version, ErrConflict)
	} else if err != nil {
		// The write may have happened (a lost response): the body stays,
		// an orphan at worst, swept or expired later.
		return fmt.Errorf("suspend: saving %s: %w", r.ID, err)
	}
	if prev != nil && prev.Body != nil {
		_ = c.b.deleteBody(ctx, r.ID, prev.Body)
	}
	// Best effort: a record saved but not listed is still resumed by id,
	// and told to approvers by the suspension notice.
	if h, ok := hintFor(next); ok {
		_ = c.b.markWaiting(ctx, h, next.ExpiresAt)
	}
	if prev != nil {
		if h, ok := hintFor(prev); ok && h.Key != next.WaitKey {
			_ = c.b.unmarkWaiting(ctx, h)
		}
	}
	if sw, ok := c.b.(sweeper); ok && prev == nil {
		sw.sweep(ctx, now)
	}
	r.Version, r.State = next.Version, next.State
	r.CreatedAt, r.UpdatedAt, r.ExpiresAt, r.ClaimedAt = next.CreatedAt, next.UpdatedAt, next.ExpiresAt, time.Time{}
	r.Lease, r.FailureCode = lease, ""
	return nil
}

// bodyGone decides what a missing body means: the first time, that the
// record moved on under the reader (read it again); at the same version
// twice, that the body is lost.
func bodyGone(m *meta, seen *int) error {
	if *seen == m.Version {
		return fmt.Errorf("suspend: %s: the stored state of version %d is missing", m.ID, m.Version)
	}
	*seen = m.Version
	return nil
}

// Load implements Store.
func (c *core) Load(ctx context.Context, id string) (*Record, error) {
	gone := 0
	for range maxAttempts {
		m, err := c.getMeta(ctx, id)
		if err != nil {
			return nil, err
		}
		now := c.now()
		if m.abandoned(now) {
			if m, err = c.abandon(ctx, m, now); errors.Is(err, errStale) {
				continue
			} else if err != nil {
				return nil, fmt.Errorf("suspend: failing abandoned %s: %w", id, err)
			}
		}
		// A claim within its lease is live whatever the time: its expiry
		// was extended to cover the lease, but not past an equal instant.
		if m.State != Resuming && m.expired(now) {
			return nil, expired(m.Principal, fmt.Errorf("suspend: %s expired at %s: %w", id, m.ExpiresAt.Format(time.RFC3339), ErrExpired))
		}
		r := m.record()
		if err := c.loadBody(ctx, m, r); errors.Is(err, errBodyGone) {
			if err := bodyGone(m, &gone); err != nil {
				return nil, err
			}
			continue
		} else if err != nil {
			return nil, fmt.Errorf("suspend: loading %s: %w", id, err)
		}
		return r, nil
	}
	return nil, fmt.Errorf("suspend: loading %s: it kept changing: %w", id, ErrConflict)
}

// Claim implements Store. It reads and checks the body before it claims,
// so a claim that succeeds hands out exactly the state of the version it
// took, and a failed read leaves the record claimable.
func (c *core) Claim(ctx context.Context, id string, version int, principal string) (*Record, error) {
	gone := 0
	for range maxAttempts {
		m, err := c.getMeta(ctx, id)
		if err != nil {
			return nil, err
		}
		if m.Principal != principal {
			return nil, fmt.Errorf("suspend: claiming %s: %w", id, ErrForbidden)
		}
		now := c.now()
		if m.abandoned(now) {
			if m, err = c.abandon(ctx, m, now); errors.Is(err, errStale) {
				continue
			} else if err != nil {
				return nil, fmt.Errorf("suspend: failing abandoned %s: %w", id, err)
			}
			return nil, fmt.Errorf("suspend: claiming %s: %w", id, m.conflict())
		}
		if m.expired(now) {
			return nil, fmt.Errorf("suspend: %s expired at %s: %w", id, m.ExpiresAt.Format(time.RFC3339), ErrExpired)
		}
		if m.State != Suspended || m.Version != version {
			return nil, fmt.Errorf("suspend: claiming %s at version %d: %w", id, version, m.conflict())
		}
		r := m.record()
		if err := c.loadBody(ctx, m, r); errors.Is(err, errBodyGone) {
			if err := bodyGone(m, &gone); err != nil {
				return nil, err
			}
			continue
		} else if err != nil {
			return nil, fmt.Errorf("suspend: claiming %s: %w", id, err)
		}
		if r.Suspension == nil {
			return nil, fmt.Errorf("suspend: claiming %s: a suspended record without its state", id)
		}
		next := *m
		next.Version++
		next.State = Resuming
		next.ClaimedAt = &now
		next.UpdatedAt = now
		// The record must outlive the claim, whatever was left of its wait.
		next.ExpiresAt = maxTime(m.ExpiresAt, now.Add(m.lease()))
		if err := c.b.put(ctx, &next, m.Version); errors.Is(err, errStale) {
			continue // lost the race: the next read reports the winner
		} else if err != nil {
			return nil, fmt.Errorf("suspend: claiming %s: %w", id, err)
		}
		out := next.record()
		out.Suspension = r.Suspension
		return out, nil
	}
	return nil, fmt.Errorf("suspend: claiming %s: it kept changing: %w", id, ErrConflict)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Finish implements Store.
func (c *core) Finish(ctx context.Context, id string, version int, state State, code fault.Code) error {
	if state != Done && state != Failed {
		return fmt.Errorf("suspend: finishing %s as %q: %w", id, state, ErrInvalid)
	}
	if state == Done {
		code = ""
	}
	for range maxAttempts {
		m, err := c.getMeta(ctx, id)
		if err != nil {
			return err
		}
		if m.State != Resuming || m.Version != version {
			return fmt.Errorf("suspend: finishing %s at version %d: %w", id, version, m.conflict())
		}
		next := *m
		next.Version++
		next.State = state
		next.FailureCode = code
		next.UpdatedAt = c.now()
		next.Body = nil
		if err := c.b.put(ctx, &next, m.Version); errors.Is(err, errStale) {
			continue
		} else if err != nil {
			return fmt.Errorf("suspend: finishing %s: %w", id, err)
		}
		if m.Body != nil {
			_ = c.b.deleteBody(ctx, id, m.Body)
		}
		if h, ok := hintFor(m); ok {
			_ = c.b.unmarkWaiting(ctx, h)
		}
		c.release(ctx, m.Principal, id)
		return nil
	}
	return fmt.Errorf("suspend: finishing %s: it kept changing: %w", id, ErrConflict)
}
