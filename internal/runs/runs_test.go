package runs_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/runs"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/testutil/enginetest"
	"github.com/pml-sandbox/pml/internal/trace"
)

var engine *guest.Engine

func TestMain(m *testing.M) {
	enginetest.Main(m, func(e *guest.Engine) { engine = e })
}

const (
	owner    = "jwt:https://idp#agent"
	approver = "arn:aws:sts::1:assumed-role/approver/alice"
	stranger = "jwt:https://idp#someone-else"
)

// deployment is the storage several processes (pml serve, Lambda
// containers) share: the demo tools' store, the suspensions and the runs.
type deployment struct {
	dir string
	kv  *demoserver.Tools
	// executions counts the executions the services recorded.
	executions atomic.Int32
	clk        func() time.Time
}

func newDeployment(t *testing.T) *deployment {
	return &deployment{dir: t.TempDir(), kv: demoserver.New(), clk: time.Now}
}

type countSink struct{ d *deployment }

func (s countSink) Record(_ context.Context, e trace.Execution, _ []trace.Call) {
	if e.Status != trace.StatusSuspended && len(e.Events) == 0 {
		s.d.executions.Add(1)
	}
}
func (countSink) Flush(context.Context) error { return nil }

// process is one process of the deployment: its own service and stores
// over the shared storage.
func (d *deployment) process(t *testing.T, opts runs.Options) *runs.Service {
	t.Helper()
	sopts := suspend.Options{Now: d.clk}
	svc := executor.New(engine, executor.Options{Sources: []execution.ToolSource{demoserver.Source{Set: d.kv}}, Sink: countSink{d},
		Policy: approval.Policy{Approvers: []string{approver}}, Suspensions: suspend.NewFile(filepath.Join(d.dir, "suspensions"), sopts)})
	opts.Store = suspend.NewFileRuns(filepath.Join(d.dir, "runs"), sopts)
	opts.Policy = approval.Policy{Approvers: []string{approver}}
	if opts.PollEvery == 0 {
		opts.PollEvery = 20 * time.Millisecond
	}
	s := runs.New(svc, opts)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// waitFor polls the document of id until it leaves running.
func waitFor(t *testing.T, s *runs.Service, id, principal string) *execution.Response {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		doc, ferr := s.Status(context.Background(), id, principal)
		if ferr != nil {
			t.Fatalf("status: %+v", ferr)
		}
		if !doc.Running() {
			return doc
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s still running after 30 s", id)
	return nil
}

func async(code string) execution.Request {
	return execution.Request{Code: code, Async: true, Principal: owner, Source: execution.SourceHTTP}
}

// TestAsyncInProcess: the answer comes at once, the document reads running
// and then the final one, for the owner and approvers only.
func TestAsyncInProcess(t *testing.T) {
	d := newDeployment(t)
	s := d.process(t, runs.Options{})
	resp := s.Execute(context.Background(), async(`await mcp.demo.sleep({ms: 200}); console.log("hi"); return 6 * 7`))
	if resp.Status != execution.StatusRunning || resp.Error != nil || resp.ExecutionID == "" || resp.CreatedAt.IsZero() {
		t.Fatalf("the first answer: %+v", resp)
	}
	doc, ferr := s.Status(context.Background(), resp.ExecutionID, owner)
	if ferr != nil || doc.Status != execution.StatusRunning {
		t.Fatalf("right after: %+v %+v", doc, ferr)
	}
	for _, p := range []string{stranger, ""} {
		if _, ferr := s.Status(context.Background(), resp.ExecutionID, p); ferr == nil || ferr.Code != fault.NotFound {
			t.Errorf("read by %q: %+v, want NOT_FOUND", p, ferr)
		}
	}
	doc = waitFor(t, s, resp.ExecutionID, approver)
	if doc.Status != execution.StatusCompleted || !doc.OK || string(doc.Result) != "42" || len(doc.Logs) != 1 || len(doc.Calls) != 1 {
		t.Fatalf("final document: %+v", doc)
	}
	if _, ferr := s.Cancel(context.Background(), execution.CancelRequest{ExecutionID: resp.ExecutionID, Principal: owner}); ferr == nil || ferr.Code != fault.Conflict {
		t.Fatalf("cancelling an ended execution: %+v, want CONFLICT", ferr)
	}
}

// countScript adds one to the demo store's count: run twice, it says so.
const countScript = `const c = (await mcp.demo.kv_get({key: "count"})).value ?? 0
await mcp.demo.sleep({ms: 50})
await mcp.demo.kv_set({key: "count", value: c + 1})
return c + 1`

// TestRunOnce: a start delivered many times at once, to several processes
// (an asynchronous invocation Lambda retried, or delivered twice), and
// again after it ended, runs the script once.
func TestRunOnce(t *testing.T) {
	d := newDeployment(t)
	var ids []string
	front := d.process(t, runs.Options{Launch: func(_ context.Context, id string) error { ids = append(ids, id); return nil }})
	resp := front.Execute(context.Background(), async(countScript))
	if resp.Status != execution.StatusRunning || len(ids) != 1 {
		t.Fatalf("start: %+v, launched %v", resp, ids)
	}
	var wg sync.WaitGroup
	for range 6 {
		p := d.process(t, runs.Options{})
		wg.Go(func() {
			if err := p.Run(context.Background(), ids[0]); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if err := front.Run(context.Background(), ids[0]); err != nil {
		t.Fatal(err)
	}
	doc := waitFor(t, front, ids[0], owner)
	if !doc.OK || string(doc.Result) != "1" || d.executions.Load() != 1 {
		t.Fatalf("ran %d times; document %+v", d.executions.Load(), doc)
	}
	if got, _ := d.kv.Call(context.Background(), "kv_get", json.RawMessage(`{"key": "count"}`)); !strings.Contains(string(got), `"value":1`) {
		t.Fatalf("count %s, want 1", got)
	}
	if err := front.Run(context.Background(), "ex_unknown"); err != nil {
		t.Fatalf("an unknown run is nothing to do: %v", err)
	}
}

// stepScript makes 20 calls 100 ms apart and logs before each.
const stepScript = `for (let i = 0; i < 20; i++) { console.log("step " + i); await mcp.demo.sleep({ms: 100}) }
return "all done"`

// TestCancelRunning: cancelled from another process (the store's flag,
// which the runner polls) or from its own (at once), a running execution
// ends CANCELLED within one step, and its document says so.
func TestCancelRunning(t *testing.T) {
	for _, where := range []string{"another process", "its own process"} {
		t.Run(where, func(t *testing.T) {
			d := newDeployment(t)
			s := d.process(t, runs.Options{})
			other := s
			if where == "another process" {
				other = d.process(t, runs.Options{})
			}
			resp := s.Execute(context.Background(), async(stepScript))
			time.Sleep(350 * time.Millisecond) // a few steps
			if _, ferr := other.Cancel(context.Background(), execution.CancelRequest{ExecutionID: resp.ExecutionID, Principal: stranger}); ferr == nil || ferr.Code != fault.NotFound {
				t.Fatalf("a stranger's cancel: %+v", ferr)
			}
			at := time.Now()
			c, ferr := other.Cancel(context.Background(), execution.CancelRequest{ExecutionID: resp.ExecutionID, Principal: owner})
			if ferr != nil || c.Status != execution.StatusRunning || !c.CancelRequested {
				t.Fatalf("cancel: %+v %+v", c, ferr)
			}
			doc := waitFor(t, s, resp.ExecutionID, owner)
			if doc.Status != execution.StatusCancelled || doc.OK || doc.Error == nil || doc.Error.Code != fault.Cancelled {
				t.Fatalf("document: status %q error %+v", doc.Status, doc.Error)
			}
			// Within one step: no call started after the cancel reached
			// the runner (a poll and a step at most).
			for _, c := range doc.Calls {
				if c.StartedAt.After(at.Add(20*time.Millisecond + 100*time.Millisecond + 50*time.Millisecond)) {
					t.Errorf("call %d started %v after the cancel", c.CallID, c.StartedAt.Sub(at))
				}
			}
			if n := len(doc.Calls); n == 0 || n >= 20 {
				t.Errorf("%d calls: want the run cut short", n)
			}
		})
	}
}

// TestCancelBusyScript: a script that never calls a tool stops too.
func TestCancelBusyScript(t *testing.T) {
	d := newDeployment(t)
	s := d.process(t, runs.Options{})
	resp := s.Execute(context.Background(), async(`let n = 0; while (true) { n++ }`))
	time.Sleep(100 * time.Millisecond)
	if _, ferr := s.Cancel(context.Background(), execution.CancelRequest{ExecutionID: resp.ExecutionID, Principal: approver}); ferr != nil {
		t.Fatal(ferr)
	}
	doc := waitFor(t, s, resp.ExecutionID, owner)
	if doc.Status != execution.StatusCancelled || doc.Error.Code != fault.Cancelled {
		t.Fatalf("document: %q %+v", doc.Status, doc.Error)
	}
}

// TestCancelQueued: cancelled before anything started it, it never runs.
func TestCancelQueued(t *testing.T) {
	d := newDeployment(t)
	var id string
	s := d.process(t, runs.Options{Launch: func(_ context.Context, i string) error { id = i; return nil }})
	s.Execute(context.Background(), async(countScript))
	doc, ferr := s.Cancel(context.Background(), execution.CancelRequest{ExecutionID: id, Principal: owner})
	if ferr != nil || doc.Status != execution.StatusCancelled || doc.Error.Code != fault.Cancelled {
		t.Fatalf("cancel: %+v %+v", doc, ferr)
	}
	if err := s.Run(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if doc := waitFor(t, s, id, owner); doc.Status != execution.StatusCancelled || d.executions.Load() != 0 {
		t.Fatalf("after a late start: %q, %d executions", doc.Status, d.executions.Load())
	}
}

// TestSyncCancelledInProcess: pml serve's synchronous executions can be
// cancelled by id while they run.
func TestSyncCancelledInProcess(t *testing.T) {
	d := newDeployment(t)
	s := d.process(t, runs.Options{})
	req := execution.Request{Code: stepScript, Principal: owner, ExecutionID: "ex_sync1", Source: execution.SourceHTTP}
	done := make(chan *execution.Response, 1)
	go func() { done <- s.Execute(context.Background(), req) }()
	time.Sleep(250 * time.Millisecond)
	if doc, ferr := s.Status(context.Background(), "ex_sync1", owner); ferr != nil || doc.Status != execution.StatusRunning {
		t.Fatalf("status while it runs: %+v %+v", doc, ferr)
	}
	if _, ferr := s.Cancel(context.Background(), execution.CancelRequest{ExecutionID: "ex_sync1", Principal: stranger}); ferr == nil {
		t.Fatal("a stranger cancelled it")
	}
	if _, ferr := s.Cancel(context.Background(), execution.CancelRequest{ExecutionID: "ex_sync1", Principal: owner}); ferr != nil {
		t.Fatal(ferr)
	}
	resp := <-done
	if resp.OK || resp.Error == nil || resp.Error.Code != fault.Cancelled {
		t.Fatalf("answer: %+v", resp.Error)
	}
}

// TestAsyncSuspends: an asynchronous execution that suspends reads as
// suspended with its pending calls; resumed, its document is the resume's
// end; another one is cancelled while it waits.
func TestAsyncSuspends(t *testing.T) {
	d := newDeployment(t)
	if _, err := d.kv.Call(context.Background(), "kv_set", json.RawMessage(`{"key": "k", "value": 1}`)); err != nil {
		t.Fatal(err)
	}
	s := d.process(t, runs.Options{})
	req := async(enginetest.ApprovalScript)
	req.Approval = execution.ApprovalSuspend
	first := s.Execute(context.Background(), req)
	doc := waitFor(t, s, first.ExecutionID, owner)
	if doc.Status != execution.StatusSuspended || len(doc.Pending) != 1 || doc.Pending[0].Tool != "kv_delete" || doc.ExpiresAt.IsZero() {
		t.Fatalf("suspended document: %+v", doc)
	}
	other := d.process(t, runs.Options{})
	out, ferr := other.Resume(context.Background(), execution.ResumeRequest{ExecutionID: first.ExecutionID, Principal: approver,
		Decisions: map[string]execution.Decision{"2": {Approve: true}}})
	if ferr != nil || !out.OK {
		t.Fatalf("resume: %+v %+v", out, ferr)
	}
	doc, ferr = s.Status(context.Background(), first.ExecutionID, owner)
	if ferr != nil || doc.Status != execution.StatusCompleted || !doc.OK || !strings.Contains(string(doc.Result), "deleted k") {
		t.Fatalf("after the resume: %+v %+v", doc, ferr)
	}

	second := s.Execute(context.Background(), req)
	waitFor(t, s, second.ExecutionID, owner)
	c, ferr := other.Cancel(context.Background(), execution.CancelRequest{ExecutionID: second.ExecutionID, Principal: owner})
	if ferr != nil || c.Status != execution.StatusCancelled {
		t.Fatalf("cancel while suspended: %+v %+v", c, ferr)
	}
	if doc, _ := s.Status(context.Background(), second.ExecutionID, owner); doc.Status != execution.StatusCancelled || doc.Error.Code != fault.Cancelled {
		t.Fatalf("document after the cancel: %+v", doc)
	}
}

// TestSyncSuspensionKept: an execution that suspended while its caller
// waited is kept as a run, so that when an approver resumes it in
// another process its caller reads how it ended; a stranger reads
// nothing of it.
func TestSyncSuspensionKept(t *testing.T) {
	d := newDeployment(t)
	if _, err := d.kv.Call(context.Background(), "kv_set", json.RawMessage(`{"key": "k", "value": 1}`)); err != nil {
		t.Fatal(err)
	}
	s := d.process(t, runs.Options{})
	first := s.Execute(context.Background(), execution.Request{Code: enginetest.ApprovalScript, Approval: execution.ApprovalSuspend, Principal: owner})
	if !first.Suspended() {
		t.Fatalf("not suspended: %+v", first)
	}
	doc, ferr := s.Status(context.Background(), first.ExecutionID, owner)
	if ferr != nil || doc.Status != execution.StatusSuspended || len(doc.Pending) != 1 {
		t.Fatalf("the suspended document: %+v %+v", doc, ferr)
	}
	if _, ferr := s.Status(context.Background(), first.ExecutionID, stranger); ferr == nil || ferr.Code != fault.NotFound {
		t.Fatalf("a stranger reads it: %v", ferr)
	}
	other := d.process(t, runs.Options{})
	if out, ferr := other.Resume(context.Background(), execution.ResumeRequest{ExecutionID: first.ExecutionID, Principal: approver,
		Decisions: map[string]execution.Decision{"2": {Approve: true}}}); ferr != nil || !out.OK {
		t.Fatalf("resume: %+v %+v", out, ferr)
	}
	doc, ferr = s.Status(context.Background(), first.ExecutionID, owner)
	if ferr != nil || doc.Status != execution.StatusCompleted || !doc.OK || !strings.Contains(string(doc.Result), "deleted k") {
		t.Fatalf("after the approver's resume, the caller reads %+v %+v", doc, ferr)
	}
}

// TestLapsedRunTakenOver: a run whose runner died before any checkpoint
// reads running while it waits to be taken over; a live runner's run is
// not taken over; once its lease lapsed the next start takes it over and,
// nothing having reached the world, runs it from its code, once. One that
// nothing takes over within the window reads failed, saying why.
func TestLapsedRunTakenOver(t *testing.T) {
	d := newDeployment(t)
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	d.clk = func() time.Time { return time.Unix(0, now.Load()) }
	var ids []string
	s := d.process(t, runs.Options{Launch: func(_ context.Context, i string) error { ids = append(ids, i); return nil }})
	s.Execute(context.Background(), async(countScript))
	s.Execute(context.Background(), async(countScript))
	// A runner claims each, and dies.
	store := suspend.NewFileRuns(filepath.Join(d.dir, "runs"), suspend.Options{Now: d.clk})
	for _, id := range ids {
		if _, err := store.Claim(context.Background(), id, 1, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Run(context.Background(), ids[0]); err != nil || d.executions.Load() != 0 {
		t.Fatalf("a live runner's run was run again: %v, %d", err, d.executions.Load())
	}
	now.Add(int64(2 * time.Minute))
	if doc, _ := s.Status(context.Background(), ids[0], owner); doc.Status != execution.StatusRunning {
		t.Fatalf("lapsed, waiting to be taken over: %q", doc.Status)
	}
	if err := s.Run(context.Background(), ids[0]); err != nil {
		t.Fatal(err)
	}
	doc := waitFor(t, s, ids[0], owner)
	if doc.Status != execution.StatusCompleted || string(doc.Result) != "1" || d.executions.Load() != 1 {
		t.Fatalf("taken over: %+v, %d executions", doc, d.executions.Load())
	}
	if err := s.Run(context.Background(), ids[0]); err != nil || d.executions.Load() != 1 {
		t.Fatalf("a late start ran it again: %v, %d", err, d.executions.Load())
	}

	now.Add(int64(suspend.TakeoverWindow))
	doc, ferr := s.Status(context.Background(), ids[1], owner)
	if ferr != nil || doc.Status != execution.StatusFailed || doc.Error.Code != fault.Unavailable || !strings.Contains(doc.Error.Message, "could not be continued") {
		t.Fatalf("never taken over: %+v %+v", doc, ferr)
	}
	if err := s.Run(context.Background(), ids[1]); err != nil || d.executions.Load() != 1 {
		t.Fatalf("an abandoned run ran: %v, %d", err, d.executions.Load())
	}
}

// TestHeartbeatKeepsTheClaim: a run that outlives many leases keeps its
// claim (its runner renews it), is checkpointed before its effects, and no
// sweep takes it over; it ends completed with its document.
func TestHeartbeatKeepsTheClaim(t *testing.T) {
	d := newDeployment(t)
	s := d.process(t, runs.Options{Lease: 300 * time.Millisecond})
	resp := s.Execute(context.Background(), async(`await mcp.demo.kv_set({key: "hb", value: 1})
for (let i = 0; i < 8; i++) await mcp.demo.sleep({ms: 150})
await mcp.demo.kv_set({key: "hb", value: 2})
return "done"`))
	store := suspend.NewFileRuns(filepath.Join(d.dir, "runs"), suspend.Options{})
	sweeper := d.process(t, runs.Options{Lease: 300 * time.Millisecond})
	seen := false
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		r, err := store.Load(context.Background(), resp.ExecutionID)
		if err != nil {
			t.Fatal(err)
		}
		if r.State == suspend.RunQueued {
			continue
		}
		if r.State != suspend.RunRunning {
			break
		}
		seen = seen || r.HasCheckpoint
		if n, err := sweeper.Sweep(context.Background()); err != nil || n != 0 {
			t.Fatalf("a sweep took a live run: %d %v", n, err)
		}
	}
	doc := waitFor(t, s, resp.ExecutionID, owner)
	if doc.Status != execution.StatusCompleted || !seen {
		t.Fatalf("document %+v, checkpoint seen %v", doc, seen)
	}
}

// TestSweepContinuesALapsedRun: a sweeper finds a run whose runner died
// (lease lapsed) and continues it from its checkpoint; the runner it was
// taken from, still alive behind a long pause, loses its claim and stops
// without recording anything.
func TestSweepContinuesALapsedRun(t *testing.T) {
	d := newDeployment(t)
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	d.clk = func() time.Time { return time.Unix(0, now.Load()) }
	first := d.process(t, runs.Options{Lease: time.Hour})
	resp := first.Execute(context.Background(), async(`await mcp.demo.kv_set({key: "sw", value: 1})
await mcp.demo.sleep({ms: 1500})
await mcp.demo.kv_set({key: "sw", value: 2})
return "done"`))
	store := suspend.NewFileRuns(filepath.Join(d.dir, "runs"), suspend.Options{Now: d.clk})
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if r, _ := store.Load(context.Background(), resp.ExecutionID); r.HasCheckpoint {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no checkpoint")
		}
	}
	now.Add(int64(time.Hour + time.Minute)) // the first runner's lease lapses
	second := d.process(t, runs.Options{Lease: time.Hour})
	if n, err := second.Sweep(context.Background()); err != nil || n != 1 {
		t.Fatalf("sweep: %d %v", n, err)
	}
	doc := waitFor(t, second, resp.ExecutionID, owner)
	if doc.Status != execution.StatusCompleted || string(doc.Result) != `"done"` {
		t.Fatalf("continued: %+v", doc)
	}
	if v, _ := d.kv.Call(context.Background(), "kv_get", json.RawMessage(`{"key": "sw"}`)); !strings.Contains(string(v), `"value":2`) {
		t.Fatalf("the store holds %s", v)
	}
}

// TestCloseStopsRuns: a stopping server ends its runs, failed, and starts
// no more.
func TestCloseStopsRuns(t *testing.T) {
	d := newDeployment(t)
	s := d.process(t, runs.Options{})
	resp := s.Execute(context.Background(), async(stepScript))
	time.Sleep(150 * time.Millisecond)
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	reader := d.process(t, runs.Options{})
	doc, ferr := reader.Status(context.Background(), resp.ExecutionID, owner)
	if ferr != nil || doc.Status != execution.StatusFailed || doc.Error.Code != fault.Unavailable {
		t.Fatalf("after close: %+v %+v", doc, ferr)
	}
	if late := s.Execute(context.Background(), async("return 1")); late.Error == nil || late.Error.Code != fault.Unavailable {
		t.Fatalf("started after close: %+v", late)
	}
}

// TestNoStore: without a store, async is refused and nothing else changes.
func TestNoStore(t *testing.T) {
	svc := executor.New(engine, executor.Options{Sources: []execution.ToolSource{demoserver.Source{}}})
	s := runs.New(svc, runs.Options{})
	defer s.Close(context.Background())
	if resp := s.Execute(context.Background(), async("return 1")); resp.Error == nil || resp.Error.Code != fault.InvalidRequest {
		t.Fatalf("async without a store: %+v", resp)
	}
	if resp := s.Execute(context.Background(), execution.Request{Code: "return 1"}); !resp.OK {
		t.Fatalf("sync: %+v", resp)
	}
	if _, ferr := s.Status(context.Background(), "ex_x", ""); ferr == nil || ferr.Code != fault.NotFound {
		t.Fatalf("status: %+v", ferr)
	}
}

// TestRollbackWhileRunning: an asynchronous execution that runs is not
// rolled back under its feet: CONFLICT to its owner, the answer for an
// unknown id to a stranger.
func TestRollbackWhileRunning(t *testing.T) {
	d := newDeployment(t)
	s := d.process(t, runs.Options{})
	resp := s.Execute(context.Background(), async(`await mcp.demo.kv_set({key: "x", value: 1}); `+stepScript))
	time.Sleep(250 * time.Millisecond)
	if _, ferr := s.Rollback(context.Background(), execution.RollbackRequest{ExecutionID: resp.ExecutionID, Principal: owner}); ferr == nil || ferr.Code != fault.Conflict {
		t.Fatalf("the owner: %+v", ferr)
	}
	if _, ferr := s.Rollback(context.Background(), execution.RollbackRequest{ExecutionID: resp.ExecutionID, Principal: stranger}); ferr == nil || ferr.Code != fault.NotFound {
		t.Fatalf("a stranger: %+v", ferr)
	}
	if _, ferr := s.Cancel(context.Background(), execution.CancelRequest{ExecutionID: resp.ExecutionID, Principal: owner}); ferr != nil {
		t.Fatal(ferr)
	}
	waitFor(t, s, resp.ExecutionID, owner)
}
