package executor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/journal"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/testutil/askserver"
	"github.com/pml-sandbox/pml/internal/toolsource"
	mcpkind "github.com/pml-sandbox/pml/internal/toolsource/mcp"
)

// askScript calls a tool whose server asks before it answers, and says
// how the call ended.
const askScript = `try { return await mcp.ask.confirm_delete({item: "report"}) } catch (e) { return {code: e.code, message: e.message} }`

// asking is a remote server that asks, and services over it that keep
// their suspended executions in one directory, each with a pool of its own
// (as separate processes would have).
type asking struct {
	srv *askserver.Server
	dir string
}

func newAsking(t *testing.T) *asking {
	t.Helper()
	srv, err := askserver.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return &asking{srv: srv, dir: t.TempDir()}
}

func (a *asking) service(t *testing.T, policy approval.Policy) *executor.Service {
	t.Helper()
	pool, err := new(mcpkind.Kind).NewSet(context.Background(), toolsource.Env{Logger: slog.New(slog.DiscardHandler)}, mcpkind.Config{Config: toolsource.Config{Name: "ask"}, URL: a.srv.URL, Transport: "streamable"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pool.Close() })
	return executor.New(engine, executor.Options{Policy: policy, Sources: []execution.ToolSource{pool},
		Sink: &memSink{}, Suspensions: suspend.NewFile(a.dir, suspend.Options{}), Journal: a.journal()})
}

// journal is the services' journal of effects, beside their suspensions.
func (a *asking) journal() *journal.File {
	return journal.NewFile(filepath.Join(a.dir, "journal"), journal.Options{})
}

func answer(action string, content string) execution.Decision {
	a := `{"action": "` + action + `"}`
	if content != "" {
		a = `{"action": "` + action + `", "content": ` + content + `}`
	}
	return execution.Decision{Approve: true, Answers: map[string]json.RawMessage{"confirm": json.RawMessage(a)}}
}

// TestRemoteQuestionParksAndResumesElsewhere: a remote server's question
// parks the call and suspends the execution; the document says what the
// server asked, unchanged, and never its requestState; the answer resumes
// it in another service (another pool), which sends the call again with
// the answers (completed with the question's defaults) and the very state
// the server issued, and the script gets the server's result.
func TestRemoteQuestionParksAndResumesElsewhere(t *testing.T) {
	a := newAsking(t)
	first := a.service(t, local)
	resp := first.Execute(context.Background(), execution.Request{Code: askScript, Approval: execution.ApprovalSuspend})
	if !resp.Suspended() || len(resp.Pending) != 1 {
		t.Fatalf("want a suspension on one question: status %q error %+v pending %+v", resp.Status, resp.Error, resp.Pending)
	}
	p := resp.Pending[0]
	var q struct {
		Message string         `json:"message"`
		Schema  map[string]any `json:"requestedSchema"`
	}
	if err := json.Unmarshal(p.Questions["confirm"], &q); err != nil || p.Reason != execution.PendingQuestion || p.Server != "ask" || p.Tool != "confirm_delete" {
		t.Fatalf("pending %+v (%v)", p, err)
	}
	if q.Message != fmt.Sprintf(askserver.Question, "report") || q.Schema["required"] == nil {
		t.Fatalf("the question changed on its way: %+v", q)
	}
	doc, _ := json.Marshal(resp)
	issued := a.srv.Issued()
	if len(issued) != 1 || strings.Contains(string(doc), issued[0]) {
		t.Fatalf("the server's requestState reached the document (issued %v): %s", issued, doc)
	}

	second := a.service(t, local)
	out, ferr := second.Resume(context.Background(), execution.ResumeRequest{ExecutionID: resp.ExecutionID,
		Decisions: map[string]execution.Decision{"1": answer("accept", `{"confirmed": true}`)}})
	if ferr != nil {
		t.Fatal(ferr)
	}
	if !out.OK {
		t.Fatalf("resumed: %+v", out.Error)
	}
	jsonEq(t, out.Result, `{"deleted": true, "item": "report", "note": "none"}`)
	r := a.srv.Retries()
	if len(r) != 1 || !r[0].Known || r[0].State != issued[0] {
		t.Fatalf("retries %+v; want one with the issued state %s", r, issued[0])
	}
	if len(out.Calls) != 1 || !out.Calls[0].OK {
		t.Fatalf("calls %+v", out.Calls)
	}
}

