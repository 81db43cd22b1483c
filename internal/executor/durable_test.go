package executor_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/testutil/enginetest"
	"github.com/pml-sandbox/pml/internal/trace"
)

const approvalScript = enginetest.ApprovalScript

// clock is a settable suspend.Options.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) Add(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.t = c.t.Add(d) }

// durable is a suspension directory that services, as separate processes
// would, open stores over.
type durable struct {
	dir string
	clk *clock
	// kv is the demo tools' store every service reaches, as processes
	// reach one MCP server; it holds "k", "a" and "b".
	kv *demoserver.Tools
}

func newDurable(t *testing.T) *durable {
	kv := demoserver.New()
	for _, k := range []string{"k", "a", "b"} {
		if _, err := kv.Call(context.Background(), "kv_set", json.RawMessage(`{"key": "`+k+`", "value": 1}`)); err != nil {
			t.Fatal(err)
		}
	}
	return &durable{dir: t.TempDir(), clk: &clock{t: time.Now().UTC()}, kv: kv}
}

// service is a fresh service over the demo tools, with its own store over
// the shared directory and its own trace sink.
func (d *durable) service() (*executor.Service, *memSink) {
	sink := &memSink{}
	return executor.New(engine, executor.Options{Policy: local, Sources: []execution.ToolSource{demoserver.Source{Set: d.kv}}, Sink: sink,
		Suspensions: suspend.NewFile(d.dir, suspend.Options{Now: d.clk.Now})}), sink
}

func suspendApproval(t *testing.T, svc *executor.Service, principal string) *execution.Response {
	t.Helper()
	resp := svc.Execute(context.Background(), execution.Request{Code: approvalScript, Approval: execution.ApprovalSuspend, Principal: principal})
	if resp.Status != execution.StatusSuspended || resp.OK || resp.Error != nil {
		t.Fatalf("want a suspension, got status %q ok %v error %+v result %s", resp.Status, resp.OK, resp.Error, resp.Result)
	}
	return resp
}

func TestSuspendAndResumeInAnotherService(t *testing.T) {
	d := newDurable(t)
	first, firstSink := d.service()
	resp := suspendApproval(t, first, "")
	if len(resp.Pending) != 1 {
		t.Fatalf("pending %+v", resp.Pending)
	}
	p := resp.Pending[0]
	if p.CallID != 2 || p.Server != "demo" || p.Tool != "kv_delete" || string(p.Args) != `{"key":"k"}` || p.Reason != execution.PendingApproval {
		t.Fatalf("pending call %+v", p)
	}
	if want := d.clk.Now().Add(suspend.DefaultTTL); !resp.ExpiresAt.Equal(want) {
		t.Fatalf("expires at %v, want %v", resp.ExpiresAt, want)
	}
	if len(resp.Calls) != 2 || !resp.Calls[0].OK || resp.Calls[1].Status != trace.StatusParked {
		t.Fatalf("calls at suspension %+v", resp.Calls)
	}
	ex := firstSink.execs[0]
	if ex.Status != trace.StatusSuspended || len(ex.Events) != 1 || ex.Events[0].Type != trace.EventSuspend || ex.Events[0].Pending[0] != 2 {
		t.Fatalf("trace while suspended %+v", ex)
	}
	doc, _ := json.Marshal(resp)
	if !strings.Contains(string(doc), `"status":"suspended"`) || !strings.Contains(string(doc), `"expires_at":`) {
		t.Fatalf("document %s", doc)
	}

	second, secondSink := d.service()
	out, ferr := second.Resume(context.Background(), execution.ResumeRequest{ExecutionID: resp.ExecutionID,
		Decisions: map[string]execution.Decision{"2": {Approve: true}}})
	if ferr != nil {
		t.Fatal(ferr)
	}
	if !out.OK || out.Status != "" || out.ExecutionID != resp.ExecutionID {
		t.Fatalf("resumed: ok %v status %q error %+v", out.OK, out.Status, out.Error)
	}
	jsonEq(t, out.Result, `{"kept": "set before suspending", "found": true, "deleted": "deleted k"}`)
	if len(out.Calls) != 2 || !out.Calls[1].OK || out.Calls[1].Status != "" {
		t.Fatalf("calls after approval %+v", out.Calls)
	}
	ex = secondSink.execs[0]
	if ex.ID != resp.ExecutionID || ex.Status != trace.StatusOK || ex.CodeHash != firstSink.execs[0].CodeHash || len(ex.Events) != 2 ||
		ex.Events[1].Type != trace.EventResume || len(ex.Events[1].Decisions) != 1 || ex.Events[1].Decisions[0] != (trace.Decision{CallID: 2, Decision: "approve"}) {
		t.Fatalf("trace after resuming %+v", ex)
	}

	// At most once: the state is spent.
	_, ferr = first.Resume(context.Background(), execution.ResumeRequest{ExecutionID: resp.ExecutionID,
		Decisions: map[string]execution.Decision{"2": {Approve: true}}})
	if ferr == nil || ferr.Code != fault.Conflict || !strings.Contains(ferr.Message, "done") {
		t.Fatalf("second resume: %+v, want CONFLICT saying it is done", ferr)
	}
}

