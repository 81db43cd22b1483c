package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
	pol "github.com/pml-sandbox/pml/internal/policy"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/trace"
	"github.com/pml-sandbox/pml/internal/tracectx"
)

// Durable executions. With Request.Approval "suspend", a call that needs
// approval is parked instead of run (the engine asks hook's Park); when
// every call the script awaits is parked, the run suspends and Execute
// saves it to the suspension store and answers StatusSuspended with the
// pending calls. Resume loads it in any process of the same guest build,
// claims it (at most one resumer wins), serves its calls with the tool set
// the request had, and either finishes it or saves it again when it
// suspends anew. What the executor must remember of the request lives beside
// the image, in durableState.

// durableState is what the executor keeps of a suspended execution's request
// beside its image (suspend.Record.Bridge): what a resumer needs to serve
// its calls as the request asked, and what its trace record carries over.
// Never the code or the arguments: the image holds what the run needs of
// them, and this is kept in the clear.
type durableState struct {
	Tools         []string `json:"tools,omitempty"`
	ParseJSONText bool     `json:"parse_json_text,omitempty"`
	Source        string   `json:"source,omitempty"`
	// Capabilities are the request's pinned versions: the resumed run
	// calls what the first one would have.
	Capabilities map[string]int `json:"capabilities,omitempty"`
	// For the trace record, which every run rewrites whole.
	CodeHash  string        `json:"code_hash"`
	CodeBytes int           `json:"code_bytes"`
	StartedAt time.Time     `json:"started_at"`
	RunMS     float64       `json:"run_ms"`           // the runs' durations so far
	CPUMS     float64       `json:"cpu_ms,omitempty"` // and their CPU time
	Events    []trace.Event `json:"events,omitempty"`
	// Sandboxes is what the runs so far spent of the request's sandbox
	// budget.
	Sandboxes int `json:"sandboxes,omitempty"`
	// Waits names the calls the execution waits for now, without their
	// arguments (what a suspension notice tells): an approval page lists
	// it from the record alone, without reading its image.
	Waits []execution.PendingTool `json:"waits,omitempty"`
	// Plan is the script's plan: its call sites of tools that need a
	// person, and the grants in force (plan.go).
	Plan *planState `json:"plan,omitempty"`
	// Session is the session the execution holds while it waits
	// (sessionwait.go).
	Session *heldSession `json:"session,omitempty"`
	// RollbackOf is, for a rollback's own execution, the execution it
	// rolls back: whoever ends it (a resume, a cancel) records its
	// compensations there (finishRollback).
	RollbackOf string `json:"rollback_of,omitempty"`
}

// encode is st as Record.Bridge. Its oldest events go when there are too
// many to keep (only a run suspended hundreds of times has), so that a
// save never fails on them.
func (st *durableState) encode() (json.RawMessage, error) {
	for {
		b, err := json.Marshal(st)
		if err != nil || len(b) <= suspend.MaxBridgeBytes || len(st.Events) == 0 {
			return b, err
		}
		st.Events = st.Events[1:]
	}
}

// storeTimeout bounds a write to the suspension store after a run: it
// must happen even when the caller has gone, or the execution would be
// left claimed (and end abandoned) or unsaved.
const storeTimeout = 10 * time.Second

// suspended saves the first run of req, which has suspended, and makes
// resp its StatusSuspended answer.
func (s *Service) suspended(ctx context.Context, req *execution.Request, resp *execution.Response, susp *guest.Suspension, ex *trace.Execution, start time.Time, out runOut) {
	st := &durableState{Tools: req.Tools, ParseJSONText: req.ParseJSONText, Source: string(req.Source), Capabilities: req.Capabilities,
		CodeHash: ex.CodeHash, CodeBytes: ex.CodeBytes, StartedAt: start, RunMS: resp.DurationMS, CPUMS: ex.CPUMS, Sandboxes: resp.Sandboxes,
		Plan: out.plan, Session: heldOf(out.sess), RollbackOf: req.RollbackOf}
	// The code goes with the image (user data, like it), never into the
	// record's metadata: whoever decides reads the calls in their context.
	susp.Source = req.Code
	rec := &suspend.Record{ID: req.ExecutionID, Principal: req.Principal}
	s.park(ctx, rec, st, susp, resp, ex)
	if out.sess != nil {
		s.holdSession(ctx, out.sess, rec, resp)
	}
}

