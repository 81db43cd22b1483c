// Package suspend stores suspended executions (durable executions): a run
// whose awaited tool calls all wait for a human's decision is saved here as
// a guest.Suspension, and any process or Lambda container may later claim
// it and resume it, at most once.
//
// Two stores implement Store: NewFile (one directory, for pml serve and
// pml run; several processes may share it) and NewDynamo (one DynamoDB
// table, deployed). Both follow the same protocol (docs/design/durable.md,
// "The suspension store"):
//
//   - A record has a version that every state change increments, and every
//     change is a write conditioned on the version read before it, so two
//     writers can never both move the same version on.
//   - suspended → resuming (Claim) → done | failed (Finish), or → suspended
//     again (Save, when the resumed run suspends again).
//   - A claim carries a lease, the run's remaining running time plus
//     LeaseMargin. A claim found past its lease (the resumer died) is turned
//     into failed with CodeAbandoned, never handed out again: nothing runs
//     twice.
//   - Expiry is decided from the stored expires_at (DefaultTTL after the
//     last suspension), not from DynamoDB's lazy TTL deletion.
//   - The suspension's memory image is stored as binary, apart from the
//     record's metadata, under a key unique to the version that wrote it
//     (chunked under DynamoDB's item limit), and checked against a SHA-256
//     when read back: a half-written or foreign image is never resumed.
//
// The memory image holds the script's data: Load and Claim return it for
// resuming, and callers must never put it in a response.
package suspend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
)

// State is where a suspended execution is in its life.
type State string

// The states of a record.
const (
	// Suspended: waiting for decisions; Claim may take it.
	Suspended State = "suspended"
	// Resuming: claimed by a resumer that is running it now.
	Resuming State = "resuming"
	// Done: the resumed run ended (whatever its result). Final.
	Done State = "done"
	// Failed: the resumed run could not finish (FailureCode says why).
	// Final.
	Failed State = "failed"
)

// CodeAbandoned is the failure code of a claim whose resumer did not
// finish within its lease (it crashed, or its container was recycled): the
// execution is failed rather than handed out again, since its tool calls
// may already have run. A fault.Code so callers can report it like any
// other failure.
const CodeAbandoned fault.Code = "RESUME_ABANDONED"

// DefaultTTL is how long a suspended execution waits for its decisions
// when Options.TTL is not set (the contract's default). Each suspension
// starts a new wait.
const DefaultTTL = execution.SuspensionTTL

// LeaseMargin is added to a run's remaining running time to make its
// claim's lease: it covers what a resumer does besides running the script
// (loading the state, starting a sandbox, writing traces and the outcome).
const LeaseMargin = time.Minute

// MaxBridgeBytes bounds Record.Bridge: it is kept in the metadata, which
// must stay well under DynamoDB's 400 KB item limit.
const MaxBridgeBytes = 64 << 10

// Record is one suspended execution and its history's current state.
type Record struct {
	// ID is the execution id (letters, digits, '_', '-', '.'; at most 128
	// characters; not starting with '.').
	ID string
	// Version increments on every state change; Claim, Finish and a
	// re-Save must name the version they hold. Save sets it.
	Version int
	// State is set by the store.
	State State
	// Bridge is the caller's own data about the request (narrowing, allow
	// flags, source, parent...): JSON, at most MaxBridgeBytes, kept as is;
	// the store never interprets it.
	Bridge json.RawMessage
	// Principal is the caller's identity (IAM or JWT principal) when auth
	// is on, "" when it is off. Only the same principal may claim.
	Principal string
	// CreatedAt is when the execution first suspended; UpdatedAt when the
	// record last changed. Set by the store.
	CreatedAt, UpdatedAt time.Time
	// ExpiresAt is when a suspended execution stops being resumable: TTL
	// after its last suspension (a claim extends it to cover its lease).
	// Set by the store.
	ExpiresAt time.Time
	// ClaimedAt is when the current (or last) claim was taken; zero if the
	// record was never claimed since its last suspension.
	ClaimedAt time.Time
	// Lease is how long a claim may run before it is deemed abandoned: the
	// suspension's remaining running time plus LeaseMargin. Set by Save.
	Lease time.Duration
	// FailureCode says why a Failed execution failed: CodeAbandoned, or the
	// code the resumer passed to Finish.
	FailureCode fault.Code
	// Suspension is the suspended run, memory image included. Nil once the
	// record is Done or Failed: the image is deleted then.
	Suspension *guest.Suspension
}

