package executor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/compensate"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/journal"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/trace"
	"github.com/pml-sandbox/pml/internal/tracedb"
)

// shopSource is one server, "shop", for this package's rollback tests:
// create makes an order ({"id": "o-N"}), cancel undoes one (and fails for
// the ids in refuse), put stores a value and answers the one it replaced,
// note is an effect nobody declared an undo for, wipe a destructive undo.
// It records the calls it is sent, in order.
type shopSource struct {
	mu     sync.Mutex
	next   int
	sent   []string
	orders map[string]bool
	kv     map[string]json.RawMessage
	refuse map[string]bool
	// destructive makes cancel destructive (it then needs approval).
	destructive bool
}

func (s *shopSource) Tools(context.Context) ([]catalog.Tool, error) {
	yes, no := true, false
	write := catalog.Annotations{ReadOnly: &no, Destructive: &no}
	undo := write
	if s.destructive {
		undo = catalog.Annotations{ReadOnly: &no, Destructive: &yes}
	}
	tpl := func(tool, args string) *compensate.Template {
		t, err := compensate.Compile(tool, json.RawMessage(args))
		if err != nil {
			panic(err)
		}
		return t
	}
	return []catalog.Tool{
		{Server: "shop", Name: "create", Kind: trace.KindMCP, Annotations: write, Compensate: tpl("cancel", `{"id":"$.result.id"}`)},
		{Server: "shop", Name: "cancel", Kind: trace.KindMCP, Annotations: undo},
		{Server: "shop", Name: "put", Kind: trace.KindMCP, Annotations: write, Compensate: tpl("put", `{"key":"$.args.key","value":"$.result.previous"}`)},
		{Server: "shop", Name: "note", Kind: trace.KindMCP, Annotations: write},
		{Server: "shop", Name: "look", Kind: trace.KindMCP, Annotations: catalog.Annotations{ReadOnly: &yes}},
	}, nil
}

func (s *shopSource) Call(_ context.Context, t catalog.Tool, args json.RawMessage, opt execution.CallOptions) (json.RawMessage, error) {
	if t.NeedsApproval() && !opt.AllowDestructive {
		opt.Refused()
		return nil, fault.New(fault.Forbidden, "%s needs approval", t.Name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var a struct {
		ID    string          `json:"id"`
		Key   string          `json:"key"`
		Value json.RawMessage `json:"value"`
		Pad   string          `json:"pad"`
	}
	_ = json.Unmarshal(args, &a)
	s.sent = append(s.sent, t.Name+" "+a.ID+a.Key)
	if s.orders == nil {
		s.orders, s.kv = map[string]bool{}, map[string]json.RawMessage{}
	}
	switch t.Name {
	case "create":
		s.next++
		id := fmt.Sprintf("o-%d", s.next)
		s.orders[id] = true
		return json.RawMessage(fmt.Sprintf(`{"id":%q,"$.args":"$.args.id"}`, id)), nil
	case "cancel":
		if s.refuse[a.ID] || !s.orders[a.ID] {
			return nil, fault.New(fault.ToolError, "order %s cannot be cancelled", a.ID)
		}
		delete(s.orders, a.ID)
		return json.RawMessage(`{"cancelled":true}`), nil
	case "put":
		prev, ok := s.kv[a.Key]
		if !ok {
			prev = json.RawMessage("null")
		}
		s.kv[a.Key] = a.Value
		return json.RawMessage(fmt.Sprintf(`{"previous":%s}`, prev)), nil
	}
	return json.RawMessage(`{}`), nil
}

func (s *shopSource) calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.sent)
}