// park saves a suspended run as rec (new, or the claimed record of a
// resumed run) and answers resp with its pending calls. When the state
// cannot be saved the execution fails: its parked calls will never run.
func (s *Service) park(ctx context.Context, rec *suspend.Record, st *durableState, susp *guest.Suspension, resp *execution.Response, ex *trace.Execution) {
	pending := pendingOf(susp.Parked, st.Plan)
	ids := make([]int, len(susp.Parked))
	for i, p := range susp.Parked {
		ids[i] = p.CallID
	}
	before := st.Events
	st.Events = append(slices.Clone(st.Events), trace.Event{Type: trace.EventSuspend, At: time.Now().UTC(), Pending: ids})
	st.Waits = st.Waits[:0]
	for _, p := range pending {
		// A call its server asked about is listed as such (the question
		// cut short: the record's metadata is bounded, and the page reads
		// it whole from the image).
		st.Waits = append(st.Waits, execution.PendingTool{CallID: p.CallID, Tool: p.Server + ":" + p.Tool, Question: cutText(questionText(p.Questions), maxWaitQuestion)})
	}
	bridge, err := st.encode()
	if err == nil {
		rec.Bridge, rec.Suspension = bridge, susp
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
		err = s.store.Save(sctx, rec)
		cancel()
	}
	if err != nil {
		s.log.ErrorContext(ctx, "suspended execution not saved", "execution_id", rec.ID, "err", err)
		ex.Events = before
		resp.Error = fault.Wrap(fault.Internal, err, "the execution suspended, but its state could not be saved; its pending calls will not run")
		if limit := fault.As(err); limit.Code == fault.LimitExceeded {
			// The principal's quota of suspended executions: which, and
			// how to make room.
			resp.Error = fault.Limitf(limit.Limit, "the execution would wait for a person, but %s; its pending calls will not run", limit.Message)
		}
		for i, c := range resp.Calls {
			if c.Status == trace.StatusParked {
				resp.Calls[i].Status = trace.StatusNotRun
			}
		}
		return
	}
	ex.Events = st.Events
	resp.Status, resp.Pending, resp.ExpiresAt = execution.StatusSuspended, pending, rec.ExpiresAt
	resp.StateVersion, resp.Owner, resp.Approvers = rec.Version, rec.Principal, s.policy.Deciders()
	resp.Plan = st.Plan.doc(s.maxGrant)
	if s.notify != nil {
		n := execution.SuspensionNotice{ExecutionID: rec.ID, Principal: rec.Principal, Source: execution.Source(st.Source), ExpiresAt: rec.ExpiresAt}
		for _, p := range pending {
			n.Pending = append(n.Pending, execution.PendingTool{CallID: p.CallID, Tool: p.Server + ":" + p.Tool, Question: questionText(p.Questions)})
		}
		s.notify(ctx, n)
	}
}

