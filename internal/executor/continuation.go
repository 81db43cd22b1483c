package executor

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/trace"
)

// Continuation. An execution that runs under a claim (Request.Checkpoints:
// internal/runs sets it for the runs it runs) is checkpointed by the engine
// before each effect it sends and at least every few seconds otherwise
// (guest's checkpoint.go); each checkpoint goes to its Checkpointer, with
// what the service must remember of the run beside it (runState). A
// runner that takes the execution over after its runner died hands the
// last one back (Request.Checkpoint), and Execute continues the run from
// it in a fresh sandbox, without replay. What was in flight at the
// checkpoint is made again through the host, so every effect meets its
// journal (effects.go): one with an outcome is answered from it, one sent
// and unanswered is sent again with its key only where its tool honours
// keys and otherwise fails OUTCOME_UNKNOWN, and one never sent is sent. A
// capability call in flight is not made again — its run may have made
// effects of its own under an id of its own — and fails OUTCOME_UNKNOWN.

// checkpointTimeout bounds keeping one checkpoint: the run waits for it
// (an effect is never sent before), and gives up with UNAVAILABLE.
const checkpointTimeout = 10 * time.Second

// checkpointMagic begins a checkpoint the service keeps: a version of
// its format.
var checkpointMagic = []byte("PMLCKPT1")

// runState is what the service keeps of a run beside its guest's
// checkpoint.
type runState struct {
	// StartedAt is when the execution first started.
	StartedAt time.Time `json:"started_at"`
	// Sandboxes is what the run spent of its sandbox budget so far.
	Sandboxes int `json:"sandboxes,omitempty"`
	// Approved are the calls a decision approved (they run although they
	// need approval).
	Approved []int `json:"approved,omitempty"`
}

// encodeCheckpoint is a checkpoint as a Checkpointer keeps it: the magic,
// the length of st's JSON, st's JSON, and the suspension's blob (the
// suspension store's format: its memory stays binary).
func encodeCheckpoint(st runState, s *guest.Suspension) ([]byte, error) {
	js, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	blob, err := suspend.EncodeSuspension(s)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(checkpointMagic)+binary.MaxVarintLen64+len(js)+len(blob))
	out = append(out, checkpointMagic...)
	out = binary.AppendUvarint(out, uint64(len(js)))
	out = append(out, js...)
	return append(out, blob...), nil
}

// decodeCheckpoint reads what encodeCheckpoint made.
func decodeCheckpoint(b []byte) (runState, *guest.Suspension, error) {
	var st runState
	if !bytes.HasPrefix(b, checkpointMagic) {
		return st, nil, errors.New("not a checkpoint")
	}
	b = b[len(checkpointMagic):]
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return st, nil, errors.New("a checkpoint cut short")
	}
	if err := json.Unmarshal(b[k:k+int(n)], &st); err != nil {
		return st, nil, err
	}
	s, err := suspend.DecodeSuspension(b[k+int(n):])
	if err != nil {
		return st, nil, err
	}
	if !s.Live {
		return st, nil, errors.New("a checkpoint without its calls in flight")
	}
	return st, s, nil
}

// checkpointing is one run's checkpoints on their way to its
// Checkpointer.
type checkpointing struct {
	s    *Service
	req  *execution.Request
	host *toolHost
	st   runState

	mu sync.Mutex
	// stopped: the run's state outgrew MaxCheckpointBytes and its record
	// says it cannot be continued; it keeps no more checkpoints.
	stopped bool
}

// checkpoint hooks the run of req onto its Checkpointer, when it has one:
// the engine checkpoints it before every effect (catalog.Tool.IsEffect).
// A capability run (its root keeps the checkpoints) and a session's run
// (continued by its session, not by a runner) keep none.
func (s *Service) checkpoint(greq *guest.Request, req *execution.Request, host *toolHost, st runState) {
	if req.Checkpoints == nil || req.Parent != nil || req.InSession() {
		return
	}
	c := &checkpointing{s: s, req: req, host: host, st: st}
	greq.Checkpoint = c.keep
	greq.IsEffect = func(call guest.Call) bool {
		e, ok := host.lookup(call.Server + ":" + call.Tool)
		return ok && e.tool.IsEffect()
	}
}