func (s *shopSource) open() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for id := range s.orders {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// shop is a service over a shopSource with a journal, traces and a store
// of suspended executions.
type shop struct {
	src    *shopSource
	j      journal.Store
	traces *tracedb.Memory
	svc    *executor.Service
}

const approverPrincipal = "jwt:https://idp.example#boss"

func newShop(t *testing.T) *shop {
	sh := &shop{src: &shopSource{}, j: journal.NewFile(t.TempDir(), journal.Options{}), traces: tracedb.NewMemory(0)}
	sh.svc = executor.New(engine, executor.Options{Sources: []execution.ToolSource{sh.src}, Journal: sh.j, Sink: sh.traces, Traces: sh.traces,
		Suspensions: suspend.NewFile(t.TempDir(), suspend.Options{}), Policy: approval.Policy{Approvers: []string{approverPrincipal}}})
	return sh
}

func (sh *shop) run(t *testing.T, principal, code string) *execution.Response {
	t.Helper()
	resp := sh.svc.Execute(context.Background(), execution.Request{Code: code, Principal: principal})
	if !resp.OK {
		t.Fatalf("%s: %+v", code, resp.Error)
	}
	return resp
}

func (sh *shop) rollback(principal, id string, mods ...func(*execution.RollbackRequest)) (*execution.Rollback, *fault.Error) {
	rr := execution.RollbackRequest{ExecutionID: id, Principal: principal}
	for _, m := range mods {
		m(&rr)
	}
	return sh.svc.Rollback(context.Background(), rr)
}

func (sh *shop) entries(t *testing.T, id string) []journal.Entry {
	t.Helper()
	es, err := sh.j.List(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

const threeOrders = `const ids = []
for (let i = 0; i < 3; i++) { ids.push((await mcp.shop.create({})).id); await mcp.shop.look({}) }
return ids`

// TestRollbackInReverseOrder: three applied effects are compensated by
// three calls, newest first, as an execution of the caller's own that
// names the original; the original reads rolled_back, each effect
// compensated by its call; the compensations are effects of the rollback,
// with its keys.
func TestRollbackInReverseOrder(t *testing.T) {
	sh := newShop(t)
	orig := sh.run(t, "alice", threeOrders)
	rb, ferr := sh.rollback("alice", orig.ExecutionID)
	if ferr != nil {
		t.Fatal(ferr)
	}
	if got := sh.src.calls(); strings.Join(got[6:], ",") != "cancel o-3,cancel o-2,cancel o-1" {
		t.Fatalf("sent %v", got)
	}
	if len(sh.src.open()) != 0 || rb.Status != execution.RolledBack || rb.RollbackID == "" || rb.Execution == nil || rb.Execution.RollbackOf != orig.ExecutionID {
		t.Fatalf("open %v; answer %+v", sh.src.open(), rb)
	}
	for i, e := range rb.Effects {
		call := 5 - 2*i // creates are calls 1, 3, 5; newest first
		if e.CallID != call || e.Outcome != execution.CompensationDone || e.Compensation == nil || e.Compensation.CallID != i+1 ||
			e.Compensation.ExecutionID != rb.RollbackID || string(e.Compensation.Args) != fmt.Sprintf(`{"id":"o-%d"}`, 3-i) {
			t.Errorf("effect %d: %+v %+v", i, e, e.Compensation)
		}
	}
	effects := journal.Effects(sh.entries(t, orig.ExecutionID), true)
	if execution.RollbackState(effects) != execution.RolledBack {
		t.Fatalf("document: %+v", effects)
	}
	own := sh.entries(t, rb.RollbackID)
	if len(own) != 3 || own[0].Tool != "cancel" || own[0].Status != journal.Applied || own[0].Key != journal.Key(rb.RollbackID, 1) || own[0].Principal != "alice" {
		t.Fatalf("the rollback's own journal: %+v", own)
	}
	ex, _, err := sh.traces.GetExecution(context.Background(), rb.RollbackID)
	if err != nil || ex.RollbackOf != orig.ExecutionID || ex.Principal != "alice" {
		t.Fatalf("the rollback's trace: %+v %v", ex, err)
	}
}

// TestRollbackAttemptsEveryOne: a compensation that fails leaves the
// others attempted, and the answer and the document say which; a second
// rollback tries only that one again (the compensated are never undone
// twice), and once nothing is left it is refused CONFLICT.
func TestRollbackAttemptsEveryOne(t *testing.T) {
	sh := newShop(t)
	orig := sh.run(t, "alice", threeOrders)
	sh.src.refuse = map[string]bool{"o-2": true}
	rb, ferr := sh.rollback("alice", orig.ExecutionID)
	if ferr != nil {
		t.Fatal(ferr)
	}
	if rb.Status != execution.PartiallyRolledBack || !slices.Equal(sh.src.open(), []string{"o-2"}) {
		t.Fatalf("status %s, open %v", rb.Status, sh.src.open())
	}
	failed := rb.Effects[1]
	if failed.CallID != 3 || failed.Outcome != execution.CompensationFailed || failed.Error == nil || failed.Error.Code != fault.ToolError ||
		!strings.Contains(failed.Error.Message, "o-2 cannot be cancelled") || rb.Effects[0].Outcome != execution.CompensationDone || rb.Effects[2].Outcome != execution.CompensationDone {
		t.Fatalf("effects %+v", rb.Effects)
	}
	doc := journal.Effects(sh.entries(t, orig.ExecutionID), true)
	if doc[1].Compensation == nil || doc[1].Compensation.Status != execution.CompensationFailed || doc[0].Compensation.Status != execution.CompensationDone {
		t.Fatalf("document %+v", doc)
	}

	sh.src.refuse = nil
	before := len(sh.src.calls())
	again, ferr := sh.rollback("alice", orig.ExecutionID)
	if ferr != nil {
		t.Fatal(ferr)
	}
	if sent := sh.src.calls()[before:]; !slices.Equal(sent, []string{"cancel o-2"}) || again.Status != execution.RolledBack {
		t.Fatalf("the second rollback sent %v, status %s", sent, again.Status)
	}
	if again.Effects[0].Outcome != execution.CompensationDone || !strings.Contains(again.Effects[0].Reason, "compensated already") {
		t.Fatalf("effects %+v", again.Effects)
	}
	_, ferr = sh.rollback("alice", orig.ExecutionID)
	if ferr == nil || ferr.Code != fault.Conflict || !strings.Contains(ferr.Message, "rolled back already") {
		t.Fatalf("a third rollback: %+v", ferr)
	}
	if len(sh.src.calls()) != before+1 {
		t.Fatalf("sent %v", sh.src.calls())
	}
}

// TestRollbackWhoMay: the owner and an approver may roll back; another
// principal is told exactly what an unknown id is told.
func TestRollbackWhoMay(t *testing.T) {
	sh := newShop(t)
	orig := sh.run(t, "alice", threeOrders)
	_, other := sh.rollback("mallory", orig.ExecutionID)
	_, unknown := sh.rollback("mallory", "ex_000000000000000000000000")
	if other == nil || unknown == nil || other.Code != fault.NotFound || strings.ReplaceAll(other.Message, orig.ExecutionID, "ID") != strings.ReplaceAll(unknown.Message, "ex_000000000000000000000000", "ID") {
		t.Fatalf("another principal %+v, an unknown id %+v", other, unknown)
	}
	if len(sh.src.calls()) != 6 {
		t.Fatalf("sent %v", sh.src.calls())
	}
	if rb, ferr := sh.rollback(approverPrincipal, orig.ExecutionID); ferr != nil || rb.Status != execution.RolledBack {
		t.Fatalf("an approver: %+v %+v", rb, ferr)
	}
	if ex, _, _ := sh.traces.GetExecution(context.Background(), ""); ex.ID != "" {
		t.Fatal("no such trace")
	}
}

// TestRollbackNothingToDo: a known execution that applied nothing is 200
// (nothing to do, and why), never 404; skipped effects say why, and are
// recorded so.
func TestRollbackNothingToDo(t *testing.T) {
	sh := newShop(t)
	reads := sh.run(t, "alice", `await mcp.shop.look({}); return 1`)
	rb, ferr := sh.rollback("alice", reads.ExecutionID)
	if ferr != nil || rb.Status != execution.NothingToRollBack || !strings.Contains(rb.Message, "Nothing to do") || rb.RollbackID != "" {
		t.Fatalf("reads only: %+v %+v", rb, ferr)
	}
	notes := sh.run(t, "alice", `await mcp.shop.note({}); await mcp.shop.put({key: "k", value: 1, pad: "`+strings.Repeat("p", journal.MaxArgsBytes)+`"}); return 1`)
	rb, ferr = sh.rollback("alice", notes.ExecutionID)
	if ferr != nil || rb.Status != execution.NotRolledBack || len(rb.Effects) != 2 || rb.RollbackID != "" {
		t.Fatalf("no compensation: %+v %+v", rb, ferr)
	}
	if e := rb.Effects[0]; e.Outcome != execution.CompensationSkipped || !strings.HasPrefix(e.Reason, "args not kept") {
		t.Errorf("put: %+v", e)
	}
	if e := rb.Effects[1]; e.Outcome != execution.CompensationSkipped || !strings.Contains(e.Reason, "no compensation is declared for shop:note") {
		t.Errorf("note: %+v", e)
	}
	doc := journal.Effects(sh.entries(t, notes.ExecutionID), true)
	if doc[0].Compensation == nil || doc[0].Compensation.Status != execution.CompensationSkipped || execution.RollbackState(doc) != execution.NotRolledBack {
		t.Fatalf("document %+v", doc)
	}
	// Skipped is not done: asked again, it answers the same, and runs
	// nothing.
	if rb, ferr = sh.rollback("alice", notes.ExecutionID); ferr != nil || rb.Status != execution.NotRolledBack {
		t.Fatalf("again: %+v %+v", rb, ferr)
	}
}

// TestRollbackSetAndRestore: a set is undone by setting back the value its
// result says it replaced; a result with keys that look like references
// is only data.
func TestRollbackSetAndRestore(t *testing.T) {
	sh := newShop(t)
	sh.run(t, "", `await mcp.shop.put({key: "k", value: "first"}); return 1`)
	orig := sh.run(t, "", `await mcp.shop.put({key: "k", value: "second"}); await mcp.shop.put({key: "k", value: "third"}); return 1`)
	if _, ferr := sh.rollback("", orig.ExecutionID); ferr != nil {
		t.Fatal(ferr)
	}
	got := sh.src.calls()
	if strings.Join(got[3:], ",") != "put k,put k" || string(sh.src.kv["k"]) != `"first"` {
		t.Fatalf("sent %v, k = %s", got, sh.src.kv["k"])
	}
}

// TestRollbackDryRun: a dry run says what would run and runs nothing,
// records nothing.
func TestRollbackDryRun(t *testing.T) {
	sh := newShop(t)
	orig := sh.run(t, "alice", threeOrders)
	rb, ferr := sh.rollback("alice", orig.ExecutionID, func(rr *execution.RollbackRequest) { rr.DryRun = true })
	if ferr != nil || !rb.DryRun || rb.Status != execution.OutcomePlanned || len(rb.Effects) != 3 || rb.Effects[0].Outcome != execution.OutcomePlanned ||
		string(rb.Effects[0].Compensation.Args) != `{"id":"o-3"}` {
		t.Fatalf("%+v %+v", rb, ferr)
	}
	if len(sh.src.calls()) != 6 || execution.RollbackState(journal.Effects(sh.entries(t, orig.ExecutionID), true)) != "" {
		t.Fatal("a dry run ran or recorded something")
	}
}

// TestRollbackRefusedWhileRunning: an execution whose last effect is
// recent and whose trace is not written may still run: CONFLICT.
func TestRollbackRefusedWhileRunning(t *testing.T) {
	sh := newShop(t)
	e := &journal.Entry{ExecutionID: "ex_running", CallID: 1, Principal: "alice", Server: "shop", Tool: "create", Key: journal.Key("ex_running", 1), Args: json.RawMessage(`{}`)}
	if _, err := sh.j.Intend(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	if _, ferr := sh.rollback("alice", "ex_running"); ferr == nil || ferr.Code != fault.Conflict || !strings.Contains(ferr.Message, "may still be running") {
		t.Fatalf("%+v", ferr)
	}
	if _, ferr := sh.rollback("bob", "ex_running"); ferr == nil || ferr.Code != fault.NotFound {
		t.Fatalf("another principal: %+v", ferr)
	}
}

// TestRollbackConcurrent: of rollbacks at once, one compensates each
// effect; the others are refused, and nothing is undone twice.
func TestRollbackConcurrent(t *testing.T) {
	sh := newShop(t)
	orig := sh.run(t, "alice", threeOrders)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ran := 0
	for range 4 {
		wg.Go(func() {
			rb, ferr := sh.rollback("alice", orig.ExecutionID)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case ferr == nil && rb.RollbackID != "":
				ran++
			case ferr != nil && ferr.Code == fault.Conflict:
			default:
				t.Errorf("%+v %+v", rb, ferr)
			}
		})
	}
	wg.Wait()
	cancels := 0
	for _, c := range sh.src.calls() {
		if strings.HasPrefix(c, "cancel") {
			cancels++
		}
	}
	if ran != 1 || cancels != 3 || len(sh.src.open()) != 0 {
		t.Fatalf("%d rollbacks ran, %d cancels sent, open %v", ran, cancels, sh.src.open())
	}
}

// TestRollbackWaitsForAPerson: a compensation that needs approval parks,
// the rollback suspends (the original reads rolling_back, and a second
// rollback is refused); once a person approves it, the resume records the
// compensations. Rejected, they read failed, and a later rollback tries
// again.
func TestRollbackWaitsForAPerson(t *testing.T) {
	sh := newShop(t)
	sh.src.destructive = true
	orig := sh.run(t, "alice", threeOrders)
	rb, ferr := sh.rollback("alice", orig.ExecutionID)
	if ferr != nil || rb.Status != execution.RollingBack || rb.Execution == nil || !rb.Execution.Suspended() || rb.Effects[0].Outcome != execution.OutcomePending {
		t.Fatalf("%+v %+v", rb, ferr)
	}
	if !strings.Contains(rb.Message, "waits for a decision") {
		t.Fatalf("message %q", rb.Message)
	}
	if _, ferr := sh.rollback("alice", orig.ExecutionID); ferr == nil || ferr.Code != fault.Conflict || !strings.Contains(ferr.Message, "under way") {
		t.Fatalf("a second rollback meanwhile: %+v", ferr)
	}
	// The first pending call is rejected by its owner; the next two are
	// approved by an approver.
	ctx := context.Background()
	resp, ferr := sh.svc.Resume(ctx, execution.ResumeRequest{ExecutionID: rb.RollbackID, Principal: "alice",
		Decisions: map[string]execution.Decision{"1": {Reason: "keep o-3"}}})
	for n := 2; ferr == nil && resp.Suspended(); n++ {
		resp, ferr = sh.svc.Resume(ctx, execution.ResumeRequest{ExecutionID: rb.RollbackID, Principal: approverPrincipal,
			Decisions: map[string]execution.Decision{fmt.Sprint(n): {Approve: true}}})
	}
	if ferr != nil || !resp.OK || resp.RollbackOf != orig.ExecutionID {
		t.Fatalf("%+v %+v", resp, ferr)
	}
	doc := journal.Effects(sh.entries(t, orig.ExecutionID), true)
	if c := doc[2].Compensation; c == nil || c.Status != execution.CompensationFailed || c.Error == nil || c.Error.Code != fault.Rejected {
		t.Fatalf("o-3's compensation: %+v", doc[2])
	}
	if execution.RollbackState(doc) != execution.PartiallyRolledBack || !slices.Equal(sh.src.open(), []string{"o-3"}) {
		t.Fatalf("document %+v, open %v", doc, sh.src.open())
	}
	// Allowed up front this time, by an approver: the rejected one runs.
	again, ferr := sh.rollback(approverPrincipal, orig.ExecutionID, func(rr *execution.RollbackRequest) { rr.AllowDestructive = true })
	if ferr != nil || again.Status != execution.RolledBack || len(sh.src.open()) != 0 {
		t.Fatalf("%+v %+v open %v", again, ferr, sh.src.open())
	}
}

// TestRollbackCancelled: a rollback cancelled while it waits leaves its
// compensations failed (never sent), and the next rollback runs them.
func TestRollbackCancelled(t *testing.T) {
	sh := newShop(t)
	sh.src.destructive = true
	orig := sh.run(t, "alice", threeOrders)
	rb, ferr := sh.rollback("alice", orig.ExecutionID)
	if ferr != nil || !rb.Execution.Suspended() {
		t.Fatalf("%+v %+v", rb, ferr)
	}
	if _, ferr := sh.svc.Cancel(context.Background(), execution.CancelRequest{ExecutionID: rb.RollbackID, Principal: "alice"}); ferr != nil {
		t.Fatal(ferr)
	}
	doc := journal.Effects(sh.entries(t, orig.ExecutionID), true)
	for _, e := range doc {
		if e.Compensation == nil || e.Compensation.Status != execution.CompensationFailed || e.Compensation.Error.Code != fault.Cancelled {
			t.Fatalf("after the cancel: %+v", e)
		}
	}
	again, ferr := sh.rollback(approverPrincipal, orig.ExecutionID, func(rr *execution.RollbackRequest) { rr.AllowDestructive = true })
	if ferr != nil || again.Status != execution.RolledBack {
		t.Fatalf("%+v %+v", again, ferr)
	}
}

// TestRollbackLostClaim: a claim whose rollback is gone (its process died
// before it recorded anything, long ago) is settled by the next rollback
// from the lost one's journal: what it applied stays compensated, what it
// never sent runs again.
func TestRollbackLostClaim(t *testing.T) {
	sh := newShop(t)
	orig := sh.run(t, "alice", threeOrders)
	ctx := context.Background()
	long := time.Now().Add(-time.Hour).UTC()
	// The lost rollback claimed o-3 (call 5) and o-2 (call 3) and applied
	// the first only.
	for i, call := range []int{5, 3} {
		id := []string{"o-3", "o-2"}[i]
		args := json.RawMessage(fmt.Sprintf(`{"id":%q}`, id))
		c := &journal.Compensation{Status: execution.CompensationRunning, ExecutionID: "ex_lost", CallID: i + 1, Server: "shop", Tool: "cancel", ArgsDigest: journal.Digest(args), At: long}
		if err := sh.j.SetCompensation(ctx, orig.ExecutionID, call, nil, c); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			e := &journal.Entry{ExecutionID: "ex_lost", CallID: 1, Server: "shop", Tool: "cancel", Key: journal.Key("ex_lost", 1), Args: args}
			if _, err := sh.j.Intend(ctx, e); err != nil {
				t.Fatal(err)
			}
			if err := sh.j.Settle(ctx, "ex_lost", 1, journal.Outcome{Status: journal.Applied, Result: json.RawMessage(`{}`)}); err != nil {
				t.Fatal(err)
			}
			sh.src.mu.Lock()
			delete(sh.src.orders, id)
			sh.src.mu.Unlock()
		}
	}
	before := len(sh.src.calls())
	rb, ferr := sh.rollback("alice", orig.ExecutionID)
	if ferr != nil || rb.Status != execution.RolledBack {
		t.Fatalf("%+v %+v", rb, ferr)
	}
	if sent := sh.src.calls()[before:]; !slices.Equal(sent, []string{"cancel o-2", "cancel o-1"}) {
		t.Fatalf("sent %v", sent)
	}
}