func TestRejectionIsCatchable(t *testing.T) {
	d := newDurable(t)
	svc, _ := d.service()
	resp := suspendApproval(t, svc, "")
	var dec execution.Decision
	if err := json.Unmarshal([]byte(`{"decision": "reject", "reason": "not today"}`), &dec); err != nil {
		t.Fatal(err)
	}
	out, ferr := svc.Resume(context.Background(), execution.ResumeRequest{ExecutionID: resp.ExecutionID, Decisions: map[string]execution.Decision{"2": dec}})
	if ferr != nil || !out.OK {
		t.Fatalf("%+v %+v", ferr, out)
	}
	jsonEq(t, out.Result, `{"kept": "set before suspending", "code": "REJECTED", "message": "the call was rejected: not today"}`)
	if out.Calls[1].ErrorCode != fault.Rejected {
		t.Fatalf("rejected call %+v", out.Calls[1])
	}
}

func TestSuspendAgainThenFinish(t *testing.T) {
	d := newDurable(t)
	svc, sink := d.service()
	code := `const a = await mcp.demo.kv_delete({key: "a"})
const b = await mcp.demo.kv_delete({key: "b"})
return [a, b]`
	resp := svc.Execute(context.Background(), execution.Request{Code: code, Approval: execution.ApprovalSuspend})
	if resp.Status != execution.StatusSuspended || resp.Pending[0].CallID != 1 {
		t.Fatalf("%+v", resp)
	}
	again, ferr := svc.Resume(context.Background(), execution.ResumeRequest{ExecutionID: resp.ExecutionID, Decisions: map[string]execution.Decision{"1": {Approve: true}}})
	if ferr != nil || again.Status != execution.StatusSuspended || len(again.Pending) != 1 || again.Pending[0].CallID != 2 {
		t.Fatalf("want a second suspension at call 2: %+v %+v", ferr, again)
	}
	done, ferr := svc.Resume(context.Background(), execution.ResumeRequest{ExecutionID: resp.ExecutionID, Decisions: map[string]execution.Decision{"2": {Approve: true}}})
	if ferr != nil || !done.OK {
		t.Fatalf("%+v %+v", ferr, done)
	}
	jsonEq(t, done.Result, `["deleted a", "deleted b"]`)
	last := sink.execs[len(sink.execs)-1]
	var types []string
	for _, e := range last.Events {
		types = append(types, e.Type)
	}
	if strings.Join(types, ",") != "suspend,resume,suspend,resume" || last.Status != trace.StatusOK {
		t.Fatalf("events %v status %s", types, last.Status)
	}
	// CPU time adds up over the runs, as the duration does.
	for i := 1; i < len(sink.execs); i++ {
		if prev, cur := sink.execs[i-1], sink.execs[i]; cur.CPUMS <= prev.CPUMS || cur.CPUMS > cur.DurationMS {
			t.Fatalf("run %d: cpu_ms %v after %v (duration %v)", i, cur.CPUMS, prev.CPUMS, cur.DurationMS)
		}
	}
}

