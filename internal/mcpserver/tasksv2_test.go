package mcpserver_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/pml-sandbox/pml/internal/testutil/fronttest"
)

// rpcV2 sends a 2026-07-28 request as principal, its client declaring the
// tasks extension when tasks is set, with the SEP-2243 headers (name, when
// not "", as Mcp-Name), and returns the HTTP status and the answer.
func rpcV2(t *testing.T, base, principal, method string, params map[string]any, tasks bool, name string) (int, map[string]any, map[string]any) {
	t.Helper()
	caps := map[string]any{"elicitation": map[string]any{}}
	if tasks {
		caps["extensions"] = map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}
	}
	params["_meta"] = map[string]any{"io.modelcontextprotocol/protocolVersion": mcp.ProtocolVersion20260728,
		"io.modelcontextprotocol/clientCapabilities": caps}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 9, "method": method, "params": params})
	hdr := []string{"Accept", "application/json, text/event-stream", "Mcp-Protocol-Version", mcp.ProtocolVersion20260728, "Mcp-Method", method}
	if name != "" {
		hdr = append(hdr, "Mcp-Name", name)
	}
	status, _, doc := fronttest.Call(t, "POST", base+"/mcp", principal, string(body), hdr...)
	res, _ := doc["result"].(map[string]any)
	e, _ := doc["error"].(map[string]any)
	return status, res, e
}

