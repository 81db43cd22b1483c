// Package journal is the write-ahead journal of an execution's effects:
// its calls of tools that are not read-only (catalog.Tool.IsEffect). Before
// an effect leaves the host its intent is durable — the execution and call
// id, the server and tool, a digest of the arguments and the arguments
// themselves (capped), the idempotency key it carries — and its outcome is
// durable after it. What a run did to the world can then be told after the
// run is gone, whatever became of its trace, and a call met again (a
// question's answer, a continuation after a crash) is answered from the
// journal instead of being sent twice.
//
// One Store per deployment, beside the suspended executions: a directory
// (File: one append-only JSON-lines file per execution, synced after every
// write) or the DynamoDB table (Dynamo: one item per effect, a conditional
// put for the intent and an update for the outcome). Memory keeps one in
// memory, for a host without either. Every store applies the same
// conditions, so that two processes can never both send one effect:
//
//   - Intend writes an entry only when the execution has none for the call
//     (else it answers the existing one);
//   - Resend counts a new attempt only when the entry is still pending at
//     the attempt the caller read;
//   - Settle records the outcome only of a pending entry;
//   - SetCompensation records what undoing the effect did only when the
//     entry's compensation is still the one its caller read (none, or the
//     same status by the same rollback), so that two rollbacks never both
//     claim one effect.
//
// Keys (Key) are derived from the execution id and the call id alone, so
// they are the same across retries and continuations, and no script can
// choose one. docs/EFFECTS.md says what a user can rely on.
package journal

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
)

// Status is where an effect stands in the journal.
type Status string

// The statuses of an entry. Pending is the journal's own: the intent is
// durable and the outcome not yet; a user reads it as unknown once the run
// that sent it is gone (UserStatus). The other four are the ones a user
// sees (execution.EffectApplied and its siblings).
const (
	Pending Status = "pending"
	Applied Status = execution.EffectApplied
	Failed  Status = execution.EffectFailed
	NotSent Status = execution.EffectNotSent
	Unknown Status = execution.EffectUnknown
)

// Settled reports whether s is an outcome (anything but Pending).
func (s Status) Settled() bool { return s != Pending && s != "" }

// Bounds of the journal, with the limit names their errors carry.
const (
	// MaxEffects bounds the effects one execution may make: its journal,
	// and the document that lists them, stay bounded. The engine's own
	// default bound on calls (tool_calls) is the same, so only a request
	// that raises that bound can meet this one.
	MaxEffects = 1000
	// MaxArgsBytes bounds the arguments an entry keeps (for undo's
	// compensations); larger arguments are kept as their digest and size
	// only (Entry.Args nil, ArgsBytes their size).
	MaxArgsBytes = 32 << 10
	// MaxResultBytes bounds the result an entry keeps, to answer the call
	// from the journal when it is met again; a larger result is kept as its
	// size only, and the call met again fails LIMIT_EXCEEDED effect_bytes
	// (the effect happened, and its result is not kept: the script reads
	// the outcome from the server). Never a prefix: a cut JSON value is not
	// the result.
	MaxResultBytes = 16 << 10
	// MaxErrorBytes bounds the message of an entry's error.
	MaxErrorBytes = 2 << 10

	// LimitEffects names MaxEffects in a LIMIT_EXCEEDED error.
	LimitEffects = "effects"
	// LimitEffectBytes names MaxResultBytes in the LIMIT_EXCEEDED error
	// of a call answered from the journal without its result.
	LimitEffectBytes = "effect_bytes"
)