// TestRemoteQuestionDeclined: a declined or cancelled question, or a
// rejected call, fails the script's call with REJECTED, which it catches;
// the server is not called again.
func TestRemoteQuestionDeclined(t *testing.T) {
	for _, d := range []execution.Decision{answer("decline", ""), answer("cancel", ""), {Reason: "not today"}} {
		t.Run(d.Word()+d.Reason+string(d.Answers["confirm"]), func(t *testing.T) {
			a := newAsking(t)
			svc := a.service(t, local)
			resp := svc.Execute(context.Background(), execution.Request{Code: askScript, Approval: execution.ApprovalSuspend})
			if !resp.Suspended() {
				t.Fatalf("not suspended: %+v", resp.Error)
			}
			out, ferr := svc.Resume(context.Background(), execution.ResumeRequest{ExecutionID: resp.ExecutionID,
				Decisions: map[string]execution.Decision{"1": d}})
			if ferr != nil {
				t.Fatal(ferr)
			}
			var got struct{ Code, Message string }
			if err := json.Unmarshal(out.Result, &got); err != nil || got.Code != string(fault.Rejected) {
				t.Fatalf("result %s (%v); want the script to catch REJECTED", out.Result, err)
			}
			if len(a.srv.Retries()) != 0 {
				t.Fatalf("the server was called again: %+v", a.srv.Retries())
			}
		})
	}
}

// TestRemoteQuestionRefusals: what cannot be asked, or answered, is
// refused with a clear message: a question where nobody can be asked, a
// server asking for sampling, an approval or a malformed answer for a
// question, and an answer for a call that waits for approval.
func TestRemoteQuestionRefusals(t *testing.T) {
	a := newAsking(t)
	svc := a.service(t, local)
	ctx := context.Background()

	run := svc.Execute(ctx, execution.Request{Code: askScript})
	var got struct{ Code, Message string }
	_ = json.Unmarshal(run.Result, &got)
	if got.Code != string(fault.Forbidden) || !strings.Contains(got.Message, "asked a question") || !strings.Contains(got.Message, "report") {
		t.Errorf("without suspend: %s; want FORBIDDEN quoting the question", run.Result)
	}
	run = svc.Execute(ctx, execution.Request{Code: `try { return await mcp.ask.summarise({}) } catch (e) { return {code: e.code, message: e.message} }`,
		Approval: execution.ApprovalSuspend})
	_ = json.Unmarshal(run.Result, &got)
	if got.Code != string(fault.ToolError) || !strings.Contains(got.Message, "sampling") {
		t.Errorf("sampling: %s; want TOOL_ERROR naming sampling", run.Result)
	}

	resp := svc.Execute(ctx, execution.Request{Code: askScript, Approval: execution.ApprovalSuspend})
	if !resp.Suspended() {
		t.Fatalf("not suspended: %+v", resp.Error)
	}
	bad := []struct {
		name string
		d    execution.Decision
		want string
	}{
		{"approve", execution.Decision{Approve: true}, "waits for an answer"},
		{"wrong key", execution.Decision{Approve: true, Answers: map[string]json.RawMessage{"other": json.RawMessage(`{"action":"accept"}`)}}, "keyed"},
		{"bad action", answer("maybe", ""), `"maybe"`},
	}
	for _, b := range bad {
		_, ferr := svc.Resume(ctx, execution.ResumeRequest{ExecutionID: resp.ExecutionID, Decisions: map[string]execution.Decision{"1": b.d}})
		if ferr == nil || ferr.Code != fault.InvalidRequest || !strings.Contains(ferr.Message, b.want) {
			t.Errorf("%s: %+v; want INVALID_REQUEST saying %q", b.name, ferr, b.want)
		}
	}
	if w, ferr := svc.Waiting(ctx, resp.ExecutionID); ferr != nil || len(w.Pending) != 1 {
		t.Fatalf("after refused answers the execution should still wait: %+v %+v", w, ferr)
	}
}