// Store keeps suspended executions. Implementations are safe for
// concurrent use, also by several processes sharing the same storage.
type Store interface {
	// Save stores r.Suspension. With r.Version 0 it creates the record
	// (version 1; ErrConflict if the id exists). Otherwise r must be a
	// record the caller claimed, at the version its claim returned, and
	// the run has suspended again: the record becomes Suspended at the
	// next version, with a new expiry. On success Save updates r's
	// Version, State, timestamps, Lease and FailureCode in place.
	Save(ctx context.Context, r *Record) error
	// Load returns the record, with its suspension when it has one.
	// ErrNotFound for an unknown id, ErrExpired (an *ExpiredError) past
	// its expiry. A record
	// found Resuming past its lease is failed (CodeAbandoned) first and
	// returned as such. Load does not check the principal: a caller that
	// shows a record must compare Record.Principal itself.
	Load(ctx context.Context, id string) (*Record, error)
	// Claim takes a Suspended record at exactly version for principal
	// and returns it Resuming at version+1, suspension included: of
	// several concurrent claims, one wins. ErrNotFound, ErrForbidden
	// (another principal), ErrExpired, or ErrConflict (someone claimed
	// it, the version moved, or it is finished; a *StateError says what
	// was found, e.g. Failed with CodeAbandoned). Any other error is a
	// storage failure that may or may not have claimed it: retrying is
	// safe (at worst it reports a conflict), and a claim nobody holds
	// fails as abandoned when its lease ends.
	Claim(ctx context.Context, id string, version int, principal string) (*Record, error)
	// Finish ends a claim: the Resuming record at version becomes state
	// (Done or Failed, with code for Failed) at version+1, and its
	// memory image is deleted. ErrNotFound, or ErrConflict when the
	// record is no longer at that version (e.g. it was deemed abandoned;
	// or, when retrying after a storage error, the first attempt did
	// finish it: the *StateError shows the state at version+1).
	Finish(ctx context.Context, id string, version int, state State, code fault.Code) error
	// Owners returns the principals whose records may wait for decisions
	// now (a page of them: after is "" or the next cursor of the page
	// before; at most limit, 200 at most), and the cursor of the next
	// page, "" after the last. An owner whose records all ended may still
	// be named: ListOf tells.
	Owners(ctx context.Context, after string, limit int) (owners []string, next string, err error)
	// ListOf returns owner's records that wait for decisions now
	// (Suspended and not expired), soonest to expire first, a page at a
	// time (after and limit as for Owners), without their suspensions:
	// what an approval page lists. It reads the records of that page
	// alone. Load each to read it whole.
	ListOf(ctx context.Context, owner, after string, limit int) (recs []*Record, next string, err error)
}

// The errors a Store returns, to test with errors.Is. Other errors are
// storage failures (I/O, DynamoDB), wrapped with the operation.
var (
	// ErrNotFound: no execution with that id (HTTP 404). Also what an
	// expired record becomes once DynamoDB's TTL has deleted it.
	ErrNotFound = errors.New("suspended execution not found")
	// ErrExpired: the execution's expiry has passed (HTTP 410).
	ErrExpired = errors.New("suspended execution expired")
	// ErrConflict: the record is not in the state or at the version the
	// operation needs (HTTP 409).
	ErrConflict = errors.New("suspended execution is not at that version or state")
	// ErrForbidden: the execution belongs to another principal. Callers
	// tell it as ErrNotFound, so that an id does not say whether it exists.
	ErrForbidden = errors.New("suspended execution belongs to another principal")
	// ErrInvalid: the caller's arguments are malformed (a bad id, no
	// suspension, oversized Bridge data, an unknown final state): a bug in
	// the caller.
	ErrInvalid = errors.New("invalid suspended execution")
)

// ExpiredError is the ErrExpired of Load: whose the record was, so that a
// caller tells it expired only to a principal that may see it (to anyone
// else it is unknown, or an id would say that it exists).
type ExpiredError struct {
	Principal string
	err       error
}

func expired(principal string, err error) *ExpiredError {
	return &ExpiredError{Principal: principal, err: err}
}

// Error implements error.
func (e *ExpiredError) Error() string { return e.err.Error() }

// Unwrap makes errors.Is(err, ErrExpired) true.
func (e *ExpiredError) Unwrap() error { return e.err }

// StateError is the ErrConflict a Store returns when it read the record and
// found it elsewhere than asked: errors.As gives what it found.
type StateError struct {
	ID          string
	State       State      // the state found
	Version     int        // the version found
	FailureCode fault.Code // when State is Failed
}

// Error implements error.
func (e *StateError) Error() string {
	s := fmt.Sprintf("suspended execution %s is %s at version %d", e.ID, e.State, e.Version)
	if e.FailureCode != "" {
		s += " (" + string(e.FailureCode) + ")"
	}
	return s
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *StateError) Is(target error) bool { return target == ErrConflict }

// Options configure a store; the zero value is the production setting.
type Options struct {
	// TTL is how long a suspended execution waits; DefaultTTL when 0.
	TTL time.Duration
	// Now is the clock; time.Now when nil. Tests move it to expire records
	// and leases without waiting.
	Now func() time.Time
	// Quota bounds what one principal keeps in the store: suspended
	// executions in a Store, sessions in a Sessions (zero fields: the
	// Default… of each).
	Quota Quota
}

func (o Options) withDefaults() Options {
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}