// Entry is one effect.
type Entry struct {
	ExecutionID string `json:"execution_id"`
	// CallID is the call's position in its execution (the trace's call
	// id): the journal and the trace join on it.
	CallID int `json:"call_id"`
	// Principal is whom the execution belongs to: a reader of the journal
	// shows an entry only to whom may read the execution.
	Principal string `json:"principal,omitempty"`
	Server    string `json:"server"`
	Tool      string `json:"tool"`
	// Key is the idempotency key the call carries upstream (Key).
	Key string `json:"key"`
	// ArgsDigest is the hex SHA-256 of the arguments as sent; ArgsBytes
	// their size. Args are the arguments themselves, kept for undo when
	// they are at most MaxArgsBytes, else nil.
	ArgsDigest string          `json:"args_digest"`
	ArgsBytes  int             `json:"args_bytes"`
	Args       json.RawMessage `json:"args,omitempty"`
	// Honours is whether the tool honours keys (catalog.Tool.HonoursKeys)
	// when the intent was written: a pending entry of one may be sent
	// again with its key; of another, never.
	Honours bool   `json:"honours,omitempty"`
	Status  Status `json:"status"`
	// Result is the call's result (Applied), kept when it is at most
	// MaxResultBytes; ResultBytes is its size either way.
	Result      json.RawMessage `json:"result,omitempty"`
	ResultBytes int             `json:"result_bytes,omitempty"`
	// Error is why it failed, was not sent or is unknown (its message
	// capped at MaxErrorBytes).
	Error      *fault.Error `json:"error,omitempty"`
	IntendedAt time.Time    `json:"intended_at"`
	SettledAt  time.Time    `json:"settled_at,omitzero"`
	// Attempts counts the times the call was sent: 1 at the intent, one
	// more per Resend.
	Attempts int `json:"attempts"`
	// Compensation is what undoing the effect did (SetCompensation), nil
	// before anyone tried.
	Compensation *Compensation `json:"compensation,omitempty"`
}

// Outcome is what Settle records of a pending entry.
type Outcome struct {
	// Status is Applied, Failed, NotSent or Unknown.
	Status Status
	// Result is the call's result (Applied); capped as Entry.Result.
	Result json.RawMessage
	// Error is why it failed, was not sent or is unknown.
	Error *fault.Error
}

// Compensation is what undoing one effect did: the undo's own record on
// the entry, which the journal keeps as it is given (SetCompensation
// replaces it whole, under its condition). The journal gives its fields no
// meaning beyond that condition (Claims).
type Compensation struct {
	// Status is the undo's word for it (execution.CompensationRunning and
	// its siblings).
	Status string `json:"status"`
	// ExecutionID and CallID name the call that compensates the effect
	// (in the rollback's own execution); Server, Tool and ArgsDigest say
	// what that call is, so that its own journal entry can be told to be
	// it.
	ExecutionID string `json:"execution_id,omitempty"`
	CallID      int    `json:"call_id,omitempty"`
	Server      string `json:"server,omitempty"`
	Tool        string `json:"tool,omitempty"`
	ArgsDigest  string `json:"args_digest,omitempty"`
	// Reason says why the effect was not compensated (skipped).
	Reason string       `json:"reason,omitempty"`
	Error  *fault.Error `json:"error,omitempty"`
	At     time.Time    `json:"at,omitzero"`
}

// Claims reports whether c is the compensation from names: both none, or
// the same status by the same rollback execution and call. It is
// SetCompensation's condition.
func Claims(c, from *Compensation) bool {
	if c == nil || from == nil {
		return c == nil && from == nil
	}
	return c.Status == from.Status && c.ExecutionID == from.ExecutionID && c.CallID == from.CallID
}

// claimTag is what a store compares for Claims ("" for none).
func claimTag(c *Compensation) string {
	if c == nil {
		return ""
	}
	return c.Status + "\x00" + c.ExecutionID + "\x00" + strconv.Itoa(c.CallID)
}

