package httpapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/testutil/fronttest"
)

// TestIdsCannotBeProbed: whatever another principal's execution is doing —
// running asynchronously, suspended asynchronously, suspended after a
// synchronous request — cancelling, resuming or reading it answers exactly
// as for an id that was never issued: the same status, code and message
// (the id aside), over HTTP and over MCP (cancel_execution,
// resume_execution, tasks/get, tasks/result, tasks/cancel).
func TestIdsCannotBeProbed(t *testing.T) {
	base := newAsyncServer(t, false)
	const agent, other = "jwt:https://idp#agent", "jwt:https://idp#other"

	_, _, doc := fronttest.Call(t, "POST", base+"/execute", agent, `{"async": true, "code": "for (let i = 0; i < 200; i++) await mcp.demo.sleep({ms: 50})"}`)
	running, _ := doc["execution_id"].(string)
	_, _, doc = fronttest.Call(t, "POST", base+"/execute", agent, `{"async": true, "approval": "suspend", "code": "await mcp.demo.kv_delete({key: 'k'})"}`)
	asyncSuspended, _ := doc["execution_id"].(string)
	if doc = pollDoc(t, base, asyncSuspended, agent); doc["status"] != "suspended" {
		t.Fatalf("the asynchronous execution did not suspend: %v", doc)
	}
	status, _, doc := fronttest.Call(t, "POST", base+"/execute", agent, `{"approval": "suspend", "code": "await mcp.demo.kv_delete({key: 'k'})"}`)
	syncSuspended, _ := doc["execution_id"].(string)
	if status != http.StatusAccepted || doc["status"] != "suspended" {
		t.Fatalf("the synchronous execution did not suspend: %d %v", status, doc)
	}
	unknown := "ex_" + strings.Repeat("0", len(running)-3)

	// answer is one request's answer with the id taken out.
	type answer struct {
		Status int
		Body   string
	}
	httpAnswer := func(method, path, id, body string) answer {
		req, _ := http.NewRequest(method, base+strings.ReplaceAll(path, "ID", id), strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(fronttest.PrincipalHeader, other)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&v)
		delete(v, "execution_id")
		return answer{resp.StatusCode, strings.ReplaceAll(fronttest.ToJSON(v), id, "ID")}
	}
	mcpAnswer := func(method string, params map[string]any, id string) answer {
		res, e := fronttest.RPC(t, base, other, method, params)
		return answer{0, strings.ReplaceAll(fronttest.ToJSON(res)+fronttest.ToJSON(e), id, "ID")}
	}
	probes := map[string]func(id string) answer{
		"DELETE": func(id string) answer { return httpAnswer("DELETE", "/executions/ID", id, "") },
		"resume (reject)": func(id string) answer {
			return httpAnswer("POST", "/executions/ID/resume", id, `{"decisions": {"1": "reject"}}`)
		},
		"resume (approve)": func(id string) answer {
			return httpAnswer("POST", "/executions/ID/resume", id, `{"decisions": {"1": "approve"}}`)
		},
		"GET": func(id string) answer { return httpAnswer("GET", "/executions/ID", id, "") },
		"cancel_execution": func(id string) answer {
			return mcpAnswer("tools/call", map[string]any{"name": "cancel_execution", "arguments": map[string]any{"execution_id": id}}, id)
		},
		"resume_execution": func(id string) answer {
			return mcpAnswer("tools/call", map[string]any{"name": "resume_execution",
				"arguments": map[string]any{"execution_id": id, "decisions": map[string]string{"1": "reject"}}}, id)
		},
		"tasks/get":    func(id string) answer { return mcpAnswer("tasks/get", map[string]any{"taskId": id}, id) },
		"tasks/result": func(id string) answer { return mcpAnswer("tasks/result", map[string]any{"taskId": id}, id) },
		"tasks/cancel": func(id string) answer { return mcpAnswer("tasks/cancel", map[string]any{"taskId": id}, id) },
	}
	for name, probe := range probes {
		want := probe(unknown)
		if want.Status >= 200 && want.Status < 300 {
			t.Fatalf("%s of an unknown id: %+v", name, want)
		}
		for what, id := range map[string]string{"running": running, "suspended, async": asyncSuspended, "suspended": syncSuspended} {
			if got := probe(id); got != want {
				t.Errorf("%s of another principal's %s execution:\n got %+v\nwant %+v (an unknown id's)", name, what, got, want)
			}
		}
	}

	// The probes changed nothing: the owner still finds its executions.
	_ = time.Now
	if doc := pollDoc(t, base, asyncSuspended, agent); doc["status"] != "suspended" {
		t.Fatalf("after the probes: %v", doc)
	}
	if status, _, doc := fronttest.Call(t, "DELETE", base+"/executions/"+running, agent, ""); status != http.StatusAccepted {
		t.Fatalf("the owner's cancel after the probes: %d %v", status, doc)
	}
}
