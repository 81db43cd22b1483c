package suspend

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/pml-sandbox/pml/internal/guest"
)

// Sessions: an agent's sandbox kept between executions. After each
// execution of a session that succeeds, the sandbox's state (a
// guest.State: its memory as a compressed diff from the post-init
// snapshot, as a suspension keeps it) is saved here, and the session's next
// execution, in any process or Lambda container, continues from it.
//
// A session is idle or running. Its next execution claims it — idle →
// running, a write conditioned on the version it read, as every change
// here is — so of two executions at once one runs and the other is refused
// (a *BusyError naming the one that runs): never a fork, never a lost
// update. The execution ends its claim by saving the new state (Save) or,
// when it failed, by releasing the claim with the state as it was
// (Release): an error never changes what the session holds. A claim past
// its lease (its runner died) may be taken by the next execution, from the
// last saved state. An idle session expires its idle time after its last
// execution; Delete removes it and its state at once.
//
// Sessions use the suspensions' storage — the same table (partition
// SESS#<id>) or a directory of their own — and the same protocol: bodies
// under keys unique to the write, checked against a SHA-256, TTL-bounded.

// The states of a session.
const (
	// SessionIdle: no execution holds it; the next may claim it.
	SessionIdle State = "idle"
	// SessionRunning: an execution holds it (Session.Running).
	SessionRunning State = "running"
)

// The bounds of a session's idle time (Session.Idle).
const (
	DefaultSessionIdle = time.Hour
	MaxSessionIdle     = 24 * time.Hour
)

// Session is a session's record.
type Session struct {
	ID        string
	Version   int
	State     State
	Principal string
	// Bridge is the caller's own data about the session (its tool
	// narrowing and policy, the names it keeps, its executions): JSON, at
	// most MaxBridgeBytes, kept as is.
	Bridge json.RawMessage
	// CreatedAt is when it was created; UpdatedAt when it last changed;
	// ExpiresAt when it expires (Idle after its last execution ended; a
	// claim extends it to cover the lease).
	CreatedAt, UpdatedAt, ExpiresAt time.Time
	// Idle is how long it lives without an execution.
	Idle time.Duration
	// Running, ClaimedAt and Lease describe the claim of a running one:
	// the execution that holds it.
	Running   string
	ClaimedAt time.Time
	Lease     time.Duration
	// Size is the size of the saved state, 0 before the first execution
	// that succeeded; GuestHash the guest build that saved it.
	Size      int
	GuestHash string
	// Sandbox is the saved state, when asked for (nil when there is none
	// yet). User data: for running the next execution, never for a
	// response.
	Sandbox *guest.State
}

// Sessions keeps sessions. Implementations are safe for concurrent use,
// also by several processes sharing the same storage.
type Sessions interface {
	// Create records s, held by its first execution: running at version
	// 1, with s.Running, s.Lease, s.Idle, s.Principal and s.Bridge, and
	// no state yet. ErrConflict if the id exists. It updates s in place.
	Create(ctx context.Context, s *Session) error
	// Load returns the session, with its state when withState.
	// ErrNotFound, ErrExpired. It does not check the principal: a caller
	// must compare Session.Principal itself.
	Load(ctx context.Context, id string, withState bool) (*Session, error)
	// Claim takes the session at exactly version for execution, as
	// principal, for lease, and returns it running at the next version
	// with its state. ErrNotFound, ErrForbidden (another principal's),
	// ErrExpired; a *BusyError when another execution holds it; a
	// *StateError (ErrConflict) when it moved past version.
	Claim(ctx context.Context, id string, version int, principal, execution string, lease time.Duration) (*Session, error)
	// Save ends s's claim (s as Claim or Create returned it) with a new
	// state and s.Bridge: idle at the next version, expiring s.Idle from
	// now. ErrConflict when the claim is not s's any more.
	Save(ctx context.Context, s *Session, state *guest.State) error
	// Release ends s's claim keeping the state the claim handed out
	// (s.Sandbox), with s.Bridge: what a failed execution does.
	Release(ctx context.Context, s *Session) error
	// Delete removes the session and its state, whatever its state;
	// ErrNotFound, ErrForbidden (another principal's).
	Delete(ctx context.Context, id, principal string) error
}

// SessionLister is a Sessions that can list a principal's sessions (the
// directory store: pml session list).
type SessionLister interface {
	List(ctx context.Context, principal string) ([]*Session, error)
}

// BusyError is Claim's refusal of a session another execution holds:
// retry once it has ended. errors.Is(err, ErrConflict) holds.
type BusyError struct {
	ID, Execution string
	Version       int
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("session %s is running execution %s", e.ID, e.Execution)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *BusyError) Is(target error) bool { return target == ErrConflict }