// Resume continues a suspended execution: approved calls run, rejected
// ones fail in the script with REJECTED, and the script goes on; it may
// suspend again (the answer is then StatusSuspended, as Execute's). The
// execution is claimed first, so of concurrent resumes one runs and the
// others get CONFLICT. A refusal — nothing ran — is the *fault.Error:
// NOT_FOUND (unknown, or another principal's: told alike), EXPIRED,
// FORBIDDEN (the policy does not let the caller approve), CONFLICT (not
// waiting any more), RESUME_INCOMPATIBLE (suspended by another guest build),
// INVALID_REQUEST (decisions on calls that are not pending), or a
// retryable UNAVAILABLE when the store fails.
func (s *Service) Resume(ctx context.Context, rr execution.ResumeRequest) (*execution.Response, *fault.Error) {
	start := time.Now()
	if s.store == nil {
		return nil, fault.New(fault.NotFound, "this service keeps no suspended executions")
	}
	if ferr := execution.CheckCallDetail(rr.CallDetail); ferr != nil {
		return nil, ferr
	}
	decisions, ferr := rr.CallDecisions()
	if ferr != nil {
		return nil, ferr
	}
	id := rr.ExecutionID
	rec, err := s.store.Load(ctx, id)
	if err != nil {
		return nil, s.loadFault(id, rr.Principal, err)
	}
	// Who decides first: nothing about another's execution is told to
	// someone who may not decide it.
	if ferr := s.mayDecide(rr, rec.Principal, withAll(rr, decisions)); ferr != nil {
		return nil, ferr
	}
	if rec.State != suspend.Suspended {
		return nil, notWaiting(rec)
	}
	if decisions, ferr = expandAll(rr, decisions, rec.Suspension.Parked); ferr != nil {
		return nil, ferr
	}
	if rr.Version != 0 && rr.Version != rec.Version {
		return nil, &fault.Error{Code: fault.Conflict, Details: map[string]any{"state": rec.State, "version": rec.Version},
			Message: fmt.Sprintf("execution %s has moved on since this question was asked (version %d, now %d): the answer was given already", id, rr.Version, rec.Version)}
	}
	// Before claiming, so that the execution stays for a process of the
	// right build.
	if h := rec.Suspension.GuestHash; h != s.engine.WasmHash() {
		return nil, fault.New(fault.ResumeIncompatible, "execution %s was suspended by another build of the sandbox (guest %s; this one runs %s): resume it where that build runs", id, h, s.engine.WasmHash())
	}
	if ferr := checkDecisions(decisions, rec.Suspension.Parked); ferr != nil {
		return nil, ferr
	}
	if ferr := checkAnswers(decisions, rec.Suspension.Parked); ferr != nil {
		return nil, ferr
	}
	st, ferr := loadState(rec)
	if ferr != nil {
		return nil, ferr
	}
	approvals, grants, ferr := s.grant(rr, rec.Principal, decisions, rec.Suspension.Parked, st, start)
	if ferr != nil {
		return nil, ferr
	}
	// The store checks the claim against the owner: who may decide for
	// the owner was settled above.
	claimed, err := s.store.Claim(ctx, id, rec.Version, rec.Principal)
	if err != nil {
		return nil, storeFault(id, err)
	}
	// The execution is ours now: from here on, it is finished or saved
	// whatever happens.
	return s.resumeClaimed(ctx, rr, claimed, st, resumed{decisions: decisions, approvals: approvals, grants: grants}, start), nil
}

// withAll is decisions with the decision on every pending call, if rr
// makes one, under call id 0: what the policy weighs.
func withAll(rr execution.ResumeRequest, decisions map[int]execution.Decision) map[int]execution.Decision {
	all, ok := rr.All()
	if !ok {
		return decisions
	}
	out := maps.Clone(decisions)
	out[0] = all
	return out
}

// resumed is what a resumption decided: the decisions by call id (the
// decision on all of them, and grants, extended to the calls they
// cover), who approved each call approved, and the grants it made.
type resumed struct {
	decisions map[int]execution.Decision
	approvals map[int]*trace.Approval
	grants    []trace.Grant
}

// mayDecide refuses decisions the deployment's policy does not let rr's
// decider make on owner's execution, weighed by the channel they came by
// (an answer through the owner's MCP client was checked by the MCP front
// end against the sealed state it asked with): FORBIDDEN, or NOT_FOUND as
// for an unknown id to anyone who may not decide it at all.
//
// Answers to a remote server's questions are weighed by MayAnswer (as
// approvals are: see there).
func (s *Service) mayDecide(rr execution.ResumeRequest, owner string, decisions map[int]execution.Decision) *fault.Error {
	approve, answer, reject := decisionKinds(decisions)
	d := approval.Decider{Principal: rr.Principal, Channel: rr.Channel}
	grant := granting(decisions)
	may := (!approve || s.policy.MayApprove(d, owner)) && (!answer || s.policy.MayAnswer(d, owner)) && (!reject || s.policy.MayReject(d, owner)) &&
		(!grant || s.policy.MayGrant(d, owner))
	switch {
	case may:
		return nil
	case !s.policy.MayAccess(rr.Principal, owner):
		return storeFault(rr.ExecutionID, suspend.ErrForbidden)
	case grant && !s.policy.MayGrant(d, owner):
		return s.grantRefusal(rr.ExecutionID)
	case answer && !approve:
		return &fault.Error{Code: fault.Forbidden, Details: map[string]any{"reason": "policy"},
			Message: fmt.Sprintf("answering the questions execution %s waits for is not the caller's to do here: they are its user's, "+
				"asked through the caller's MCP client or on the approval page (or by an approver); the caller may reject them", rr.ExecutionID)}
	}
	return &fault.Error{Code: fault.Forbidden, Details: map[string]any{"reason": "policy"},
		Message: fmt.Sprintf("approving is not the caller's to do here: under this deployment's policy the calls execution %s waits for are approved by %s; "+
			"the caller may reject them", rr.ExecutionID, s.policy.Deciders())}
}