// waitTask polls tasks/get until the task is not working.
func waitTask(t *testing.T, base, principal, id string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, res, e := rpcV2(t, base, principal, "tasks/get", map[string]any{"taskId": id}, true, id)
		if e != nil {
			t.Fatalf("tasks/get: %v", e)
		}
		if res["status"] != "working" {
			return res
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s still working", id)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMCPTasksExtension: a 2026-07-28 client that declares the tasks
// extension (SEP-2663) gets execute_code as a server-directed task, flat,
// polled with tasks/get, which inlines the result; a suspended execution's
// task carries its question (inputRequests), answered with tasks/update;
// without the extension there is no task and the task methods are refused;
// the routing headers are checked; removed methods are not found.
func TestMCPTasksExtension(t *testing.T) {
	base := asyncServer(t)
	const agent = "jwt:https://idp#agent"

	_, disc, e := rpcV2(t, base, agent, "server/discover", map[string]any{}, true, "")
	caps, _ := disc["capabilities"].(map[string]any)
	ext, _ := caps["extensions"].(map[string]any)
	if _, ok := ext["io.modelcontextprotocol/tasks"]; e != nil || !ok || caps["tasks"] != nil {
		t.Fatalf("server/discover does not advertise the tasks extension: %v %v", disc, e)
	}

	status, res, e := rpcV2(t, base, agent, "tools/call", map[string]any{"name": "execute_code",
		"arguments": map[string]any{"code": "await mcp.demo.sleep({ms: 100}); return 'ok'"}}, true, "execute_code")
	id, _ := res["taskId"].(string)
	if status != 200 || e != nil || res["resultType"] != "task" || id == "" || res["task"] != nil || res["requestState"] != nil ||
		res["ttlMs"] == nil || res["pollIntervalMs"] != 1000.0 || res["ttl"] != nil || res["createdAt"] == nil {
		t.Fatalf("created: %d %v %v", status, res, e)
	}
	done := waitTask(t, base, agent, id)
	result, _ := done["result"].(map[string]any)
	sc, _ := result["structuredContent"].(map[string]any)
	if done["status"] != "completed" || done["resultType"] != "complete" || sc["result"] != "ok" || result["isError"] == true || done["requestState"] != nil {
		t.Fatalf("completed task %v", done)
	}
	if _, res, e := rpcV2(t, base, agent, "tasks/cancel", map[string]any{"taskId": id}, true, id); e != nil || res["resultType"] != "complete" || len(res) != 1 {
		t.Fatalf("cancelling a completed task: %v %v; want the empty acknowledgement", res, e)
	}
	if _, _, e := rpcV2(t, base, "jwt:https://idp#other", "tasks/get", map[string]any{"taskId": id}, true, id); e == nil || e["code"] != -32602.0 {
		t.Fatalf("another principal's task: %v", e)
	}
	for _, m := range []string{"tasks/result", "tasks/list"} {
		if _, _, e := rpcV2(t, base, agent, m, map[string]any{"taskId": id}, true, id); e == nil || e["code"] != -32601.0 {
			t.Errorf("%s: %v; want -32601", m, e)
		}
	}
	if status, _, e := rpcV2(t, base, agent, "tasks/get", map[string]any{"taskId": id}, true, "ex_other"); status != 400 || e == nil || e["code"] != -32020.0 {
		t.Errorf("a mismatched Mcp-Name: %d %v; want 400 with -32020", status, e)
	}
	if status, _, e := rpcV2(t, base, agent, "tasks/get", map[string]any{"taskId": id}, true, ""); status != 400 || e == nil || e["code"] != -32020.0 {
		t.Errorf("no Mcp-Name: %d %v; want 400 with -32020", status, e)
	}

	// Without the extension: no task, and no task methods.
	_, res, e = rpcV2(t, base, agent, "tools/call", map[string]any{"name": "execute_code", "task": map[string]any{"ttl": 1000},
		"arguments": map[string]any{"code": "return 'sync'"}}, false, "execute_code")
	if e != nil || res["taskId"] != nil || res["resultType"] == "task" || !strings.Contains(fronttest.ToJSON(res["structuredContent"]), `"sync"`) {
		t.Fatalf("without the extension: %v %v", res, e)
	}
	if _, _, e := rpcV2(t, base, agent, "tasks/get", map[string]any{"taskId": id}, false, id); e == nil || e["code"] != -32021.0 || !strings.Contains(fronttest.ToJSON(e["data"]), "io.modelcontextprotocol/tasks") {
		t.Fatalf("tasks/get without the extension: %v", e)
	}

	// A call that needs approval: the task waits, carrying the question;
	// the client's user declines it through tasks/update, and the script
	// catches the rejection.
	_, res, _ = rpcV2(t, base, agent, "tools/call", map[string]any{"name": "execute_code", "arguments": map[string]any{
		"code": "try { await mcp.demo.kv_delete({key: 'k'}); return 'deleted' } catch (e) { return e.code }"}}, true, "execute_code")
	id, _ = res["taskId"].(string)
	waiting := waitTask(t, base, agent, id)
	reqs, _ := waiting["inputRequests"].(map[string]any)
	q, _ := reqs["call-1"].(map[string]any)
	if waiting["status"] != "input_required" || q["method"] != "elicitation/create" || !strings.Contains(fronttest.ToJSON(q), "demo.kv_delete") || waiting["requestState"] != nil {
		t.Fatalf("waiting task %v", waiting)
	}
	if _, _, e := rpcV2(t, base, agent, "tasks/update", map[string]any{"taskId": id, "inputResponses": map[string]any{"nope": map[string]any{"action": "accept"}}}, true, id); e == nil || e["code"] != -32602.0 {
		t.Fatalf("answers to nothing asked: %v", e)
	}
	_, res, e = rpcV2(t, base, agent, "tasks/update", map[string]any{"taskId": id, "inputResponses": map[string]any{"call-1": map[string]any{"action": "decline"}}}, true, id)
	if e != nil || res["resultType"] != "complete" {
		t.Fatalf("tasks/update: %v %v", res, e)
	}
	done = waitTask(t, base, agent, id)
	result, _ = done["result"].(map[string]any)
	if done["status"] != "completed" || !strings.Contains(fronttest.ToJSON(result["structuredContent"]), `"result":"REJECTED"`) {
		t.Fatalf("after the answer %v", done)
	}
}