func TestResumeRefusals(t *testing.T) {
	d := newDurable(t)
	svc, _ := d.service()
	ctx := context.Background()
	approve := map[string]execution.Decision{"2": {Approve: true}}
	alice := suspendApproval(t, svc, "arn:aws:iam::123456789012:user/alice")
	anon := suspendApproval(t, svc, "")

	// Another build's suspension: the same record under another id, with
	// another guest hash.
	store := suspend.NewFile(d.dir, suspend.Options{Now: d.clk.Now})
	rec, err := store.Load(ctx, anon.ExecutionID)
	if err != nil {
		t.Fatal(err)
	}
	rec.ID, rec.Version, rec.Suspension.GuestHash = "ex_other_build", 0, "0000000000000000"
	if err := store.Save(ctx, rec); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name      string
		rr        execution.ResumeRequest
		code      fault.Code
		inMessage string
	}{
		{"unknown id", execution.ResumeRequest{ExecutionID: "ex_nope", Decisions: approve}, fault.NotFound, "ex_nope"},
		{"another principal", execution.ResumeRequest{ExecutionID: alice.ExecutionID, Decisions: approve, Principal: "arn:aws:iam::123456789012:user/mallory"}, fault.NotFound, "no suspended execution"},
		{"no principal for a principal's execution", execution.ResumeRequest{ExecutionID: alice.ExecutionID, Decisions: approve}, fault.NotFound, "no suspended execution"},
		{"a call that is not pending", execution.ResumeRequest{ExecutionID: anon.ExecutionID, Decisions: map[string]execution.Decision{"2": {Approve: true}, "7": {}, "1": {}}}, fault.InvalidRequest, "not pending: 1, 7 (pending: 2)"},
		{"a key that is not a call id", execution.ResumeRequest{ExecutionID: anon.ExecutionID, Decisions: map[string]execution.Decision{"two": {}}}, fault.InvalidRequest, `"two"`},
		{"no decisions", execution.ResumeRequest{ExecutionID: anon.ExecutionID}, fault.InvalidRequest, "empty"},
		{"another guest build", execution.ResumeRequest{ExecutionID: "ex_other_build", Decisions: approve}, fault.ResumeIncompatible, "another build"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, ferr := svc.Resume(ctx, tc.rr)
			if ferr == nil || ferr.Code != tc.code || !strings.Contains(ferr.Message, tc.inMessage) || out != nil {
				t.Fatalf("got %+v (response %v), want %s saying %q", ferr, out != nil, tc.code, tc.inMessage)
			}
		})
	}
	// Nothing was claimed by a refusal: each can still be resumed (the
	// other build's is left for that build).
	for _, id := range []string{alice.ExecutionID, anon.ExecutionID, "ex_other_build"} {
		if r, err := store.Load(ctx, id); err != nil || r.State != suspend.Suspended || r.Version != 1 {
			t.Fatalf("%s after refusals: %+v %v", id, r, err)
		}
	}
	if out, ferr := svc.Resume(ctx, execution.ResumeRequest{ExecutionID: alice.ExecutionID, Decisions: approve, Principal: "arn:aws:iam::123456789012:user/alice"}); ferr != nil || !out.OK {
		t.Fatalf("the principal's own resume: %+v", ferr)
	}

	// Expiry is the stored one: past it, 410 whatever the store still has.
	d.clk.Add(suspend.DefaultTTL)
	if _, ferr := svc.Resume(ctx, execution.ResumeRequest{ExecutionID: anon.ExecutionID, Decisions: approve}); ferr == nil || ferr.Code != fault.Expired {
		t.Fatalf("expired: %+v, want EXPIRED", ferr)
	}
}

