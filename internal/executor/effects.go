package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/journal"
)

// Effects. A call of a tool that is not read-only (catalog.Tool.IsEffect)
// is an effect, and goes through the execution's journal (internal/journal)
// on its way out: its intent is written first — durably, or the call fails
// UNAVAILABLE and nothing is sent — then it is sent with its idempotency
// key, then its outcome is written. A call the journal already has (the
// same execution and call id: an answer to its server's question, a
// continuation) is answered from there and never sent twice without a key
// (replay). Reads take the path they always took: no journal, no key.
//
// The journal is the durable record of what an execution did to the world;
// the trace, which batches its call records, is the record of everything
// it did. The two join on (execution id, call id).

// journalTimeout bounds one journal write on the call path. It is made
// even when the caller has gone: an outcome left unwritten reads unknown.
const journalTimeout = 10 * time.Second

// effectLog is one execution's journal as its host writes it, and what the
// host knows of it in memory.
type effectLog struct {
	store     journal.Store
	execID    string
	principal string
	log       *slog.Logger

	mu sync.Mutex
	// loaded: prior holds the entries of the execution's earlier runs (a
	// resumed one), read once; a new execution has none to read.
	loaded bool
	prior  map[int]journal.Entry
	// mine are the entries this run wrote or met, as it knows them: an
	// outcome the journal failed to record is still told in the document.
	mine map[int]journal.Entry
	// counted are this run's calls counted against journal.MaxEffects
	// (reserve), none of them in prior.
	counted map[int]bool
}

// newEffectLog is req's journal: the service's store, or one in memory
// for this run alone (a service that keeps no journal still lists the
// run's effects). fresh says the execution is new (no earlier run can have
// written to its journal).
func (s *Service) newEffectLog(req *execution.Request, fresh bool) *effectLog {
	store := s.journal
	if store == nil {
		store, fresh = journal.NewMemory(), true
	}
	return &effectLog{store: store, execID: req.ExecutionID, principal: req.Principal, log: s.log, loaded: fresh}
}

// send makes one tool call: an effect through the journal, a read
// straight to its source.
func (h *toolHost) send(ctx context.Context, e entry, c guest.Call, opts execution.CallOptions) (json.RawMessage, error) {
	if !e.tool.IsEffect() {
		return e.source.Call(ctx, e.tool, c.Args, opts)
	}
	return h.effects.call(ctx, e, c, opts)
}

// call sends one effect: intent, call with its key, outcome.
func (l *effectLog) call(ctx context.Context, e entry, c guest.Call, opts execution.CallOptions) (json.RawMessage, error) {
	full := c.Server + ":" + c.Tool
	want := journal.Entry{ExecutionID: l.execID, CallID: c.ID, Principal: l.principal, Server: c.Server, Tool: c.Tool,
		Key: journal.Key(l.execID, c.ID), ArgsDigest: journal.Digest(c.Args), Args: c.Args, Honours: e.tool.HonoursKeys(),
		Status: journal.Pending, Attempts: 1, IntendedAt: time.Now().UTC()}
	// What the host keeps in memory is bounded as the journal is.
	journal.Cap(&want)
	if ctx.Err() != nil {
		// The run is over (its deadline, a cancel): nothing to intend.
		return nil, fault.Wrap(fault.Timeout, context.Cause(ctx), "call abandoned").WithTool(full)
	}
	if ferr := l.reserve(ctx, c.ID); ferr != nil {
		return nil, ferr.WithTool(full)
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), journalTimeout)
	existing, err := l.store.Intend(wctx, &want)
	cancel()
	if err != nil {
		return nil, l.failClosed(ctx, want, err)
	}
	sending := want
	if existing != nil {
		out, ferr, resend := l.replay(ctx, *existing, want, opts)
		if !resend {
			return out, ferr
		}
		sending = *existing
		sending.Attempts++
	}
	l.remember(sending)
	opts.IdempotencyKey = sending.Key
	var refused atomic.Bool
	notSent := opts.NotSent // the policy's counts are given back too (gate.go)
	opts.NotSent = func() {
		refused.Store(true)
		if notSent != nil {
			notSent()
		}
	}
	out, err := e.source.Call(ctx, e.tool, c.Args, opts)
	if _, asked := isQuestion(err); asked {
		// The server asked before it would answer: the effect waits,
		// pending, for the call sent again with the answers.
		return out, err
	}
	l.settle(ctx, sending, outcomeOf(out, err, refused.Load()))
	return out, err
}