// Store is a journal of effects. Implementations are safe for concurrent
// use, from any number of processes sharing the store.
type Store interface {
	// Intend makes e's intent durable: e is written as Pending, attempt 1,
	// with its arguments and its error capped (Cap), if and only if the
	// journal has no entry for e's execution and call. When it has one,
	// nothing is written and existing is that entry, as stored. An error
	// means the intent may not be durable: the effect must not be sent.
	Intend(ctx context.Context, e *Entry) (existing *Entry, err error)
	// Resend counts one more attempt at a pending entry that is at
	// attempts now (what its reader saw): ErrConflict when it is not (it
	// was settled, or someone else counted that attempt first, and sends
	// it), ErrNotFound when there is no entry. Whoever it succeeds for may
	// send the effect again, with the same key.
	Resend(ctx context.Context, executionID string, callID, attempts int) error
	// Settle records the outcome of a pending entry: ErrConflict when it
	// is settled already, ErrNotFound when there is none.
	Settle(ctx context.Context, executionID string, callID int, o Outcome) error
	// SetCompensation records what undoing the entry's effect did (to;
	// nil clears it) if and only if what is recorded now is from
	// (Claims): ErrConflict when it is not (another rollback got there
	// first), ErrNotFound when there is no entry.
	SetCompensation(ctx context.Context, executionID string, callID int, from, to *Compensation) error
	// List returns the execution's entries in call order (none for an
	// unknown execution).
	List(ctx context.Context, executionID string) ([]Entry, error)
}

// Reader is the part of a Store that documents read.
type Reader interface {
	List(ctx context.Context, executionID string) ([]Entry, error)
}

// Errors of a Store's conditions.
var (
	// ErrConflict: the entry is not in the state the operation needs.
	ErrConflict = errors.New("journal: the entry is not in the state the operation needs")
	// ErrNotFound: the execution has no entry for the call.
	ErrNotFound = errors.New("journal: no entry for the call")
)

// DefaultTTL is how long a store keeps an execution's journal after its
// first intent (Options.TTL).
const DefaultTTL = 7 * 24 * time.Hour