func TestConcurrentResumesOneRuns(t *testing.T) {
	d := newDurable(t)
	svc, _ := d.service()
	resp := suspendApproval(t, svc, "")
	const n = 4
	var wg sync.WaitGroup
	ran, conflicts := make(chan bool, n), make(chan bool, n)
	for range n {
		other, _ := d.service()
		wg.Go(func() {
			out, ferr := other.Resume(context.Background(), execution.ResumeRequest{ExecutionID: resp.ExecutionID,
				Decisions: map[string]execution.Decision{"2": {Approve: true}}})
			switch {
			case ferr == nil && out.OK:
				ran <- true
			case ferr != nil && ferr.Code == fault.Conflict:
				conflicts <- true
			default:
				t.Errorf("unexpected outcome %+v %+v", ferr, out)
			}
		})
	}
	wg.Wait()
	if len(ran) != 1 || len(conflicts) != n-1 {
		t.Fatalf("%d resumes ran and %d conflicted; want 1 and %d", len(ran), len(conflicts), n-1)
	}
}

func TestApprovalModes(t *testing.T) {
	d := newDurable(t)
	svc, _ := d.service()
	requireSource := approvalSource{}
	withRequire := executor.New(engine, executor.Options{Policy: local, Sources: []execution.ToolSource{requireSource},
		Suspensions: suspend.NewFile(d.dir, suspend.Options{})})
	noStore := executor.New(engine, executor.Options{Policy: local, Sources: []execution.ToolSource{demoserver.Source{}}})
	cases := []struct {
		name      string
		svc       *executor.Service
		req       execution.Request
		status    string
		code      fault.Code
		inMessage string
		result    string
	}{
		{name: "refuse is the default", svc: svc, req: execution.Request{Code: `return await mcp.demo.kv_delete({key: "k"})`},
			code: fault.Forbidden, inMessage: `allow_destructive to run it (or approval "suspend"`},
		{name: "allow_destructive runs without asking", svc: svc, req: execution.Request{Code: `return await mcp.demo.kv_delete({key: "k"})`, Approval: execution.ApprovalSuspend, AllowDestructive: true},
			result: `"deleted k"`},
		{name: "require_approval refused by default", svc: withRequire, req: execution.Request{Code: `return await mcp.ext.send({})`},
			code: fault.Forbidden, inMessage: "require_approval"},
		{name: "require_approval parks", svc: withRequire, req: execution.Request{Code: `return await mcp.ext.send({})`, Approval: execution.ApprovalSuspend},
			status: execution.StatusSuspended},
		{name: "read tools never park", svc: svc, req: execution.Request{Code: `return (await mcp.demo.kv_get({key: "a"})).found`, Approval: execution.ApprovalSuspend},
			result: `true`},
		{name: "a script that returns leaves its parked calls not run", svc: svc, req: execution.Request{Code: `mcp.demo.kv_delete({key: "k"}); return "done"`, Approval: execution.ApprovalSuspend},
			result: `"done"`},
		{name: "unknown mode", svc: svc, req: execution.Request{Code: `return 1`, Approval: "ask"}, code: fault.InvalidRequest, inMessage: `"ask"`},
		{name: "no store", svc: noStore, req: execution.Request{Code: `return 1`, Approval: execution.ApprovalSuspend}, code: fault.InvalidRequest, inMessage: "keeps no suspended"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := tc.svc.Execute(context.Background(), tc.req)
			if out.Status != tc.status {
				t.Fatalf("status %q, want %q (error %+v)", out.Status, tc.status, out.Error)
			}
			switch {
			case tc.code != "":
				if out.Error == nil || out.Error.Code != tc.code || !strings.Contains(out.Error.Message, tc.inMessage) {
					t.Fatalf("error %+v, want %s saying %q", out.Error, tc.code, tc.inMessage)
				}
			case tc.result != "":
				if !out.OK {
					t.Fatalf("error %+v", out.Error)
				}
				jsonEq(t, out.Result, tc.result)
			}
		})
	}
	out := svc.Execute(context.Background(), execution.Request{Code: `mcp.demo.kv_delete({key: "k"}); return "done"`, Approval: execution.ApprovalSuspend, CallDetail: execution.CallDetailSummary})
	if out.CallSummary == nil || out.CallSummary.Total != 1 || out.CallSummary.Failed != 0 {
		t.Fatalf("a call not run is not a failure: %+v", out.CallSummary)
	}
}

// approvalSource offers ext:send, which its server requires approval for.
type approvalSource struct{}