// notSent records in the journal that the effect of call f, about to be
// sent, was not (fe: its checkpoint was not kept). A call the journal has
// already is left as it stands there.
func (l *effectLog) notSent(ctx context.Context, h *toolHost, f guest.InFlightCall, fe *fault.Error) {
	e, ok := h.lookup(f.Server + ":" + f.Tool)
	want := journal.Entry{ExecutionID: l.execID, CallID: f.CallID, Principal: l.principal, Server: f.Server, Tool: f.Tool,
		Key: journal.Key(l.execID, f.CallID), ArgsDigest: journal.Digest(f.Args), Args: f.Args, Honours: ok && e.tool.HonoursKeys(),
		Status: journal.Pending, Attempts: 1, IntendedAt: time.Now().UTC()}
	journal.Cap(&want)
	if ferr := l.reserve(ctx, f.CallID); ferr != nil {
		return
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), journalTimeout)
	defer cancel()
	existing, err := l.store.Intend(wctx, &want)
	if existing != nil {
		return
	}
	if err == nil {
		err = l.store.Settle(wctx, l.execID, f.CallID, journal.Outcome{Status: journal.NotSent, Error: fe})
	}
	if err != nil {
		l.log.ErrorContext(ctx, "effect not sent, and not journalled so", "execution_id", l.execID, "call_id", f.CallID, "err", err)
	}
	want.Status, want.Error = journal.NotSent, fe
	journal.Cap(&want)
	l.remember(want)
}

// outcomeOf is what a call's answer says of its effect: applied when it
// succeeded; not sent when its source said nothing left the host; failed
// when its server answered with an error; unknown otherwise (a timeout, a
// lost connection, an answer that could not be read: it may have
// happened).
func outcomeOf(out json.RawMessage, err error, refused bool) journal.Outcome {
	if err == nil {
		return journal.Outcome{Status: journal.Applied, Result: out}
	}
	fe := fault.As(err)
	switch {
	case refused:
		return journal.Outcome{Status: journal.NotSent, Error: fe}
	case fe.Code == fault.ToolError || fe.Code == fault.Rejected:
		return journal.Outcome{Status: journal.Failed, Error: fe}
	}
	return journal.Outcome{Status: journal.Unknown, Error: fe}
}

// reserve counts call callID against journal.MaxEffects (a call met again
// counts once), reading the earlier runs' entries first if it must.
func (l *effectLog) reserve(ctx context.Context, callID int) *fault.Error {
	if ferr := l.load(ctx); ferr != nil {
		return ferr
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, before := l.prior[callID]; before || l.counted[callID] {
		return nil
	}
	if len(l.counted)+len(l.prior) >= journal.MaxEffects {
		return fault.Limitf(journal.LimitEffects, "an execution may make at most %d effects (calls of tools that are not read-only): "+
			"this one made them all; split the work across executions", journal.MaxEffects)
	}
	if l.counted == nil {
		l.counted = map[int]bool{}
	}
	l.counted[callID] = true
	return nil
}

// load reads the earlier runs' entries once (a resumed execution): UNAVAILABLE
// when the journal cannot be read, and no effect is sent meanwhile.
func (l *effectLog) load(ctx context.Context) *fault.Error {
	l.mu.Lock()
	loaded := l.loaded
	l.mu.Unlock()
	if loaded {
		return nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), journalTimeout)
	entries, err := l.store.List(rctx, l.execID)
	cancel()
	if err != nil {
		fe := fault.Wrap(fault.Unavailable, err, "the journal of effects could not be read, so no effect is sent")
		fe.Retryable = true
		return fe
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.loaded {
		l.prior = map[int]journal.Entry{}
		for _, e := range entries {
			l.prior[e.CallID] = e
		}
		l.loaded = true
	}
	return nil
}

// failClosed is the answer to an effect whose intent could not be
// written: it is not sent. Where the journal can still record it (the
// intent reached it after all) it reads not_sent; the document says so
// either way.
func (l *effectLog) failClosed(ctx context.Context, want journal.Entry, err error) *fault.Error {
	full := want.Server + ":" + want.Tool
	l.log.ErrorContext(ctx, "effect not sent: its intent could not be journalled", "execution_id", l.execID, "call_id", want.CallID, "tool", full, "err", err)
	fe := fault.Wrap(fault.Unavailable, err, fmt.Sprintf("%s was not sent: its intent could not be written to the journal of effects, and an effect is never sent without one", full)).WithTool(full)
	fe.Retryable = true
	o := journal.Outcome{Status: journal.NotSent, Error: fe}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), journalTimeout)
	_ = l.store.Settle(sctx, l.execID, want.CallID, o)
	cancel()
	want.Status, want.Error = journal.NotSent, fe
	l.remember(want)
	return fe
}

