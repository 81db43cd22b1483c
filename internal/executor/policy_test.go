package executor_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/trace"
)

// The principals of a deployment: an agent that runs scripts, a person
// the deployment names an approver, and someone else.
const (
	agent    = "jwt:https://idp.example#agent-7"
	operator = "arn:aws:iam::123456789012:role/ops-alice"
	stranger = "jwt:https://idp.example#mallory"
)

// deployed is the SAM deployment's policy: the caller does not decide.
var deployed = approval.Policy{Approvers: []string{"arn:aws:iam::123456789012:role/ops-*"}}

// deployedService is d's service under the deployed policy, telling
// notices to notes.
func (d *durable) deployedService(notes *notices) (*executor.Service, *memSink) {
	sink := &memSink{}
	opts := executor.Options{Policy: deployed, Sources: []execution.ToolSource{demoserver.Source{Set: d.kv}}, Sink: sink,
		Suspensions: suspend.NewFile(d.dir, suspend.Options{Now: d.clk.Now})}
	if notes != nil {
		opts.Notify = notes.add
	}
	return executor.New(engine, opts), sink
}

// notices records the suspension notices a service sends.
type notices struct {
	mu  sync.Mutex
	got []execution.SuspensionNotice
}

func (n *notices) add(_ context.Context, s execution.SuspensionNotice) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.got = append(n.got, s)
}

// TestAllowDestructiveIsTheDeploymentsToGive: an agent cannot let itself
// run a destructive call by setting allow_destructive; an approver can,
// and the consent reaches the capability runs below it.
func TestAllowDestructiveIsTheDeploymentsToGive(t *testing.T) {
	d := newDurable(t)
	svc, _ := d.deployedService(nil)
	run := func(principal string) *execution.Response {
		return svc.Execute(context.Background(), execution.Request{Code: `return await mcp.demo.kv_delete({key: "a"})`,
			AllowDestructive: true, Principal: principal})
	}
	for _, p := range []string{agent, stranger, ""} {
		r := run(p)
		if r.OK || r.Error == nil || r.Error.Code != fault.Forbidden || r.Error.Tool != "" ||
			!strings.Contains(r.Error.Message, "allow_destructive is not honoured") || !strings.Contains(r.Error.Message, "only an approver") || len(r.Calls) != 0 {
			t.Fatalf("%q: %+v (%d calls)", p, r.Error, len(r.Calls))
		}
	}
	if r := run(operator); !r.OK {
		t.Fatalf("an approver's allow_destructive: %+v", r.Error)
	}
	// With nobody named, nobody consents in advance.
	none := executor.New(engine, executor.Options{Sources: []execution.ToolSource{demoserver.Source{Set: d.kv}}})
	r := none.Execute(context.Background(), execution.Request{Code: "return 1", AllowDestructive: true, Principal: operator})
	if r.Error == nil || !strings.Contains(r.Error.Message, "no caller may") {
		t.Fatalf("no approvers: %+v", r.Error)
	}
}