// Waiting implements execution.Executor: the suspended document of id,
// from the store, as Execute answered it when it suspended.
func (s *Service) Waiting(ctx context.Context, id string) (*execution.Response, *fault.Error) {
	if s.store == nil {
		return nil, fault.New(fault.NotFound, "this service keeps no suspended executions")
	}
	rec, err := s.store.Load(ctx, id)
	if err != nil {
		return nil, storeFault(id, err)
	}
	if rec.State != suspend.Suspended {
		return nil, notWaiting(rec)
	}
	doc := waitingDoc(rec, s.policy, s.maxGrant)
	doc.Effects = s.effectsOf(ctx, id, false)
	return doc, nil
}

// waitingDoc is the suspended document of rec, loaded with its
// suspension.
func waitingDoc(rec *suspend.Record, policy approval.Policy, maxGrant int) *execution.Response {
	var st durableState
	_ = json.Unmarshal(rec.Bridge, &st) // without it, the document lacks the plan
	return &execution.Response{ExecutionID: rec.ID, Status: execution.StatusSuspended, ExpiresAt: rec.ExpiresAt, CreatedAt: rec.CreatedAt,
		UpdatedAt: rec.UpdatedAt, StateVersion: rec.Version, Owner: rec.Principal, Approvers: policy.Deciders(), Logs: []trace.LogEntry{},
		Pending: pendingOf(rec.Suspension.Parked, st.Plan), Code: rec.Suspension.Source, Plan: st.Plan.doc(maxGrant)}
}

// maxOwnerScans bounds the pages of the store's owners WaitingOwners
// reads to find a page of owners the person may see.
const maxOwnerScans = 4

// WaitingOwners returns the principals whose executions may wait for
// decisions now and whom mayList lets through, a page at a time (after:
// "" or the next cursor of the page before; at most limit): what an
// approval page groups its list by. next is "" after the last page. An
// owner whose executions all ended may still be named: WaitingOf tells.
func (s *Service) WaitingOwners(ctx context.Context, after string, limit int, mayList func(owner string) bool) ([]string, string, *fault.Error) {
	if s.store == nil {
		return nil, "", nil
	}
	var out []string
	next := after
	for range maxOwnerScans {
		owners, n, err := s.store.Owners(ctx, next, limit-len(out))
		if err != nil {
			return nil, "", storeFault("", err)
		}
		for _, o := range owners {
			if mayList(o) {
				out = append(out, o)
			}
		}
		if next = n; next == "" || len(out) == limit {
			break
		}
	}
	return out, next, nil
}

// WaitingOf returns owner's executions waiting for decisions now, soonest
// to expire first, a page at a time (after and limit as for
// WaitingOwners). Each is a suspended document without arguments or code
// (Pending names the calls only), read from the records alone: no image
// is loaded. Waiting reads one whole. The caller decides whether the
// person may see owner's.
func (s *Service) WaitingOf(ctx context.Context, owner, after string, limit int) ([]*execution.Response, string, *fault.Error) {
	if s.store == nil {
		return nil, "", nil
	}
	recs, next, err := s.store.ListOf(ctx, owner, after, limit)
	if err != nil {
		return nil, "", storeFault("", err)
	}
	var out []*execution.Response
	for _, r := range recs {
		var st durableState
		if json.Unmarshal(r.Bridge, &st) != nil {
			continue
		}
		doc := &execution.Response{ExecutionID: r.ID, Status: execution.StatusSuspended, ExpiresAt: r.ExpiresAt, CreatedAt: r.CreatedAt,
			UpdatedAt: r.UpdatedAt, StateVersion: r.Version, Owner: r.Principal, Approvers: s.policy.Deciders(), Logs: []trace.LogEntry{}}
		for _, w := range st.Waits {
			server, tool, _ := strings.Cut(w.Tool, ":")
			reason := execution.PendingApproval
			if w.Question != "" {
				reason = execution.PendingQuestion
			}
			doc.Pending = append(doc.Pending, execution.Pending{CallID: w.CallID, Server: server, Tool: tool, Reason: reason})
		}
		out = append(out, doc)
	}
	return out, next, nil
}

