package executor_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/elicit"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/toolsource"
	mcpkind "github.com/pml-sandbox/pml/internal/toolsource/mcp"
)

// countingAnswerer answers through a script and counts the questions.
type countingAnswerer struct {
	script *elicit.Script
	mu     sync.Mutex
	asked  []elicit.Question
}

func (c *countingAnswerer) Answer(ctx context.Context, q elicit.Question) (elicit.Result, error) {
	c.mu.Lock()
	c.asked = append(c.asked, q)
	c.mu.Unlock()
	return c.script.Answer(ctx, q)
}

func (a *asking) inlineService(t *testing.T, policy approval.Policy, answers string) (*executor.Service, *countingAnswerer) {
	t.Helper()
	script, err := elicit.ParseScript([]byte(answers), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ans := &countingAnswerer{script: script}
	pool, err := (&mcpkind.Kind{Answerer: ans}).NewSet(context.Background(), toolsource.Env{Logger: slog.New(slog.DiscardHandler)}, mcpkind.Config{Config: toolsource.Config{Name: "ask"}, URL: a.srv.URL, Transport: "streamable"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pool.Close() })
	return executor.New(engine, executor.Options{Policy: policy, Sources: []execution.ToolSource{pool},
		Sink: &memSink{}, Suspensions: suspend.NewFile(a.dir, suspend.Options{}), Answerer: ans}), ans
}

// TestRemoteQuestionAnsweredInLine: where the caller is the person at the
// keyboard (the policy lets the caller decide) and the execution cannot
// suspend, a 2026-07-28 server's question (input_required) is put to the
// service's answerer while the script waits, and the call is sent again
// with the answer, completed with the form's defaults, and the server's
// own state: the script gets the server's result. A declined question
// fails the call REJECTED and the server is not called again. An
// execution that may suspend still parks the question, and where the
// policy does not let the caller answer, nobody is asked.
func TestRemoteQuestionAnsweredInLine(t *testing.T) {
	ctx := context.Background()
	t.Run("answered", func(t *testing.T) {
		a := newAsking(t)
		svc, ans := a.inlineService(t, local, `{"ask:confirm_delete": {"action": "accept", "content": {"confirmed": true}}}`)
		resp := svc.Execute(ctx, execution.Request{Code: askScript})
		if !resp.OK {
			t.Fatalf("run: %+v", resp.Error)
		}
		jsonEq(t, resp.Result, `{"deleted": true, "item": "report", "note": "none"}`)
		r := a.srv.Retries()
		if len(r) != 1 || !r[0].Known {
			t.Fatalf("retries %+v; want one with the state the server issued", r)
		}
		if len(ans.asked) != 1 || ans.asked[0].Who() != "ask:confirm_delete" || !strings.Contains(string(ans.asked[0].Params), "Delete report?") {
			t.Fatalf("asked %+v", ans.asked)
		}
	})
	t.Run("declined", func(t *testing.T) {
		a := newAsking(t)
		svc, _ := a.inlineService(t, local, `["decline"]`)
		resp := svc.Execute(ctx, execution.Request{Code: askScript})
		var got struct{ Code, Message string }
		if err := json.Unmarshal(resp.Result, &got); err != nil || got.Code != string(fault.Rejected) || !strings.Contains(got.Message, "declined") {
			t.Fatalf("result %s; want the script to catch REJECTED", resp.Result)
		}
		if len(a.srv.Retries()) != 0 {
			t.Fatalf("the server was called again: %+v", a.srv.Retries())
		}
	})
	t.Run("an answer that does not fit", func(t *testing.T) {
		a := newAsking(t)
		svc, _ := a.inlineService(t, local, `["accept"]`)
		resp := svc.Execute(ctx, execution.Request{Code: askScript})
		var got struct{ Code, Message string }
		if err := json.Unmarshal(resp.Result, &got); err != nil || got.Code != string(fault.InvalidRequest) || !strings.Contains(got.Message, "confirmed") {
			t.Fatalf("result %s; want INVALID_REQUEST naming the missing field", resp.Result)
		}
	})
	t.Run("an execution that may suspend parks it", func(t *testing.T) {
		a := newAsking(t)
		svc, ans := a.inlineService(t, local, `["accept"]`)
		resp := svc.Execute(ctx, execution.Request{Code: askScript, Approval: execution.ApprovalSuspend})
		if !resp.Suspended() || len(ans.asked) != 0 {
			t.Fatalf("status %q, asked %d; want a suspension and nobody asked in line", resp.Status, len(ans.asked))
		}
	})
	t.Run("the caller may not answer", func(t *testing.T) {
		a := newAsking(t)
		svc, ans := a.inlineService(t, approval.Policy{Approvers: []string{"arn:aws:iam::1:role/ops"}}, `["accept"]`)
		resp := svc.Execute(ctx, execution.Request{Code: askScript, Principal: "arn:aws:iam::1:role/agent"})
		var got struct{ Code string }
		if err := json.Unmarshal(resp.Result, &got); err != nil || got.Code != string(fault.Forbidden) || len(ans.asked) != 0 {
			t.Fatalf("result %s, asked %d; want FORBIDDEN and nobody asked", resp.Result, len(ans.asked))
		}
	})
}
