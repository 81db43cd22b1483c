package mcpserver_test

import (
	"context"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/pml-sandbox/pml/internal/mcpserver"
	"github.com/pml-sandbox/pml/internal/testutil/fronttest"
	"github.com/pml-sandbox/pml/internal/testutil/mcptest"
)

// asyncServer is the MCP server over fronttest.NewAsync's runs service,
// as the Lambda serves it (no streaming), each request from the principal
// its fronttest.PrincipalHeader names.
func asyncServer(t *testing.T) string {
	t.Helper()
	a := fronttest.NewAsync(t, engine)
	return serve(t, mcpserver.Options{Service: a.Exec, Logger: a.Log, Policy: a.Policy, Settings: mcpserver.Settings{Suspends: true}}, "").URL
}

// TestMCPTasks: execute_code as a task, polled, waited on and cancelled
// over plain JSON-RPC; a suspended one waits for input.
func TestMCPTasks(t *testing.T) {
	base := asyncServer(t)
	const agent = "jwt:https://idp#agent"

	// Advertised: tasks for tool calls, cancel, no list; execute_code
	// may be a task.
	c := mcptest.Streamable(t, base+"/mcp", mcp.ProtocolVersion20251125)
	tools, err := c.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	caps := c.GetServerCapabilities()
	if caps.Tasks == nil || caps.Tasks.Cancel == nil || caps.Tasks.List != nil || caps.Tasks.Requests == nil || caps.Tasks.Requests.Tools == nil {
		t.Fatalf("tasks capability %+v", caps.Tasks)
	}
	for _, tool := range tools.Tools {
		if tool.Name == "execute_code" && (tool.Execution == nil || tool.Execution.TaskSupport != mcp.TaskSupportOptional) {
			t.Fatalf("execute_code's execution %+v", tool.Execution)
		}
	}

	res, e := fronttest.RPC(t, base, agent, "tools/call", map[string]any{"name": "execute_code", "task": map[string]any{"ttl": 60000},
		"arguments": map[string]any{"code": "await mcp.demo.sleep({ms: 100}); return 'ok'"}})
	task, _ := res["task"].(map[string]any)
	id, _ := task["taskId"].(string)
	if e != nil || id == "" || task["status"] != "working" || task["pollInterval"] != 1000.0 || task["createdAt"] == "" {
		t.Fatalf("created: %v %v", res, e)
	}
	if res, _ := fronttest.RPC(t, base, agent, "tasks/get", map[string]any{"taskId": id}); res["status"] != "working" && res["status"] != "completed" {
		t.Fatalf("tasks/get %v", res)
	}
	if _, e := fronttest.RPC(t, base, "jwt:https://idp#other", "tasks/get", map[string]any{"taskId": id}); e == nil || e["code"] != -32602.0 {
		t.Fatalf("another principal's task: %v", e)
	}
	res, e = fronttest.RPC(t, base, agent, "tasks/result", map[string]any{"taskId": id})
	sc, _ := res["structuredContent"].(map[string]any)
	if e != nil || res["isError"] == true || sc["result"] != "ok" || !strings.Contains(fronttest.ToJSON(res["_meta"]), id) {
		t.Fatalf("tasks/result %v %v", res, e)
	}
	if res, _ := fronttest.RPC(t, base, agent, "tasks/get", map[string]any{"taskId": id}); res["status"] != "completed" {
		t.Fatalf("tasks/get after %v", res)
	}
	if _, e := fronttest.RPC(t, base, agent, "tasks/cancel", map[string]any{"taskId": id}); e == nil || e["code"] != -32602.0 {
		t.Fatalf("cancelling a completed task: %v", e)
	}
	if _, e := fronttest.RPC(t, base, agent, "tasks/list", map[string]any{}); e == nil || e["code"] != -32601.0 {
		t.Fatalf("tasks/list: %v", e)
	}
	if _, e := fronttest.RPC(t, base, agent, "tasks/get", map[string]any{"taskId": "ex_nope"}); e == nil {
		t.Fatal("an unknown task")
	}
	if _, e := fronttest.RPC(t, base, agent, "tools/call", map[string]any{"name": "execute_code", "task": map[string]any{}, "arguments": map[string]any{"lang": "js"}}); e == nil || e["code"] != -32602.0 {
		t.Fatalf("bad arguments: %v", e)
	}

	// Cancelled while it runs.
	res, _ = fronttest.RPC(t, base, agent, "tools/call", map[string]any{"name": "execute_code", "task": map[string]any{},
		"arguments": map[string]any{"code": "for (let i = 0; i < 50; i++) await mcp.demo.sleep({ms: 50})"}})
	id = res["task"].(map[string]any)["taskId"].(string)
	if res, e := fronttest.RPC(t, base, agent, "tasks/cancel", map[string]any{"taskId": id}); e != nil || res["status"] != "cancelled" {
		t.Fatalf("tasks/cancel %v %v", res, e)
	}
	res, _ = fronttest.RPC(t, base, agent, "tasks/result", map[string]any{"taskId": id})
	if res["isError"] != true || !strings.Contains(fronttest.ToJSON(res["structuredContent"]), "CANCELLED") {
		t.Fatalf("a cancelled task's result %v", res)
	}

	// Waiting for input: the suspended document, then resume_execution.
	res, _ = fronttest.RPC(t, base, agent, "tools/call", map[string]any{"name": "execute_code", "task": map[string]any{},
		"arguments": map[string]any{"code": "await mcp.demo.kv_delete({key: 'k'}); return 'deleted'", "approval": "suspend"}})
	id = res["task"].(map[string]any)["taskId"].(string)
	res, _ = fronttest.RPC(t, base, agent, "tasks/result", map[string]any{"taskId": id})
	if res["isError"] == true || !strings.Contains(fronttest.ToJSON(res["structuredContent"]), `"status":"suspended"`) {
		t.Fatalf("a suspended task's result %v", res)
	}
	if res, _ := fronttest.RPC(t, base, agent, "tasks/get", map[string]any{"taskId": id}); res["status"] != "input_required" {
		t.Fatalf("tasks/get of a suspended execution %v", res)
	}
	res, _ = fronttest.RPC(t, base, "arn:approver", "tools/call", map[string]any{"name": "resume_execution",
		"arguments": map[string]any{"execution_id": id, "decisions": map[string]string{"1": "approve"}}})
	if res["isError"] == true {
		t.Fatalf("resume %v", res)
	}
	if res, _ := fronttest.RPC(t, base, agent, "tasks/get", map[string]any{"taskId": id}); res["status"] != "completed" {
		t.Fatalf("tasks/get after the resume %v", res)
	}
}