// NewFileSessions returns a Sessions store in dir, a directory of its own
// (named by session id, as NewFile's are by execution id).
func NewFileSessions(dir string, opts Options) Sessions {
	return &sessionCore{c: newCore(&fileBackend{dir: dir}, opts), file: true}
}

// NewDynamoSessions returns a Sessions store in the suspensions' table,
// partition SESS#<id>: sk meta and chunk#… as a suspension's, with the
// same actions (suspend.DynamoAPI; a deletion is a BatchWriteItem).
func NewDynamoSessions(db DynamoAPI, table string, opts Options) Sessions {
	return &sessionCore{c: newCore(&dynamoBackend{db: db, table: table, prefix: sessionPrefix}, opts)}
}

type sessionCore struct {
	c    *core
	file bool
}

func (m *meta) session() *Session {
	s := &Session{ID: m.ID, Version: m.Version, State: m.State, Principal: m.Principal, Bridge: m.Bridge,
		CreatedAt: m.CreatedAt, UpdatedAt: m.UpdatedAt, ExpiresAt: m.ExpiresAt, Idle: time.Duration(m.IdleMS) * time.Millisecond,
		Running: m.Runner, Lease: m.lease()}
	if m.ClaimedAt != nil {
		s.ClaimedAt = *m.ClaimedAt
	}
	if m.Body != nil {
		s.Size, s.GuestHash = m.Body.Size, m.GuestHash
	}
	if s.State != SessionRunning {
		s.Running, s.ClaimedAt, s.Lease = "", time.Time{}, 0
	}
	return s
}

// held reports a claim within its lease.
func (m *meta) held(now time.Time) bool {
	return m.State == SessionRunning && m.ClaimedAt != nil && !now.After(m.ClaimedAt.Add(m.lease()))
}

func idleOf(d time.Duration) time.Duration {
	if d <= 0 {
		return DefaultSessionIdle
	}
	return min(d, MaxSessionIdle)
}

// Create implements Sessions.
func (sc *sessionCore) Create(ctx context.Context, s *Session) error {
	c := sc.c
	switch {
	case !validID(s.ID):
		return fmt.Errorf("suspend: session id %q: %w", s.ID, ErrInvalid)
	case s.Running == "":
		return fmt.Errorf("suspend: session %s: no execution holds it: %w", s.ID, ErrInvalid)
	case len(s.Bridge) > MaxBridgeBytes || len(s.Bridge) > 0 && !json.Valid(s.Bridge):
		return fmt.Errorf("suspend: session %s: bridge data is not JSON of at most %d bytes: %w", s.ID, MaxBridgeBytes, ErrInvalid)
	}
	now := c.now()
	idle := idleOf(s.Idle)
	next := &meta{ID: s.ID, Version: 1, State: SessionRunning, Principal: s.Principal, Bridge: bytes.Clone(s.Bridge),
		CreatedAt: now, UpdatedAt: now, ClaimedAt: &now, LeaseMS: s.Lease.Milliseconds(), Runner: s.Running,
		IdleMS: idle.Milliseconds()}
	next.ExpiresAt = now.Add(max(idle, s.Lease))
	if err := c.hold(ctx, sessionQuota, s.Principal, s.ID, 0, next.ExpiresAt); err != nil {
		return fmt.Errorf("suspend: creating session %s: %w", s.ID, err)
	}
	if err := c.b.put(ctx, next, 0); errors.Is(err, errStale) {
		return fmt.Errorf("suspend: session %s exists: %w", s.ID, ErrConflict)
	} else if err != nil {
		return fmt.Errorf("suspend: creating session %s: %w", s.ID, err)
	}
	if sw, ok := c.b.(sweeper); ok {
		sw.sweep(ctx, now)
	}
	*s = *next.session()
	return nil
}

// expiredSession reports m past its expiry and not held by a live claim.
func (m *meta) expiredSession(now time.Time) bool { return !m.held(now) && m.expired(now) }

// Load implements Sessions.
func (sc *sessionCore) Load(ctx context.Context, id string, withState bool) (*Session, error) {
	c := sc.c
	gone := 0
	for range maxAttempts {
		m, err := c.getMeta(ctx, id)
		if err != nil {
			return nil, err
		}
		if m.expiredSession(c.now()) {
			return nil, fmt.Errorf("suspend: session %s expired at %s: %w", id, m.ExpiresAt.Format(time.RFC3339), ErrExpired)
		}
		s := m.session()
		if !withState {
			return s, nil
		}
		st, err := sc.readState(ctx, m)
		if errors.Is(err, errBodyGone) {
			if err := bodyGone(m, &gone); err != nil {
				return nil, err
			}
			continue
		} else if err != nil {
			return nil, fmt.Errorf("suspend: loading session %s: %w", id, err)
		}
		s.Sandbox = st
		return s, nil
	}
	return nil, fmt.Errorf("suspend: loading session %s: it kept changing: %w", id, ErrConflict)
}

