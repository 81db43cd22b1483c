package executor_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/suspend"
)

// TestSessionWaitsForAPerson: an execution of a session that needs a
// person suspends, holding the session (another execution of it is
// refused meanwhile), and resumed by another service (process) it runs on
// and the session keeps what it did; a cancelled one gives the session
// back as it was.
func TestSessionWaitsForAPerson(t *testing.T) {
	root := t.TempDir()
	d := newDurable(t)
	svc := func() *executor.Service {
		return sessionService(filepath.Join(root, "sessions"), func(o *executor.Options) {
			o.Policy = local
			o.Sources[0] = demoserver.Source{Set: d.kv}
			o.Suspensions = suspend.NewFile(filepath.Join(root, "suspended"), suspend.Options{})
		})
	}
	ctx := context.Background()
	first := mustStep(t, svc(), execution.Request{Code: "let n = 1\nreturn n", Session: execution.SessionNew}, "1")
	sid := first.Session.ID

	step := svc().Execute(ctx, execution.Request{Code: `n = n + 1
const d = await mcp.demo.kv_delete({key: "a"})
n = n + 10
return [n, d]`, SessionID: sid, Approval: execution.ApprovalSuspend})
	if !step.Suspended() || step.Session == nil || step.Session.ID != sid || step.Session.Saved || !strings.Contains(step.Session.Note, "waits for a person") {
		t.Fatalf("want a suspension holding the session: %+v %+v", step.Error, step.Session)
	}
	busy := svc().Execute(ctx, execution.Request{Code: "return n", SessionID: sid})
	if busy.Error == nil || busy.Error.Code != fault.Conflict || !strings.Contains(busy.Error.Message, step.ExecutionID) {
		t.Fatalf("another execution while one waits: %+v", busy.Error)
	}
	done, ferr := svc().Resume(ctx, execution.ResumeRequest{ExecutionID: step.ExecutionID, Decisions: map[string]execution.Decision{"1": {Approve: true}}})
	if ferr != nil || !done.OK || done.Session == nil || !done.Session.Saved {
		t.Fatalf("resumed: %+v %+v %+v", ferr, done.Error, done.Session)
	}
	jsonEq(t, done.Result, `[12, "deleted a"]`)
	mustStep(t, svc(), execution.Request{Code: "return n", SessionID: sid}, "12")

	// Cancelled while it waits: the session is as the execution before
	// it left it.
	step = svc().Execute(ctx, execution.Request{Code: "n = 100\nawait mcp.demo.kv_delete({key: \"b\"})", SessionID: sid, Approval: execution.ApprovalSuspend})
	if !step.Suspended() {
		t.Fatalf("want a suspension: %+v", step.Error)
	}
	if _, ferr := svc().Cancel(ctx, execution.CancelRequest{ExecutionID: step.ExecutionID}); ferr != nil {
		t.Fatal(ferr)
	}
	mustStep(t, svc(), execution.Request{Code: "return n", SessionID: sid}, "12")

	// Ended while an execution waits: the resumption does not run on.
	step = svc().Execute(ctx, execution.Request{Code: "await mcp.demo.kv_delete({key: \"b\"})", SessionID: sid, Approval: execution.ApprovalSuspend})
	if !step.Suspended() {
		t.Fatalf("want a suspension: %+v", step.Error)
	}
	if ferr := svc().EndSession(ctx, execution.SessionRequest{SessionID: sid}); ferr != nil {
		t.Fatal(ferr)
	}
	lost, ferr := svc().Resume(ctx, execution.ResumeRequest{ExecutionID: step.ExecutionID, Decisions: map[string]execution.Decision{"1": {Approve: true}}})
	if ferr != nil || lost.Error == nil || lost.Error.Code != fault.Conflict || !strings.Contains(lost.Error.Message, "moved on") {
		t.Fatalf("resumed after the session ended: %+v %+v", ferr, lost)
	}
	if got, err := d.kv.Call(ctx, "kv_get", json.RawMessage(`{"key": "b"}`)); err != nil || !strings.Contains(string(got), `"found":true`) {
		t.Fatalf("the call ran though its session had ended: %s %v", got, err)
	}
}