// keep hands one checkpoint to the Checkpointer. When it is not kept, the
// effects held for it are recorded not sent in the journal, and fail
// with the error returned (UNAVAILABLE, retryable).
func (c *checkpointing) keep(ctx context.Context, susp *guest.Suspension) error {
	c.mu.Lock()
	stopped := c.stopped
	c.mu.Unlock()
	if stopped {
		return nil
	}
	st := c.st
	st.Sandboxes = c.host.budget.Used()
	for id, ok := range c.host.approved {
		if ok {
			st.Approved = append(st.Approved, id)
		}
	}
	slices.Sort(st.Approved)
	blob, err := encodeCheckpoint(st, susp)
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), checkpointTimeout)
	defer cancel()
	switch {
	case err != nil:
		err = fmt.Errorf("encoding the checkpoint: %w", err)
	case len(blob) > suspend.MaxCheckpointBytes:
		// The run goes on, as the engine lets it, without continuation:
		// its record says so first (a runner that dies now leaves it
		// failed), and its effects are still journalled, never sent twice.
		if err = c.req.Checkpoints.Uncontinuable(kctx, "checkpoint_bytes"); err == nil {
			c.s.log.WarnContext(ctx, "execution not continuable: its state outgrew a checkpoint", "execution_id", c.req.ExecutionID,
				"bytes", len(blob), "limit", suspend.MaxCheckpointBytes)
			c.mu.Lock()
			c.stopped = true
			c.mu.Unlock()
			return nil
		}
	default:
		err = c.req.Checkpoints.Checkpoint(kctx, blob)
	}
	if err == nil {
		return nil
	}
	c.s.log.ErrorContext(ctx, "checkpoint not kept: the effects waiting for it are not sent", "execution_id", c.req.ExecutionID, "err", err)
	if errors.Is(err, execution.ErrClaimLost) {
		// Another runner goes on with the execution: this one writes
		// nothing more of it, the journal included.
		return fault.Wrap(fault.Conflict, err, "not sent: another runner took the execution over")
	}
	var sending []guest.InFlightCall
	for _, f := range susp.InFlight {
		if f.Sending {
			sending = append(sending, f)
		}
	}
	fe := fault.Wrap(fault.Unavailable, err, "not sent: the execution's checkpoint could not be kept, and an effect is never sent without one")
	fe.Retryable = true
	for _, f := range sending {
		c.host.effects.notSent(ctx, c.host, f, fe)
	}
	return fe
}

// continueRun runs req on from its checkpoint (Request.Checkpoint).
func (s *Service) continueRun(ctx context.Context, req *execution.Request, start time.Time) (*execution.Response, *guest.Result) {
	fail := func(err *fault.Error) (*execution.Response, *guest.Result) {
		resp := execution.Failed(req.ExecutionID, err)
		resp.DurationMS = ms(time.Since(start))
		return resp, nil
	}
	st, susp, err := decodeCheckpoint(req.Checkpoint)
	if err != nil {
		return fail(fault.Wrap(fault.Internal, err, "the execution's checkpoint could not be read, so it is not continued"))
	}
	if susp.GuestHash != s.engine.WasmHash() {
		return fail(fault.New(fault.ResumeIncompatible, "execution %s was checkpointed by another build of the sandbox (guest %s; this one runs %s), "+
			"which alone can continue it", req.ExecutionID, susp.GuestHash, s.engine.WasmHash()))
	}
	names := make([]string, len(susp.Tools))
	for i, t := range susp.Tools {
		names[i] = t.FullName()
	}
	ts, ferr := s.toolSet(ctx, req, names)
	if ferr != nil {
		return fail(ferr)
	}
	approved := map[int]bool{}
	for _, id := range st.Approved {
		approved[id] = true
	}
	host := &toolHost{service: s, req: req, entries: ts.entries, visible: ts.visible, forbidden: ts.forbidden,
		budget: execution.NewBudget(s.sandbox - st.Sandboxes), approved: approved, effects: s.newEffectLog(req, false)}
	greq := guest.Request{ExecutionID: req.ExecutionID, Host: host}
	s.hook(ctx, &greq, req, host)
	s.checkpoint(&greq, req, host, st)
	res := s.engine.Resume(ctx, susp, greq, inFlightDecisions(susp, host))
	return s.response(ctx, res, req, host, start), res
}

// inFlightDecisions decide what the engine does not make again of the
// calls in flight at a checkpoint: capability calls, whose runs may have
// made effects of their own, fail OUTCOME_UNKNOWN. Everything else is made
// again through the host, where the journal decides each effect.
func inFlightDecisions(susp *guest.Suspension, host *toolHost) map[int]guest.Decision {
	out := map[int]guest.Decision{}
	for _, f := range susp.InFlight {
		full := f.Server + ":" + f.Tool
		e, ok := host.lookup(full)
		if !ok || e.tool.Kind != trace.KindCapability {
			continue
		}
		out[f.CallID] = guest.Decision{Outcome: &guest.Outcome{Error: &fault.Error{Code: fault.OutcomeUnknown, Tool: full,
			Details: map[string]any{"execution_id": host.req.ExecutionID, "call_id": f.CallID, "server": f.Server, "tool": f.Tool, "journal": "executions/" + host.req.ExecutionID},
			Message: fmt.Sprintf("%s (call %d) was running when its runner stopped, and is not run again: its run may have made effects of its own; "+
				"check what it did, and reconcile", full, f.CallID)}}}
	}
	return out
}