// TestRemoteQuestionWhoAnswers: under a deployment's policy the answer is
// weighed as an approval: its own MCP client's user only where the
// deployment trusts that client, never its credentials alone; another
// principal learns nothing of it.
func TestRemoteQuestionWhoAnswers(t *testing.T) {
	const owner = "jwt:https://idp#agent-7"
	deployed := approval.Policy{Approvers: []string{"arn:aws:iam::1:role/ops-*"}, TrustedClients: []string{owner}}
	a := newAsking(t)
	svc := a.service(t, deployed)
	ctx := context.Background()
	resp := svc.Execute(ctx, execution.Request{Code: askScript, Approval: execution.ApprovalSuspend, Principal: owner})
	if !resp.Suspended() {
		t.Fatalf("not suspended: %+v", resp.Error)
	}
	d := map[string]execution.Decision{"1": answer("accept", `{"confirmed": false}`)}
	_, ferr := svc.Resume(ctx, execution.ResumeRequest{ExecutionID: resp.ExecutionID, Decisions: d, Principal: owner})
	if ferr == nil || ferr.Code != fault.Forbidden || !strings.Contains(ferr.Message, "its user's") {
		t.Fatalf("the agent's credentials answered: %+v", ferr)
	}
	_, ferr = svc.Resume(ctx, execution.ResumeRequest{ExecutionID: resp.ExecutionID, Decisions: d, Principal: "jwt:https://idp#mallory", Channel: execution.ChannelClient})
	if ferr == nil || ferr.Code != fault.NotFound {
		t.Fatalf("another principal's client answered: %+v", ferr)
	}
	// An untrusted client's form is no answer, even the asker's own.
	untrusted := a.service(t, approval.Policy{Approvers: deployed.Approvers})
	if _, ferr := untrusted.Resume(ctx, execution.ResumeRequest{ExecutionID: resp.ExecutionID, Decisions: d, Principal: owner, Channel: execution.ChannelClient}); ferr == nil || ferr.Code != fault.Forbidden {
		t.Fatalf("an untrusted client answered: %+v", ferr)
	}
	out, ferr := svc.Resume(ctx, execution.ResumeRequest{ExecutionID: resp.ExecutionID, Decisions: d, Principal: owner, Channel: execution.ChannelClient})
	if ferr != nil || !out.OK {
		t.Fatalf("the asker's client: %+v %+v", ferr, out)
	}
	jsonEq(t, out.Result, `{"deleted": false, "item": "report"}`)
}

// TestQuestionEffect: a call whose server asks is an effect sent twice
// with one key: pending while the execution waits for the answer, applied
// (attempt 2) once it is sent again with it; a declined one failed.
func TestQuestionEffect(t *testing.T) {
	ctx := context.Background()
	for _, d := range []execution.Decision{answer("accept", `{"confirmed": true}`), answer("decline", "")} {
		t.Run(string(d.Answers["confirm"]), func(t *testing.T) {
			a := newAsking(t)
			code := strings.Replace(askScript, "confirm_delete", "archive", 1)
			resp := a.service(t, local).Execute(ctx, execution.Request{Code: code, Approval: execution.ApprovalSuspend})
			key := journal.Key(resp.ExecutionID, 1)
			if !resp.Suspended() || len(resp.Effects) != 1 || resp.Effects[0].Status != "pending" || resp.Effects[0].Key != key {
				t.Fatalf("suspended: %+v", resp.Effects)
			}
			waiting, ferr := a.service(t, local).Waiting(ctx, resp.ExecutionID)
			if ferr != nil || len(waiting.Effects) != 1 || waiting.Effects[0].Status != "pending" {
				t.Fatalf("waiting: %+v %v", waiting, ferr)
			}
			out, ferr := a.service(t, local).Resume(ctx, execution.ResumeRequest{ExecutionID: resp.ExecutionID,
				Decisions: map[string]execution.Decision{"1": d}})
			if ferr != nil {
				t.Fatal(ferr)
			}
			entries, err := a.journal().List(ctx, resp.ExecutionID)
			if err != nil || len(entries) != 1 {
				t.Fatal(entries, err)
			}
			want, attempts := "applied", 2
			if d.Answers["confirm"] != nil && strings.Contains(string(d.Answers["confirm"]), "decline") {
				want, attempts = "failed", 1
			}
			if len(out.Effects) != 1 || out.Effects[0].Status != want || out.Effects[0].Key != key || string(entries[0].Status) != want || entries[0].Attempts != attempts {
				t.Fatalf("after the answer: effects %+v, entry %+v", out.Effects, entries[0])
			}
		})
	}
}