// TestWhoMayDecide: under the deployed policy the agent that suspended an
// execution may reject its calls but not approve them, by its credentials
// or through its own MCP client (a form-mode answer is only as human as
// the client); an approver may decide another principal's execution; a
// stranger learns nothing; the client's user decides only where the
// deployment trusts that client.
func TestWhoMayDecide(t *testing.T) {
	d := newDurable(t)
	svc, sink := d.deployedService(nil)
	ctx := context.Background()
	suspendAs := func() string {
		t.Helper()
		r := svc.Execute(ctx, execution.Request{Code: approvalScript, Approval: execution.ApprovalSuspend, Principal: agent})
		// Who may decide is named by role: the approvers' principals are
		// not the caller's to learn.
		if r.Status != execution.StatusSuspended || r.Owner != agent || r.StateVersion != 1 || !strings.Contains(r.Approvers, "an approver") ||
			strings.Contains(r.Approvers, "arn:") {
			t.Fatalf("want a suspension owned by the agent: %+v %q %d %q", r.Error, r.Owner, r.StateVersion, r.Approvers)
		}
		return r.ExecutionID
	}
	resume := func(id, principal string, approve, elicited bool) (*execution.Response, *fault.Error) {
		ch := execution.ChannelCaller
		if elicited {
			ch = execution.ChannelClient
		}
		return svc.Resume(ctx, execution.ResumeRequest{ExecutionID: id, Principal: principal, Channel: ch,
			Decisions: map[string]execution.Decision{"2": {Approve: approve, Reason: "checked"}}})
	}

	id := suspendAs()
	if _, ferr := resume(id, agent, true, false); ferr == nil || ferr.Code != fault.Forbidden || !strings.Contains(ferr.Message, "the caller may reject") {
		t.Fatalf("the agent approving its own: %+v", ferr)
	}
	if _, ferr := resume(id, stranger, false, false); ferr == nil || ferr.Code != fault.NotFound || !strings.Contains(ferr.Message, "no suspended execution") {
		t.Fatalf("a stranger: %+v", ferr)
	}
	if _, ferr := resume(id, stranger, true, true); ferr == nil || ferr.Code != fault.NotFound {
		t.Fatalf("elicited answers on another principal's session: %+v", ferr)
	}
	out, ferr := resume(id, operator, true, false)
	if ferr != nil || !out.OK {
		t.Fatalf("an approver: %+v %+v", ferr, out)
	}
	if ev := lastEvent(sink); ev.Principal != operator || ev.Via != trace.ViaApprover {
		t.Fatalf("trace of the approver's decision: %+v", ev)
	}

	id = suspendAs()
	out, ferr = resume(id, agent, false, false)
	if ferr != nil || !out.OK || !strings.Contains(string(out.Result), `"code":"REJECTED"`) {
		t.Fatalf("the agent rejecting its own: %+v %s", ferr, out.Result)
	}
	if ev := lastEvent(sink); ev.Via != trace.ViaCaller || ev.Decisions[0].Decision != "reject" {
		t.Fatalf("trace of the agent's rejection: %+v", ev)
	}

	id = suspendAs()
	// The agent's own client answering "approve": no decision here.
	if _, ferr := resume(id, agent, true, true); ferr == nil || ferr.Code != fault.Forbidden {
		t.Fatalf("an untrusted client's form answer approved: %+v", ferr)
	}
	// A deployment that trusts the agent's client to show a real dialog.
	trusting := deployed
	trusting.TrustedClients = []string{"jwt:https://idp.example#agent-*"}
	svc = executor.New(engine, executor.Options{Policy: trusting, Sources: []execution.ToolSource{demoserver.Source{Set: d.kv}}, Sink: sink,
		Suspensions: suspend.NewFile(d.dir, suspend.Options{Now: d.clk.Now})})
	// The approver's run deleted k already: the call runs, and finds none.
	if out, ferr = resume(id, agent, true, true); ferr != nil || !out.OK || !strings.Contains(string(out.Result), "no key k") {
		t.Fatalf("a trusted client's user approving through elicitation: %+v %+v", ferr, out)
	}
	if ev := lastEvent(sink); ev.Via != trace.ViaElicitation {
		t.Fatalf("trace of the elicited decision: %+v", ev)
	}
	// Its credentials alone still may not.
	id = suspendAs()
	if _, ferr := resume(id, agent, true, false); ferr == nil || ferr.Code != fault.Forbidden {
		t.Fatalf("a trusted client's principal approving by its credentials: %+v", ferr)
	}
}

func lastEvent(sink *memSink) trace.Event {
	ex := sink.execs[len(sink.execs)-1]
	return ex.Events[len(ex.Events)-1]
}

// TestSuspensionIsAnnounced: a suspension tells the deployment's notifier
// who it belongs to, which tools wait and until when — not the arguments —
// and only then may queued sources suspend.
func TestSuspensionIsAnnounced(t *testing.T) {
	d := newDurable(t)
	var notes notices
	svc, _ := d.deployedService(&notes)
	r := svc.Execute(context.Background(), execution.Request{Code: approvalScript, Approval: execution.ApprovalSuspend, Principal: agent, Source: execution.SourceSQS})
	if r.Status != execution.StatusSuspended {
		t.Fatalf("a queued request may suspend where suspensions are announced: %+v", r.Error)
	}
	if len(notes.got) != 1 {
		t.Fatalf("notices %+v", notes.got)
	}
	n := notes.got[0]
	if n.ExecutionID != r.ExecutionID || n.Principal != agent || n.Source != execution.SourceSQS || !n.ExpiresAt.Equal(r.ExpiresAt) ||
		len(n.Pending) != 1 || n.Pending[0] != (execution.PendingTool{CallID: 2, Tool: "demo:kv_delete"}) {
		t.Fatalf("notice %+v", n)
	}

	silent, _ := d.deployedService(nil)
	r = silent.Execute(context.Background(), execution.Request{Code: approvalScript, Approval: execution.ApprovalSuspend, Source: execution.SourceSQS})
	if r.Error == nil || r.Error.Code != fault.InvalidRequest || !strings.Contains(r.Error.Message, "announces no suspensions") {
		t.Fatalf("a queued request where nobody is told: %+v", r.Error)
	}
}