// readState reads and decodes m's state (nil when it has none yet).
func (sc *sessionCore) readState(ctx context.Context, m *meta) (*guest.State, error) {
	blob, err := sc.c.readChecked(ctx, m)
	if err != nil || blob == nil {
		return nil, err
	}
	st, err := decodeState(blob)
	if err != nil {
		return nil, fmt.Errorf("suspend: session %s: %w", m.ID, err)
	}
	return st, nil
}

// Claim implements Sessions.
func (sc *sessionCore) Claim(ctx context.Context, id string, version int, principal, execution string, lease time.Duration) (*Session, error) {
	c := sc.c
	if execution == "" {
		return nil, fmt.Errorf("suspend: claiming session %s for no execution: %w", id, ErrInvalid)
	}
	gone := 0
	for range maxAttempts {
		m, err := c.getMeta(ctx, id)
		if err != nil {
			return nil, err
		}
		if m.Principal != principal {
			return nil, fmt.Errorf("suspend: claiming session %s: %w", id, ErrForbidden)
		}
		now := c.now()
		switch {
		case m.held(now):
			return nil, &BusyError{ID: id, Execution: m.Runner, Version: m.Version}
		case m.expired(now):
			return nil, fmt.Errorf("suspend: session %s expired at %s: %w", id, m.ExpiresAt.Format(time.RFC3339), ErrExpired)
		case m.Version != version:
			return nil, fmt.Errorf("suspend: claiming session %s at version %d: %w", id, version, m.conflict())
		}
		// The state is read before the claim: a claim that succeeds hands
		// out the state of the version it took. A claim past its lease is
		// taken over as if the session were idle: its runner saved nothing.
		st, err := sc.readState(ctx, m)
		if errors.Is(err, errBodyGone) {
			if err := bodyGone(m, &gone); err != nil {
				return nil, err
			}
			continue
		} else if err != nil {
			return nil, fmt.Errorf("suspend: claiming session %s: %w", id, err)
		}
		next := *m
		next.Version++
		next.State = SessionRunning
		next.ClaimedAt = &now
		next.UpdatedAt = now
		next.LeaseMS = lease.Milliseconds()
		next.Runner = execution
		next.ExpiresAt = maxTime(m.ExpiresAt, now.Add(lease))
		if err := c.b.put(ctx, &next, m.Version); errors.Is(err, errStale) {
			continue // lost the race: the next read names the winner
		} else if err != nil {
			return nil, fmt.Errorf("suspend: claiming session %s: %w", id, err)
		}
		s := next.session()
		s.Sandbox = st
		return s, nil
	}
	return nil, fmt.Errorf("suspend: claiming session %s: it kept changing: %w", id, ErrConflict)
}

// end moves s's claim to idle with body (nil: the one it had).
func (sc *sessionCore) end(ctx context.Context, s *Session, state *guest.State) error {
	c := sc.c
	if len(s.Bridge) > MaxBridgeBytes || len(s.Bridge) > 0 && !json.Valid(s.Bridge) {
		return fmt.Errorf("suspend: session %s: bridge data is not JSON of at most %d bytes: %w", s.ID, MaxBridgeBytes, ErrInvalid)
	}
	m, err := c.getMeta(ctx, s.ID)
	if err != nil {
		return err
	}
	if m.State != SessionRunning || m.Version != s.Version || m.Runner != s.Running {
		return fmt.Errorf("suspend: ending the claim of session %s at version %d: %w", s.ID, s.Version, m.conflict())
	}
	now := c.now()
	next := *m
	next.Version++
	next.State = SessionIdle
	next.UpdatedAt = now
	next.ExpiresAt = now.Add(idleOf(time.Duration(m.IdleMS) * time.Millisecond))
	next.ClaimedAt, next.LeaseMS, next.Runner = nil, 0, ""
	next.Bridge = bytes.Clone(s.Bridge)
	var blob []byte
	size := int64(0)
	if m.Body != nil {
		size = int64(m.Body.Size)
	}
	if state != nil {
		if blob, err = encodeState(state); err != nil {
			return fmt.Errorf("suspend: session %s: %w", s.ID, err)
		}
		size = int64(len(blob))
	}
	// The quota first, with the session's new expiry: a state it refuses
	// is not written, and the claim stays the caller's to release with
	// the state it had.
	if err := c.hold(ctx, sessionQuota, m.Principal, s.ID, size, next.ExpiresAt); err != nil {
		return fmt.Errorf("suspend: saving session %s: %w", s.ID, err)
	}
	if state != nil {
		next.GuestHash = state.GuestHash
		if next.Body, err = c.writeChecked(ctx, s.ID, next.Version, blob, next.ExpiresAt); err != nil {
			return fmt.Errorf("suspend: writing session %s: %w", s.ID, err)
		}
	}
	if err := c.b.put(ctx, &next, m.Version); err != nil {
		if state != nil {
			_ = c.b.deleteBody(ctx, s.ID, next.Body)
		}
		if errors.Is(err, errStale) {
			return fmt.Errorf("suspend: ending the claim of session %s at version %d: someone else changed it: %w", s.ID, s.Version, ErrConflict)
		}
		return fmt.Errorf("suspend: ending the claim of session %s: %w", s.ID, err)
	}
	if state != nil && m.Body != nil {
		_ = c.b.deleteBody(ctx, s.ID, m.Body)
	}
	*s = *next.session()
	return nil
}