// maxWaitQuestion bounds the question a record's Waits keeps of a call.
const maxWaitQuestion = 200

// cutText cuts s to at most n bytes, not inside a character, marking the
// cut.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// pendingOf is how a suspended execution's answer names the calls it
// waits for.
func pendingOf(parked []guest.ParkedCall, plan *planState) []execution.Pending {
	pending := make([]execution.Pending, len(parked))
	for i, p := range parked {
		pending[i] = execution.Pending{CallID: p.CallID, Server: p.Server, Tool: p.Tool, Args: p.Args, Reason: execution.PendingApproval,
			Site: siteKey(p.Line, p.Column), Line: plan.line(p.Server, p.Tool, p.Line, p.Column)}
		if len(p.Question) > 0 {
			// What the server asked, never its state.
			if q, err := readQuestion(p.Question); err == nil {
				pending[i].Reason, pending[i].Questions = execution.PendingQuestion, q.Requests
			}
		}
	}
	return pending
}

// notWaiting is the refusal to act on rec, which is not suspended (any
// more): CONFLICT, or what its state says.
func notWaiting(rec *suspend.Record) *fault.Error {
	return storeFault(rec.ID, &suspend.StateError{ID: rec.ID, State: rec.State, Version: rec.Version, FailureCode: rec.FailureCode})
}

// loadState reads what the executor saved beside rec's suspension.
func loadState(rec *suspend.Record) (*durableState, *fault.Error) {
	var st durableState
	if err := json.Unmarshal(rec.Bridge, &st); err != nil {
		return nil, fault.Wrap(fault.Internal, err, "reading the suspended execution's request")
	}
	return &st, nil
}

// Status implements execution.Executor. The service keeps no runs of its
// own — internal/runs keeps asynchronous executions' documents, and traces
// what ran — so every id is NOT_FOUND here.
func (s *Service) Status(_ context.Context, id, _ string) (*execution.Response, *fault.Error) {
	return nil, fault.New(fault.NotFound, "no asynchronous execution %q", id)
}

