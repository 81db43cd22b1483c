package executor_test

import (
	"context"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/policy"
	"github.com/pml-sandbox/pml/internal/policy/usage"
	"github.com/pml-sandbox/pml/internal/suspend"
)

// gateRules is an operator's policy file over the demo tools: reads for
// everyone (two an hour), no deletes, kv_set only when a person approves
// that call, and the operator decides.
const gateRules = `
@id("reads") @limit("2/1h")
permit (principal, action == PML::Action::"call", resource == PML::Tool::"demo:kv_get");
@id("writes") permit (principal, action == PML::Action::"call", resource == PML::Tool::"demo:kv_set");
@id("writes-need-a-person") forbid (principal, action == PML::Action::"call", resource == PML::Tool::"demo:kv_set")
unless { context.approved };
@id("echo-asks-when-over") @limit("1/1h") @overLimit("ask")
permit (principal, action == PML::Action::"call", resource == PML::Tool::"demo:echo");
@id("ops-decide") permit (principal, action in [PML::Action::"approve", PML::Action::"reject", PML::Action::"read"], resource)
when { principal.kind == "arn" && principal.account == "123456789012" };
`

func gateService(t *testing.T, d *durable, counter policy.Counter) (*executor.Service, *memSink) {
	t.Helper()
	set, err := policy.Parse("rules.cedar", []byte(gateRules))
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	return executor.New(engine, executor.Options{Policy: approval.Policy{Rules: set, Custom: true},
		Sources: []execution.ToolSource{demoserver.Source{Set: d.kv}}, Sink: sink, Counter: counter,
		Suspensions: suspend.NewFile(d.dir, suspend.Options{Now: d.clk.Now})}), sink
}

// TestGate: the policy set decides every call — refused by name, asked
// of a person, limited — and the trace names what decided.
func TestGate(t *testing.T) {
	d := newDurable(t)
	counter, err := usage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	svc, sink := gateService(t, d, counter)
	ctx := context.Background()
	run := func(code string, approvalMode string) *execution.Response {
		return svc.Execute(ctx, execution.Request{Code: code, Principal: agent, Approval: approvalMode})
	}

	r := run(`return await mcp.demo.kv_delete({key: "a"})`, "")
	if r.Error == nil || r.Error.Code != fault.Forbidden || !strings.Contains(r.Error.Message, "no policy permits it") {
		t.Fatalf("a delete no policy permits: %+v", r.Error)
	}
	r = run(`const out = [];
		for (let i = 0; i < 3; i++) { try { await mcp.demo.kv_get({key: "k"}); out.push("ok") } catch (e) { out.push(e.code + " " + e.message) } }
		return out`, "")
	if !strings.Contains(string(r.Result), `["ok","ok","LIMIT_EXCEEDED`) || !strings.Contains(string(r.Result), `policy \"reads\"`) {
		t.Fatalf("reads past their limit: %s %+v", r.Result, r.Error)
	}
	calls := sink.calls[len(sink.calls)-1]
	if len(calls) != 3 || strings.Join(calls[0].Policies, ",") != "reads" {
		t.Fatalf("traced policies: %+v", calls)
	}

	// Without waiting, a call a person would decide is refused, naming
	// the forbid that asks.
	r = run(`return await mcp.demo.kv_set({key: "a", value: 2})`, "")
	if r.Error == nil || r.Error.Code != fault.Forbidden || !strings.Contains(r.Error.Message, `policy "writes-need-a-person"`) ||
		!strings.Contains(r.Error.Message, `approval "suspend"`) || strings.Contains(r.Error.Message, "require_approval") {
		t.Fatalf("a write without waiting: %+v", r.Error)
	}
	// Waiting, it parks; the operator approves; it runs, and the trace
	// names the policies that let the operator decide.
	r = run(`await mcp.demo.kv_set({key: "a", value: 2}); return "set"`, execution.ApprovalSuspend)
	if r.Status != execution.StatusSuspended || len(r.Pending) != 1 {
		t.Fatalf("a write waiting: %+v %+v", r.Status, r.Error)
	}
	if _, ferr := svc.Resume(ctx, execution.ResumeRequest{ExecutionID: r.ExecutionID, Principal: stranger,
		Decisions: map[string]execution.Decision{"1": {Approve: true}}}); ferr == nil {
		t.Fatal("a stranger approved")
	}
	done, ferr := svc.Resume(ctx, execution.ResumeRequest{ExecutionID: r.ExecutionID, Principal: operator,
		Decisions: map[string]execution.Decision{"1": {Approve: true}}})
	if ferr != nil || !done.OK || string(done.Result) != `"set"` {
		t.Fatalf("approved: %+v %+v", done, ferr)
	}
	last := sink.execs[len(sink.execs)-1]
	if ev := last.Events[len(last.Events)-1]; strings.Join(ev.Policies, ",") != "ops-decide" {
		t.Errorf("the decision's policies: %+v", ev)
	}

	// Over a limit whose policy asks, a call parks for a person.
	r = run(`await mcp.demo.echo({text: "1"}); await mcp.demo.echo({text: "2"}); return "echoed"`, execution.ApprovalSuspend)
	if r.Status != execution.StatusSuspended || len(r.Pending) != 1 || r.Pending[0].CallID != 2 {
		t.Fatalf("past a limit that asks: %+v %+v %+v", r.Status, r.Pending, r.Error)
	}
	done, ferr = svc.Resume(ctx, execution.ResumeRequest{ExecutionID: r.ExecutionID, Principal: operator,
		Decisions: map[string]execution.Decision{"2": {Approve: true}}})
	if ferr != nil || !done.OK {
		t.Fatalf("approved past the limit: %+v %+v", done, ferr)
	}
}

// TestGateWithoutCounter: a limit that cannot be counted refuses its
// calls rather than letting them through.
func TestGateWithoutCounter(t *testing.T) {
	d := newDurable(t)
	svc, _ := gateService(t, d, nil)
	r := svc.Execute(context.Background(), execution.Request{Code: `return await mcp.demo.kv_get({key: "k"})`, Principal: agent})
	if r.Error == nil || r.Error.Code != fault.Forbidden || !strings.Contains(r.Error.Message, "keeps no counts") {
		t.Fatalf("%+v", r.Error)
	}
}