// Options configure a File or a Dynamo store.
type Options struct {
	// TTL is how long an execution's journal is kept (DefaultTTL when 0):
	// DynamoDB's TTL deletes its items, the file store's sweep its file.
	TTL time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
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

// keyEncoding is base32 (RFC 4648) without padding, in lower case when
// written: letters and digits only, safe in any header.
var keyEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// Key is the idempotency key of call callID of execution executionID:
// "pml-" and 26 base32 characters (130 bits) of a SHA-256 over the two,
// so the same call carries the same key in every process and attempt, two
// calls never share one, and nothing a script says enters it.
func Key(executionID string, callID int) string {
	sum := sha256.Sum256([]byte("pml-effect\x00" + executionID + "\x00" + strconv.Itoa(callID)))
	return "pml-" + strings.ToLower(keyEncoding.EncodeToString(sum[:]))[:26]
}

// Digest is the hex SHA-256 of args, as Entry.ArgsDigest keeps it.
func Digest(args []byte) string {
	sum := sha256.Sum256(args)
	return hex.EncodeToString(sum[:])
}

// Cap bounds what e keeps: its arguments (sized, and dropped past
// MaxArgsBytes: their digest stays), its result (dropped past
// MaxResultBytes) and its error's message. Every store applies it to what
// it writes.
func Cap(e *Entry) {
	if e.ArgsDigest == "" && e.Args != nil {
		e.ArgsDigest = Digest(e.Args)
	}
	if e.Args != nil {
		e.ArgsBytes = len(e.Args)
	}
	if len(e.Args) > MaxArgsBytes {
		e.Args = nil
	}
	if e.Result != nil {
		e.ResultBytes = len(e.Result)
	}
	if len(e.Result) > MaxResultBytes {
		e.Result = nil
	}
	e.Error = capError(e.Error)
}

// capOutcome is o as an entry keeps it.
func capOutcome(o Outcome) (result json.RawMessage, size int, ferr *fault.Error) {
	size = len(o.Result)
	if size <= MaxResultBytes {
		result = o.Result
	}
	return result, size, capError(o.Error)
}

// capError is a copy of fe with its message cut at MaxErrorBytes (not
// inside a character), and its cause dropped (never stored).
func capError(fe *fault.Error) *fault.Error {
	if fe == nil {
		return nil
	}
	c := &fault.Error{Code: fe.Code, Message: fe.Message, Tool: fe.Tool, Limit: fe.Limit, Retryable: fe.Retryable, Details: fe.Details}
	if len(c.Message) > MaxErrorBytes {
		n := MaxErrorBytes
		for n > 0 && !utf8.RuneStart(c.Message[n]) {
			n--
		}
		c.Message = c.Message[:n] + "…"
	}
	return c
}

// settle applies o to e (a stored entry, pending), at at.
func (e *Entry) settle(o Outcome, at time.Time) {
	e.Status, e.SettledAt = o.Status, at
	e.Result, e.ResultBytes, e.Error = capOutcome(o)
}

// checkOutcome refuses an outcome that is not one.
func checkOutcome(o Outcome) error {
	if !o.Status.Settled() {
		return errors.New("journal: an outcome must be applied, failed, not_sent or unknown, not " + strconv.Quote(string(o.Status)))
	}
	return nil
}

// UserStatus is the entry's status as a user reads it: Pending while the
// execution has not ended (a running or suspended one), Unknown once it
// has (its run is gone, and nobody recorded an outcome).
func (e Entry) UserStatus(ended bool) Status {
	if e.Status == Pending && ended {
		return Unknown
	}
	return e.Status
}

// LostAfter is how long after its last intent an execution that is not
// known to be running or suspended has surely ended: no run lasts longer
// (15 minutes, the longest a Lambda runs and the engine allows, and a
// minute's margin). A reader that knows nothing else of it (its trace was
// lost) tells its pending entries unknown after that (Quiet).
const LostAfter = 16 * time.Minute

// Quiet reports whether entries' last intent is older than LostAfter at
// now.
func Quiet(entries []Entry, now time.Time) bool {
	var last time.Time
	for _, e := range entries {
		if e.IntendedAt.After(last) {
			last = e.IntendedAt
		}
	}
	return now.Sub(last) > LostAfter
}

// Effect is the entry as an execution's document lists it.
func (e Entry) Effect(ended bool) execution.Effect {
	eff := execution.Effect{CallID: e.CallID, Server: e.Server, Tool: e.Tool, Key: e.Key, Status: string(e.UserStatus(ended)), Error: e.Error}
	if eff.Status == execution.EffectUnknown && eff.Error == nil {
		eff.Error = fault.New(fault.OutcomeUnknown, "no outcome was recorded: the run that sent it stopped before its answer (a crash, a recycled container)")
	}
	if c := e.Compensation; c != nil {
		eff.Compensation = &execution.EffectCompensation{Status: c.Status, ExecutionID: c.ExecutionID, CallID: c.CallID, Reason: c.Reason, Error: c.Error}
		if c.Tool != "" {
			eff.Compensation.Tool = c.Server + ":" + c.Tool
		}
	}
	return eff
}

// Effects are entries as a document lists them, in call order (nil for
// none).
func Effects(entries []Entry, ended bool) []execution.Effect {
	if len(entries) == 0 {
		return nil
	}
	sorted := slices.Clone(entries)
	slices.SortFunc(sorted, func(a, b Entry) int { return a.CallID - b.CallID })
	out := make([]execution.Effect, len(sorted))
	for i, e := range sorted {
		out[i] = e.Effect(ended)
	}
	return out
}

// validID keeps execution ids safe as file names and keys (the rule of
// internal/suspend's ids).
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

// checkIntent refuses an intent that cannot be one.
func checkIntent(e *Entry) error {
	switch {
	case e == nil:
		return errors.New("journal: no entry")
	case !validID(e.ExecutionID):
		return errors.New("journal: invalid execution id " + strconv.Quote(e.ExecutionID))
	case e.CallID < 1:
		return errors.New("journal: invalid call id " + strconv.Itoa(e.CallID))
	case e.Key == "":
		return errors.New("journal: an intent needs its key")
	}
	return nil
}

// pendingIntent is e as an intent is stored: pending, attempt 1, capped.
func pendingIntent(e *Entry, now time.Time) Entry {
	c := *e
	c.Status, c.Attempts, c.SettledAt, c.Result, c.Error, c.Compensation = Pending, 1, time.Time{}, nil, nil, nil
	c.ResultBytes = 0
	if c.IntendedAt.IsZero() {
		c.IntendedAt = now
	}
	c.IntendedAt = c.IntendedAt.UTC()
	Cap(&c)
	return c
}
