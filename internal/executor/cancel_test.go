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
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/trace"
)

// TestCancelSuspended: a suspended execution is cancelled by its owner or
// an approver, never by another principal; its pending call never runs,
// nothing can resume it after, and its trace says who cancelled it.
func TestCancelSuspended(t *testing.T) {
	d := newDurable(t)
	policy := approval.Policy{Approvers: []string{"arn:approver"}}
	svc := func() (*executor.Service, *memSink) {
		sink := &memSink{}
		return executor.New(engine, executor.Options{Policy: policy, Sources: []execution.ToolSource{demoserver.Source{Set: d.kv}}, Sink: sink,
			Suspensions: suspend.NewFile(d.dir, suspend.Options{Now: d.clk.Now})}), sink
	}
	first, _ := svc()
	tests := []struct {
		name, who string
		want      fault.Code
	}{
		{"another principal", "jwt:other#x", fault.NotFound},
		{"the owner", "jwt:owner#1", ""},
		{"an approver", "arn:approver", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := suspendApproval(t, first, "jwt:owner#1")
			second, sink := svc()
			out, ferr := second.Cancel(context.Background(), execution.CancelRequest{ExecutionID: resp.ExecutionID, Principal: tc.who})
			if tc.want != "" {
				if ferr == nil || ferr.Code != tc.want {
					t.Fatalf("cancel by %s: %+v %+v, want %s", tc.who, out, ferr, tc.want)
				}
				// Still waiting: the owner can go on.
				if _, ferr := second.Waiting(context.Background(), resp.ExecutionID); ferr != nil {
					t.Fatalf("after a refused cancel: %+v", ferr)
				}
				return
			}
			if ferr != nil {
				t.Fatal(ferr)
			}
			if out.Status != execution.StatusCancelled || out.OK || out.Error == nil || out.Error.Code != fault.Cancelled || !strings.Contains(out.Error.Message, tc.who) {
				t.Fatalf("cancelled document: status %q error %+v", out.Status, out.Error)
			}
			if len(out.Calls) != 2 || out.Calls[1].Status != trace.StatusNotRun {
				t.Fatalf("calls %+v: the parked call must be not_run", out.Calls)
			}
			ex := sink.execs[0]
			if ex.Status != trace.StatusError || ex.ErrorCode != fault.Cancelled || len(ex.Events) != 2 || ex.Events[1].Type != trace.EventCancel || ex.Events[1].Principal != tc.who {
				t.Fatalf("trace %+v", ex)
			}
			// The pending kv_delete never ran, and never will.
			if got, _ := d.kv.Call(context.Background(), "kv_get", []byte(`{"key": "k"}`)); !strings.Contains(string(got), `"found":true`) {
				t.Fatalf("k was deleted: %s", got)
			}
			_, ferr = first.Resume(context.Background(), execution.ResumeRequest{ExecutionID: resp.ExecutionID, Principal: "arn:approver", Decisions: map[string]execution.Decision{"2": {Approve: true}}})
			if ferr == nil || ferr.Code != fault.Conflict || !strings.Contains(ferr.Message, string(fault.Cancelled)) {
				t.Fatalf("resuming a cancelled execution: %+v, want CONFLICT naming CANCELLED", ferr)
			}
			if _, ferr := second.Cancel(context.Background(), execution.CancelRequest{ExecutionID: resp.ExecutionID, Principal: tc.who}); ferr == nil || ferr.Code != fault.Conflict {
				t.Fatalf("cancelling twice: %+v, want CONFLICT", ferr)
			}
		})
	}
	if _, ferr := first.Cancel(context.Background(), execution.CancelRequest{ExecutionID: "ex_nope"}); ferr == nil || ferr.Code != fault.NotFound {
		t.Fatalf("unknown id: %+v", ferr)
	}
	if _, ferr := first.Status(context.Background(), "ex_nope", ""); ferr == nil || ferr.Code != fault.NotFound {
		t.Fatalf("status: %+v", ferr)
	}
	if resp := first.Execute(context.Background(), execution.Request{Code: "return 1", Async: true}); resp.Error == nil || resp.Error.Code != fault.InvalidRequest {
		t.Fatalf("async without runs: %+v", resp.Error)
	}
}