// replay answers a call the journal has already (existing), or says it
// may be sent again (resend, its new attempt counted): a settled effect is
// answered with its outcome, never sent again; a pending one is sent again
// with its key when that is safe — it is the answer to its server's
// question (the server did not act on the first), or its tool honours keys
// — and otherwise fails OUTCOME_UNKNOWN, recorded as unknown.
func (l *effectLog) replay(ctx context.Context, existing, want journal.Entry, opts execution.CallOptions) (out json.RawMessage, ferr error, resend bool) {
	full := want.Server + ":" + want.Tool
	if existing.Server != want.Server || existing.Tool != want.Tool || existing.ArgsDigest != want.ArgsDigest {
		// Not this call: the journal and the run disagree, and sending
		// either could apply what nobody meant.
		return nil, fault.New(fault.Internal, "the journal of effects has call %d of execution %s as %s:%s with other arguments; it is not sent",
			want.CallID, l.execID, existing.Server, existing.Tool).WithTool(full), false
	}
	l.remember(existing)
	switch existing.Status {
	case journal.Applied:
		if existing.Result == nil && existing.ResultBytes > 0 {
			return nil, (&fault.Error{Code: fault.LimitExceeded, Limit: journal.LimitEffectBytes, Tool: full, Details: effectDetails(existing),
				Message: fmt.Sprintf("%s was applied (the journal of effects says so), and its result of %d bytes was over the %d bytes the journal keeps: "+
					"it is not sent again; read its outcome from the server", full, existing.ResultBytes, journal.MaxResultBytes)}), false
		}
		if existing.Result == nil {
			return json.RawMessage("null"), nil, false
		}
		return existing.Result, nil, false
	case journal.Pending:
	default:
		if existing.Error != nil {
			return nil, existing.Error, false
		}
		return nil, fault.New(fault.ToolError, "%s %s, as its journal records", full, existing.Status).WithTool(full), false
	}
	if opts.Retry != nil || existing.Honours {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), journalTimeout)
		err := l.store.Resend(wctx, l.execID, existing.CallID, existing.Attempts)
		cancel()
		switch {
		case err == nil:
			return nil, nil, true
		case errors.Is(err, journal.ErrConflict):
			// Another runner of the execution counted this attempt first:
			// it sends the effect, and records its outcome.
			return nil, &fault.Error{Code: fault.OutcomeUnknown, Tool: full, Details: effectDetails(existing),
				Message: fmt.Sprintf("%s (call %d, key %s) is being sent again by another runner of this execution: its outcome is that runner's to record", full, existing.CallID, existing.Key)}, false
		}
		fe := fault.Wrap(fault.Unavailable, err, full+" was not sent again: the journal of effects could not count the attempt").WithTool(full)
		fe.Retryable = true
		return nil, fe, false
	}
	fe := outcomeUnknown(existing)
	l.settle(ctx, existing, journal.Outcome{Status: journal.Unknown, Error: fe})
	return nil, fe, false
}

// outcomeUnknown is the error of an effect that may or may not have
// happened, and is not sent again.
func outcomeUnknown(e journal.Entry) *fault.Error {
	full := e.Server + ":" + e.Tool
	return &fault.Error{Code: fault.OutcomeUnknown, Tool: full, Details: effectDetails(e),
		Message: fmt.Sprintf("%s (call %d, key %s) was sent and no outcome was recorded: it may or may not have happened, and %s does not honour "+
			"idempotency keys, so it is not sent again; check with the server, and reconcile", full, e.CallID, e.Key, full)}
}