// Cancel implements execution.Executor for a suspended execution: its
// owner, or an approver, ends it without deciding its pending calls, which
// never run. It is claimed first, as a resume would be, so a cancel and a
// resume at once are one after the other: the second finds it not waiting
// (CONFLICT). The trace records it as failed CANCELLED, with a cancel
// event. Running executions are internal/runs' to cancel.
func (s *Service) Cancel(ctx context.Context, cr execution.CancelRequest) (*execution.Response, *fault.Error) {
	id := cr.ExecutionID
	if s.store == nil {
		return nil, fault.New(fault.NotFound, "no suspended execution %q: this service keeps none", id)
	}
	rec, err := s.store.Load(ctx, id)
	if err != nil {
		return nil, s.loadFault(id, cr.Principal, err)
	}
	if !s.policy.MayAccess(cr.Principal, rec.Principal) {
		return nil, storeFault(id, suspend.ErrForbidden)
	}
	if rec.State != suspend.Suspended {
		return nil, notWaiting(rec)
	}
	st, ferr := loadState(rec)
	if ferr != nil {
		return nil, ferr
	}
	claimed, err := s.store.Claim(ctx, id, rec.Version, rec.Principal)
	if err != nil {
		return nil, storeFault(id, err)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	if err := s.store.Finish(sctx, id, claimed.Version, suspend.Failed, fault.Cancelled); err != nil {
		// Claimed and never resumed: it fails as abandoned when the
		// claim's lease ends, and its calls never run either way.
		s.log.ErrorContext(ctx, "cancelled execution not recorded as finished", "execution_id", id, "err", err)
	}
	if st.Session != nil {
		// The session it held goes back as the execution before it left
		// it.
		s.releaseHeld(sctx, id, claimed.Principal, st.Session)
	}
	now := time.Now().UTC()
	who := cr.Principal
	if who == "" {
		who = "the caller"
	}
	resp := &execution.Response{ExecutionID: id, Status: execution.StatusCancelled, Logs: []trace.LogEntry{}, Calls: []trace.Call{},
		Error: fault.New(fault.Cancelled, "execution %s was cancelled by %s while it waited for decisions; its pending calls did not run", id, who)}
	if susp := claimed.Suspension; susp != nil {
		resp.Logs = append(resp.Logs, susp.Logs...)
		for _, c := range susp.Calls {
			if c.Status == trace.StatusParked {
				c.Status = trace.StatusNotRun
			}
			resp.Calls = append(resp.Calls, c)
		}
	}
	resp.DurationMS = st.RunMS
	resp.Sandboxes = st.Sandboxes
	if susp := claimed.Suspension; susp != nil {
		s.settleRejected(ctx, id, questionCalls(susp.Parked), resp.Error)
	}
	resp.Effects = s.effectsOf(ctx, id, true)
	ex := trace.Execution{ID: id, CodeHash: st.CodeHash, CodeBytes: st.CodeBytes, StartedAt: st.StartedAt, Source: st.Source,
		Principal: rec.Principal, DurationMS: st.RunMS, Pins: st.Capabilities, RollbackOf: st.RollbackOf,
		Events: append(st.Events, trace.Event{Type: trace.EventCancel, At: now, Principal: cr.Principal,
			Policies: s.policy.Decide(ctx, pol.ActionRead, approval.Decider{Principal: cr.Principal}, id, rec.Principal).Policies})}
	if st.RollbackOf != "" {
		resp.RollbackOf = st.RollbackOf
		s.finishRollback(ctx, st.RollbackOf, id, resp)
	}
	s.record(ctx, ex, resp)
	return resp, nil
}

// checkDecisions refuses decisions on calls that are not pending: a typo
// must not read as a decision taken.
func checkDecisions(decisions map[int]execution.Decision, parked []guest.ParkedCall) *fault.Error {
	pending := make([]int, len(parked))
	for i, p := range parked {
		pending[i] = p.CallID
	}
	var unknown []int
	for id := range decisions {
		if !slices.Contains(pending, id) {
			unknown = append(unknown, id)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	return &fault.Error{Code: fault.InvalidRequest,
		Message: fmt.Sprintf("decisions name calls that are not pending: %s (pending: %s)", joinInts(unknown), joinInts(pending)),
		Details: map[string]any{"unknown": unknown, "pending": pending}}
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ", ")
}

// resumeClaimed runs a claimed execution on, then saves or finishes it.
func (s *Service) resumeClaimed(ctx context.Context, rr execution.ResumeRequest, claimed *suspend.Record, st *durableState, dec resumed, start time.Time) *execution.Response {
	id := claimed.ID
	// The request as it was, but for its code: the image holds what the
	// run needs of it. It belongs to the principal that suspended it,
	// whoever decides.
	req := execution.Request{ParseJSONText: st.ParseJSONText, Approval: execution.ApprovalSuspend, Capabilities: st.Capabilities,
		CallDetail: rr.CallDetail, ExecutionID: id, Principal: claimed.Principal, Source: execution.Source(st.Source),
		TraceHeader: rr.TraceHeader, OnEvent: rr.OnEvent, RollbackOf: st.RollbackOf}
	ctx = s.startSpan(ctx, &req, start)
	ex := trace.Execution{ID: id, CodeHash: st.CodeHash, CodeBytes: st.CodeBytes, StartedAt: st.StartedAt, Source: st.Source,
		Principal: claimed.Principal, TraceID: tracectx.TraceID(ctx, rr.TraceHeader), TraceHeader: rr.TraceHeader, Pins: st.Capabilities,
		RollbackOf: st.RollbackOf}
	ev := resumeEvent(dec.decisions, rr, claimed.Principal, s.policy, start)
	ev.Grants = dec.grants
	st.Events = append(st.Events, ev)

	var resp *execution.Response
	var res *guest.Result
	ferr := req.SetTools(st.Tools)
	gd, err := engineDecisions(dec.decisions, claimed.Suspension.Parked)
	if err != nil && ferr == nil {
		// Checked before the claim (checkAnswers): the store's copy
		// cannot be read.
		ferr = fault.Wrap(fault.Internal, err, "reading the answers")
	}
	var sess *sessionRun
	lost := false
	if ferr == nil && st.Session != nil {
		// Before anything runs: the session must still be this
		// execution's.
		sess, ferr = s.resumeSession(ctx, id, claimed.Principal, st.Session)
		lost = ferr != nil
	}
	var ts *toolSet
	if ferr == nil {
		// The names of the suspended run's tool table, resolved now.
		names := make([]string, len(claimed.Suspension.Tools))
		for i, t := range claimed.Suspension.Tools {
			names[i] = t.FullName()
		}
		ts, ferr = s.toolSet(ctx, &req, names)
	}
	if ferr != nil {
		resp = execution.Failed(id, ferr)
	} else {
		approved := map[int]bool{}
		for cid, d := range dec.decisions {
			approved[cid] = d.Approve
			if g, ok := gd[cid]; ok && g.Approve {
				g.Approval = dec.approvals[cid]
				gd[cid] = g
			}
		}
		if st.Plan == nil {
			st.Plan = &planState{}
		}
		host := &toolHost{service: s, req: &req, entries: ts.entries, visible: ts.visible, forbidden: ts.forbidden,
			budget: execution.NewBudget(s.sandbox - st.Sandboxes), approved: approved, effects: s.newEffectLog(&req, false),
			gate: newGate(st.Plan)}
		if st.Session != nil {
			host.session = st.Session.ID
		}
		s.settleRejected(ctx, id, rejectedQuestions(dec.decisions, claimed.Suspension.Parked),
			fault.New(fault.Rejected, "the server's question was declined or rejected"))
		greq := guest.Request{ExecutionID: id, Host: host}
		s.hook(ctx, &greq, &req, host)
		res = s.engine.Resume(ctx, claimed.Suspension, greq, gd)
		resp = s.response(ctx, res, &req, host, start)
	}
	resp.DurationMS = ms(time.Since(start))
	st.RunMS += resp.DurationMS
	resp.Sandboxes += st.Sandboxes
	st.Sandboxes = resp.Sandboxes
	ex.DurationMS = st.RunMS
	if res != nil {
		st.CPUMS += ms(res.CPUTime)
	}
	ex.CPUMS = st.CPUMS

	if res != nil && res.Suspended != nil {
		res.Suspended.Source = claimed.Suspension.Source
		s.park(ctx, claimed, st, res.Suspended, resp, &ex)
		if sess != nil {
			s.holdSession(ctx, sess, claimed, resp)
		}
	} else {
		s.finishResumed(ctx, claimed, st, resp, &ex, lost)
		if sess != nil {
			s.closeSession(ctx, sess, resp, res)
		} else if st.Session != nil {
			s.lostSession(ctx, st.Session, resp)
		}
		if st.Session != nil {
			ex.SessionID = st.Session.ID
		}
		if st.RollbackOf != "" {
			resp.RollbackOf = st.RollbackOf
			s.finishRollback(ctx, st.RollbackOf, id, resp)
		}
	}
	s.record(ctx, ex, resp)
	resp.ApplyCallDetail(rr.CallDetail)
	return resp
}

// finishResumed records a resumed execution that ended (or never ran on:
// lost, when the session it held had moved on).
func (s *Service) finishResumed(ctx context.Context, claimed *suspend.Record, st *durableState, resp *execution.Response, ex *trace.Execution, lost bool) {
	ex.Events = st.Events
	state, code := suspend.Done, fault.Code("")
	if resp.Error != nil && (lost || resp.Error.Code == fault.SandboxError || resp.Error.Code == fault.Internal) {
		// The sandbox or the host failed, or the session moved on: not
		// the script.
		state, code = suspend.Failed, resp.Error.Code
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	if err := s.store.Finish(sctx, claimed.ID, claimed.Version, state, code); err != nil {
		// The calls have run and the answer stands; the record is
		// left claimed, and fails as abandoned when its lease ends.
		s.log.ErrorContext(ctx, "resumed execution not recorded as finished", "execution_id", claimed.ID, "err", err)
	}
}

// resumeEvent records a resumption's decisions, in call order, who made
// them and as what.
func resumeEvent(decisions map[int]execution.Decision, rr execution.ResumeRequest, owner string, policy approval.Policy, at time.Time) trace.Event {
	ev := trace.Event{Type: trace.EventResume, At: at.UTC(), Principal: rr.Principal, Via: via(rr, owner, policy)}
	for cid, d := range decisions {
		ev.Decisions = append(ev.Decisions, trace.Decision{CallID: cid, Decision: d.Word(), Reason: d.Reason})
	}
	ev.Policies = decisionPolicies(decisions, rr, owner, policy)
	slices.SortFunc(ev.Decisions, func(a, b trace.Decision) int { return a.CallID - b.CallID })
	return ev
}

// decisionPolicies are the ids of the policies that let rr's decider make
// these decisions on owner's execution (each kind asked as mayDecide
// asked it), each once.
func decisionPolicies(decisions map[int]execution.Decision, rr execution.ResumeRequest, owner string, p approval.Policy) []string {
	approve, answer, reject := decisionKinds(decisions)
	grant := granting(decisions)
	d := approval.Decider{Principal: rr.Principal, Channel: rr.Channel}
	var out []string
	for _, k := range []struct {
		asked  bool
		action pol.Action
	}{{approve, pol.ActionApprove}, {grant, pol.ActionGrant}, {answer, pol.ActionAnswer}, {reject, pol.ActionReject}} {
		if !k.asked {
			continue
		}
		for _, id := range p.Decide(context.Background(), k.action, d, rr.ExecutionID, owner).Policies {
			if !slices.Contains(out, id) {
				out = append(out, id)
			}
		}
	}
	return out
}

// loadFault is storeFault for a record principal could not load: an
// expired one is told expired only to whom may access it, and unknown to
// anyone else.
func (s *Service) loadFault(id, principal string, err error) *fault.Error {
	var ee *suspend.ExpiredError
	if errors.As(err, &ee) && !s.policy.MayAccess(principal, ee.Principal) {
		err = suspend.ErrNotFound
	}
	return storeFault(id, err)
}

// storeFault turns a suspension store's error into the fault callers
// branch on (and HTTP maps to 404, 410, 403, 409, 503).
func storeFault(id string, err error) *fault.Error {
	var se *suspend.StateError
	switch {
	case errors.Is(err, suspend.ErrNotFound), errors.Is(err, suspend.ErrForbidden):
		// Another principal's execution is told as an unknown one, word
		// for word: an id must not tell whether it exists.
		return fault.New(fault.NotFound, "no suspended execution %q", id)
	case errors.Is(err, suspend.ErrExpired):
		return fault.Wrap(fault.Expired, err, "")
	case errors.As(err, &se):
		d := map[string]any{"state": se.State, "version": se.Version}
		msg := fmt.Sprintf("execution %s is not waiting for decisions: it is %s", id, se.State)
		if se.FailureCode != "" {
			d["failure_code"] = se.FailureCode
			msg += " (" + string(se.FailureCode) + ")"
		}
		if se.State == suspend.Resuming {
			msg += ": another resume claimed it"
		}
		return &fault.Error{Code: fault.Conflict, Message: msg, Details: d}
	case errors.Is(err, suspend.ErrConflict):
		return fault.Wrap(fault.Conflict, err, "")
	}
	fe := fault.Wrap(fault.Unavailable, err, "the suspension store failed")
	fe.Retryable = true
	return fe
}

// questionCalls are the parked calls that wait on their server's question:
// effects sent once, pending in the journal.
func questionCalls(parked []guest.ParkedCall) []int {
	var out []int
	for _, p := range parked {
		if len(p.Question) > 0 {
			out = append(out, p.CallID)
		}
	}
	return out
}

// rejectedQuestions are the calls of questionCalls that decisions reject
// (a decline, a cancel or a reject): they will never be sent again.
func rejectedQuestions(decisions map[int]execution.Decision, parked []guest.ParkedCall) []int {
	var out []int
	for _, id := range questionCalls(parked) {
		d, ok := decisions[id]
		if !ok {
			continue
		}
		if !d.Approve || declines(d.Answers) {
			out = append(out, id)
		}
	}
	return out
}

// declines reports whether answers decline or cancel any question (the
// engine then rejects the call).
func declines(answers map[string]json.RawMessage) bool {
	for _, raw := range answers {
		var a answerResult
		if json.Unmarshal(raw, &a) == nil && (a.Action == "decline" || a.Action == "cancel") {
			return true
		}
	}
	return false
}