// TestSuspensionNoticeNamesEveryCall: however many calls wait and however
// long their arguments, the notice names every one of them, and carries
// none of their arguments.
func TestSuspensionNoticeNamesEveryCall(t *testing.T) {
	d := newDurable(t)
	var notes notices
	svc, _ := d.deployedService(&notes)
	const n = 16 // as many as a run keeps in flight
	code := `const note = "Routine cleanup. " + " ".repeat(5000);
await Promise.all(Array.from({length: ` + strconv.Itoa(n) + `}, (_, i) => mcp.demo.kv_delete({note, key: "production_" + i})));`
	r := svc.Execute(context.Background(), execution.Request{Code: code, Approval: execution.ApprovalSuspend, Principal: agent})
	if r.Status != execution.StatusSuspended || len(r.Pending) != n || len(notes.got) != 1 {
		t.Fatalf("want %d pending calls and one notice: %+v %d %d", n, r.Error, len(r.Pending), len(notes.got))
	}
	b, _ := json.Marshal(notes.got[0])
	if len(notes.got[0].Pending) != n || strings.Contains(string(b), "production_") || strings.Contains(string(b), "Routine") {
		t.Fatalf("the notice does not name every call, or carries arguments: %s", b)
	}
	for i, p := range notes.got[0].Pending {
		if p.CallID != r.Pending[i].CallID || p.Tool != "demo:kv_delete" {
			t.Fatalf("pending %d in the notice: %+v", i, p)
		}
	}
}

// TestIdsCannotBeProbedHere: resuming or cancelling another principal's
// execution — waiting, or expired — is refused word for word as for an id
// never issued; only the owner and an approver learn that it expired.
func TestIdsCannotBeProbedHere(t *testing.T) {
	d := newDurable(t)
	svc, _ := d.deployedService(nil)
	ctx := context.Background()
	type answer struct {
		Code    fault.Code
		Message string
	}
	probe := func(id, principal string) (resume, cancel answer) {
		_, rf := svc.Resume(ctx, execution.ResumeRequest{ExecutionID: id, Principal: principal,
			Decisions: map[string]execution.Decision{"2": {Reason: "no"}}})
		_, cf := svc.Cancel(ctx, execution.CancelRequest{ExecutionID: id, Principal: principal})
		if rf == nil || cf == nil {
			t.Fatalf("%s by %s: resume %+v, cancel %+v; want refusals", id, principal, rf, cf)
		}
		return answer{rf.Code, strings.ReplaceAll(rf.Message, id, "ID")}, answer{cf.Code, strings.ReplaceAll(cf.Message, id, "ID")}
	}
	waiting := suspendApproval(t, svc, agent).ExecutionID
	unknownResume, unknownCancel := probe("ex_"+strings.Repeat("0", len(waiting)-3), stranger)
	if unknownResume.Code != fault.NotFound || unknownCancel.Code != fault.NotFound {
		t.Fatalf("an unknown id: %+v %+v", unknownResume, unknownCancel)
	}
	if r, c := probe(waiting, stranger); r != unknownResume || c != unknownCancel {
		t.Errorf("another principal's waiting execution: %+v %+v; an unknown id's: %+v %+v", r, c, unknownResume, unknownCancel)
	}
	expired := suspendApproval(t, svc, agent).ExecutionID
	d.clk.Add(execution.SuspensionTTL + time.Minute)
	if r, c := probe(expired, stranger); r != unknownResume || c != unknownCancel {
		t.Errorf("another principal's expired execution: %+v %+v; an unknown id's: %+v %+v", r, c, unknownResume, unknownCancel)
	}
	for _, p := range []string{agent, operator} {
		if r, c := probe(expired, p); r.Code != fault.Expired || c.Code != fault.Expired {
			t.Errorf("%s, who may see it, is not told it expired: %+v %+v", p, r, c)
		}
	}
}
