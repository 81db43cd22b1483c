package httpapi_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/httpapi"
	"github.com/pml-sandbox/pml/internal/mcpserver"
	"github.com/pml-sandbox/pml/internal/runs"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/testutil/fronttest"
)

// approverPatterns are a deployment's approvers and trusted clients: who
// they are is the deployment's, never the caller's to learn.
var approverPatterns = approval.Policy{
	Approvers:      []string{"arn:aws:iam::123456789012:role/ops-*", "jwt:https://idp.example#alice"},
	TrustedClients: []string{"jwt:https://idp.example#agent-*"},
}

// leaksAnApprover reports the part of a principal pattern s holds, if any.
func leaksAnApprover(s string) string {
	for _, p := range append(append([]string{}, approverPatterns.Approvers...), approverPatterns.TrustedClients...) {
		for _, part := range []string{p, strings.TrimPrefix(p, "jwt:"), "123456789012", "ops-", "#alice", "agent-*"} {
			if strings.Contains(s, part) {
				return part
			}
		}
	}
	return ""
}

// TestNoAnswerNamesAnApprover: every answer that tells a caller who may
// decide — the suspended document (synchronous, and read back), a refused
// approval or allow_destructive, the suspended text for a model, the
// question put to the client's user, a task's status — names a role ("an
// approver"), never a principal the deployment configured.
func TestNoAnswerNamesAnApprover(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	dir := t.TempDir()
	svc := executor.New(engine, executor.Options{Sources: []execution.ToolSource{demoserver.Source{Set: demoserver.New()}}, Logger: log,
		Suspensions: suspend.NewFile(filepath.Join(dir, "susp"), suspend.Options{}), Policy: approverPatterns})
	rs := runs.New(svc, runs.Options{Store: suspend.NewFileRuns(filepath.Join(dir, "runs"), suspend.Options{}), Policy: approverPatterns, Logger: log,
		PollEvery: 20 * time.Millisecond})
	t.Cleanup(func() { _ = rs.Close(context.Background()) })
	key, err := approval.LoadKeyFile(filepath.Join(dir, "key"))
	if err != nil {
		t.Fatal(err)
	}
	h := httpapi.New(httpapi.Options{Service: rs, Logger: log, Policy: approverPatterns, MCP: mcpserver.Settings{StateKey: key, Suspends: true}})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(execution.WithPrincipal(r.Context(), fronttest.Agent)))
	}))
	t.Cleanup(srv.Close)
	base := srv.URL
	const deleteK = `await mcp.demo.kv_delete({key: 'k'})`

	answers := map[string]string{}
	_, _, doc := fronttest.Call(t, "POST", base+"/execute", fronttest.Agent, `{"approval": "suspend", "code": "`+deleteK+`"}`)
	answers["suspended document"] = fronttest.ToJSON(doc)
	if doc["status"] != "suspended" || !strings.Contains(fronttest.ToJSON(doc), "an approver") {
		t.Fatalf("want a suspension naming the approvers' role: %v", doc)
	}
	id, _ := doc["execution_id"].(string)
	_, _, doc = fronttest.Call(t, "POST", base+"/executions/"+id+"/resume", fronttest.Agent, `{"decisions": {"1": "approve"}}`)
	answers["the caller approving"] = fronttest.ToJSON(doc)
	_, _, doc = fronttest.Call(t, "POST", base+"/execute", fronttest.Agent, `{"allow_destructive": true, "code": "`+deleteK+`"}`)
	answers["allow_destructive"] = fronttest.ToJSON(doc)
	_, _, doc = fronttest.Call(t, "POST", base+"/execute", fronttest.Agent, `{"async": true, "approval": "suspend", "code": "`+deleteK+`"}`)
	async, _ := doc["execution_id"].(string)
	answers["suspended document read back"] = fronttest.ToJSON(pollDoc(t, base, async, fronttest.Agent))

	res, _ := fronttest.RPC(t, base, fronttest.Agent, "tools/call", map[string]any{"name": "execute_code",
		"arguments": map[string]any{"code": deleteK, "approval": "suspend"}})
	answers["execute_code's suspended answer"] = fronttest.ToJSON(res)
	res, _ = fronttest.RPC(t, base, fronttest.Agent, "tools/call", map[string]any{"name": "resume_execution",
		"arguments": map[string]any{"execution_id": id, "decisions": map[string]string{"1": "approve"}}})
	answers["resume_execution approving"] = fronttest.ToJSON(res)
	res, _ = fronttest.RPC(t, base, fronttest.Agent, "tools/call", map[string]any{"name": "execute_code", "task": map[string]any{},
		"arguments": map[string]any{"code": deleteK, "approval": "suspend"}})
	task, _ := res["task"].(map[string]any)
	taskID, _ := task["taskId"].(string)
	res, _ = fronttest.RPC(t, base, fronttest.Agent, "tasks/result", map[string]any{"taskId": taskID})
	answers["tasks/result"] = fronttest.ToJSON(res)
	res, _ = fronttest.RPC(t, base, fronttest.Agent, "tasks/get", map[string]any{"taskId": taskID})
	answers["tasks/get"] = fronttest.ToJSON(res)

	// The question put to the client's user, which this deployment trusts.
	asked := &fronttest.Person{Answer: fronttest.Decline}
	fronttest.ExecuteCode(t, fronttest.ElicitingClient(t, base+"/mcp", "", asked, nil), fronttest.WriteThenDelete)
	if len(asked.Asked) == 0 {
		t.Fatal("the client's user was not asked")
	}
	b, _ := json.Marshal(asked.Asked)
	answers["the question"] = string(b)

	for what, a := range answers {
		if leak := leaksAnApprover(a); leak != "" {
			t.Errorf("%s names an approver (%q): %s", what, leak, a)
		}
	}
	if !strings.Contains(answers["execute_code's suspended answer"], "an approver") {
		t.Errorf("the model is not told who decides: %s", answers["execute_code's suspended answer"])
	}
}