// effectDetails names an effect in an error: enough to find it in the
// journal (the execution's document lists it by call id).
func effectDetails(e journal.Entry) map[string]any {
	return map[string]any{"execution_id": e.ExecutionID, "call_id": e.CallID, "server": e.Server, "tool": e.Tool, "key": e.Key,
		"journal": "executions/" + e.ExecutionID}
}

// settle records an effect's outcome. A journal that fails here loses the
// outcome, not the call: the script has its answer, the document tells it
// from memory, and the entry reads unknown once the run has ended.
func (l *effectLog) settle(ctx context.Context, e journal.Entry, o journal.Outcome) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), journalTimeout)
	err := l.store.Settle(sctx, l.execID, e.CallID, o)
	cancel()
	if err != nil {
		l.log.ErrorContext(ctx, "effect's outcome not journalled", "execution_id", l.execID, "call_id", e.CallID, "tool", e.Server+":"+e.Tool,
			"status", string(o.Status), "err", err)
	}
	e.Status, e.Result, e.Error, e.SettledAt = o.Status, o.Result, o.Error, time.Now().UTC()
	journal.Cap(&e)
	l.remember(e)
}

func (l *effectLog) remember(e journal.Entry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mine == nil {
		l.mine = map[int]journal.Entry{}
	}
	l.mine[e.CallID] = e
}

// effects is the execution's effects for its document: the journal's
// entries (every run's) with what this run knows over them; ended says
// whether the execution has ended (pending reads unknown). Nothing is read
// for a new execution that made none.
func (l *effectLog) effects(ctx context.Context, ended bool) []execution.Effect {
	l.mu.Lock()
	none := l.loaded && len(l.mine) == 0 && len(l.prior) == 0
	l.mu.Unlock()
	if none {
		return nil
	}
	byCall := map[int]journal.Entry{}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), journalTimeout)
	entries, err := l.store.List(rctx, l.execID)
	cancel()
	if err != nil {
		l.log.WarnContext(ctx, "the journal of effects could not be read for the document", "execution_id", l.execID, "err", err)
	}
	l.mu.Lock()
	maps.Copy(byCall, l.prior)
	for _, e := range entries {
		byCall[e.CallID] = e
	}
	for id, e := range l.mine {
		if stored, ok := byCall[id]; !ok || !stored.Status.Settled() {
			byCall[id] = e
		}
	}
	l.mu.Unlock()
	return journal.Effects(slices.Collect(maps.Values(byCall)), ended)
}

// effectsOf is an execution's effects as its document lists them, read
// from the journal (none without one); ended says whether it has ended.
func (s *Service) effectsOf(ctx context.Context, executionID string, ended bool) []execution.Effect {
	if s.journal == nil {
		return nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), journalTimeout)
	defer cancel()
	entries, err := s.journal.List(rctx, executionID)
	if err != nil {
		s.log.WarnContext(ctx, "the journal of effects could not be read for the document", "execution_id", executionID, "err", err)
	}
	return journal.Effects(entries, ended)
}

// unanswered records that the effect of call callID, whose server asked a
// question, failed when the question got no answer that was sent (err: a
// decline, no one to ask, a timeout waiting): the server asked before it
// acted. A question parked for a person (guest.Asked) is still waiting.
func (l *effectLog) unanswered(ctx context.Context, callID int, err error) {
	var asked *guest.Asked
	if err == nil || errors.As(err, &asked) {
		return
	}
	l.mu.Lock()
	e, ok := l.mine[callID]
	l.mu.Unlock()
	if ok && e.Status == journal.Pending {
		l.settle(ctx, e, journal.Outcome{Status: journal.Failed, Error: fault.As(err)})
	}
}

// settleRejected records that calls parked on their server's question were
// rejected, declined or cancelled: their effects failed (the server asked
// before acting, and never got the answer it needed).
func (s *Service) settleRejected(ctx context.Context, executionID string, calls []int, why *fault.Error) {
	if s.journal == nil {
		return
	}
	for _, id := range calls {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), journalTimeout)
		err := s.journal.Settle(sctx, executionID, id, journal.Outcome{Status: journal.Failed, Error: why})
		cancel()
		if err != nil && !errors.Is(err, journal.ErrNotFound) && !errors.Is(err, journal.ErrConflict) {
			s.log.ErrorContext(ctx, "rejected effect's outcome not journalled", "execution_id", executionID, "call_id", id, "err", err)
		}
	}
}