func (approvalSource) Tools(context.Context) ([]catalog.Tool, error) {
	// Not destructive, as it says: its server's require_approval is what
	// makes it need a person.
	notDestructive := false
	return []catalog.Tool{{Server: "ext", Name: "send", InputSchema: json.RawMessage(`{"type":"object"}`), Kind: trace.KindMCP, RequireApproval: true,
		Annotations: catalog.Annotations{Destructive: &notDestructive}}}, nil
}

func (approvalSource) Call(context.Context, catalog.Tool, json.RawMessage, execution.CallOptions) (json.RawMessage, error) {
	return json.RawMessage(`"sent"`), nil
}

func TestDecisionJSON(t *testing.T) {
	cases := []struct {
		in      string
		want    execution.Decision
		wantErr string
	}{
		{`"approve"`, execution.Decision{Approve: true}, ""},
		{`"reject"`, execution.Decision{}, ""},
		{`{"decision": "reject", "reason": "no"}`, execution.Decision{Reason: "no"}, ""},
		{`{"decision": "approve"}`, execution.Decision{Approve: true}, ""},
		{`"yes"`, execution.Decision{}, `not "yes"`},
		{`{"decision": "reject", "why": "no"}`, execution.Decision{}, "why"},
		{`true`, execution.Decision{}, "a decision is"},
		{`{"decision": "reject", "reason": "` + strings.Repeat("x", execution.MaxReasonBytes+1) + `"}`, execution.Decision{}, "at most"},
		{`{"decision": "answer", "answers": {"q": {"action": "accept", "content": {"ok": true}}}}`,
			execution.Decision{Approve: true, Answers: map[string]json.RawMessage{"q": json.RawMessage(`{"action": "accept", "content": {"ok": true}}`)}}, ""},
		{`{"decision": "answer"}`, execution.Decision{}, "names its answers"},
		{`{"decision": "answer", "answers": {"q": {}}, "reason": "x"}`, execution.Decision{}, "no reason"},
		{`{"decision": "reject", "answers": {"q": {}}}`, execution.Decision{}, `"decision": "answer"`},
	}
	for _, tc := range cases {
		var d execution.Decision
		err := json.Unmarshal([]byte(tc.in), &d)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%.40s: error %v, want one saying %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(d, tc.want) {
			t.Errorf("%s: %+v %v, want %+v", tc.in, d, err, tc.want)
		}
		b, _ := json.Marshal(d)
		var back execution.Decision
		if err := json.Unmarshal(b, &back); err != nil || back.Word() != d.Word() || back.Reason != d.Reason || len(back.Answers) != len(d.Answers) {
			t.Errorf("%s: round trip through %s gave %+v %v", tc.in, b, back, err)
		}
	}
}

// TestSuspendedQuotaThroughTheService: past its principal's quota of
// suspended executions, an execution that would wait for a person fails
// LIMIT_EXCEEDED, naming the quota and how to make room, and its parked
// call is not run.
func TestSuspendedQuotaThroughTheService(t *testing.T) {
	d := newDurable(t)
	svc := executor.New(engine, executor.Options{Policy: local, Sources: []execution.ToolSource{demoserver.Source{Set: d.kv}},
		Suspensions: suspend.NewFile(d.dir, suspend.Options{Now: d.clk.Now, Quota: suspend.Quota{Count: 1}})})
	suspendApproval(t, svc, "jwt:i#hog")
	resp := svc.Execute(context.Background(), execution.Request{Code: approvalScript, Approval: execution.ApprovalSuspend, Principal: "jwt:i#hog"})
	if resp.Status == execution.StatusSuspended || resp.Error == nil || resp.Error.Code != fault.LimitExceeded || resp.Error.Limit != fault.LimitSuspended ||
		!strings.Contains(resp.Error.Message, "PML_SUSPENDED_PER_PRINCIPAL") {
		t.Fatalf("a suspension past the quota: status %q error %+v", resp.Status, resp.Error)
	}
	if len(resp.Calls) != 2 || resp.Calls[1].Status != trace.StatusNotRun {
		t.Fatalf("calls %+v", resp.Calls)
	}
}