// Save implements Sessions.
func (sc *sessionCore) Save(ctx context.Context, s *Session, state *guest.State) error {
	if state == nil {
		return fmt.Errorf("suspend: saving session %s without a state: %w", s.ID, ErrInvalid)
	}
	return sc.end(ctx, s, state)
}

// Release implements Sessions. The state the claim handed out is written
// again, under a new key: a stored body keeps the expiry it was written
// with (DynamoDB's TTL), and the session's moves on with every execution.
func (sc *sessionCore) Release(ctx context.Context, s *Session) error {
	return sc.end(ctx, s, s.Sandbox)
}

// Delete implements Sessions.
func (sc *sessionCore) Delete(ctx context.Context, id, principal string) error {
	c := sc.c
	m, err := c.getMeta(ctx, id)
	if err != nil {
		return err
	}
	if m.Principal != principal {
		return fmt.Errorf("suspend: deleting session %s: %w", id, ErrForbidden)
	}
	// The record first: once it is gone nothing reads the body, and a
	// claim that held it finds nothing to save into.
	if err := c.b.deleteMeta(ctx, id); err != nil {
		return fmt.Errorf("suspend: deleting session %s: %w", id, err)
	}
	c.release(ctx, m.Principal, id)
	if m.Body != nil {
		if err := c.b.deleteBody(ctx, id, m.Body); err != nil {
			return fmt.Errorf("suspend: deleting session %s's state: %w", id, err)
		}
	}
	return nil
}

// List implements SessionLister for the directory store: principal's
// sessions, expired ones included (their ExpiresAt says so), newest first.
func (sc *sessionCore) List(ctx context.Context, principal string) ([]*Session, error) {
	fb, ok := sc.c.b.(*fileBackend)
	if !ok {
		return nil, errors.New("suspend: only the directory store lists sessions")
	}
	ms, err := fb.list(ctx)
	if err != nil {
		return nil, err
	}
	var out []*Session
	for _, m := range ms {
		if m.Principal == principal {
			out = append(out, m.session())
		}
	}
	slices.SortFunc(out, func(a, b *Session) int { return b.UpdatedAt.Compare(a.UpdatedAt) })
	return out, nil
}

// A session's state is stored as one binary blob:
//
//	"PMLSESS1"   magic and format version
//	uvarint n    length of the next part
//	n bytes      JSON of the state without its memory
//	the rest     the memory, as the engine made it (S2 already)
var stateMagic = []byte("PMLSESS1")

func encodeState(s *guest.State) ([]byte, error) {
	head := *s
	head.Memory = nil
	js, err := json.Marshal(&head)
	if err != nil {
		return nil, fmt.Errorf("encoding the state: %w", err)
	}
	out := make([]byte, 0, len(stateMagic)+binary.MaxVarintLen64+len(js)+len(s.Memory))
	out = append(out, stateMagic...)
	out = binary.AppendUvarint(out, uint64(len(js)))
	out = append(out, js...)
	return append(out, s.Memory...), nil
}

var errBadState = errors.New("not a stored session state")

// decodeState parses a blob; the returned Memory aliases b.
func decodeState(b []byte) (*guest.State, error) {
	if !bytes.HasPrefix(b, stateMagic) {
		return nil, errBadState
	}
	b = b[len(stateMagic):]
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return nil, errBadState
	}
	var s guest.State
	if err := json.Unmarshal(b[k:k+int(n)], &s); err != nil {
		return nil, fmt.Errorf("%w: %w", errBadState, err)
	}
	s.Memory = b[k+int(n):]
	return &s, nil
}
