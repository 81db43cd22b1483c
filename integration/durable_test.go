package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/trace"
)

// durableScript sets a local, writes and reads with tools that need no
// approval, then calls a destructive one: parked under approval "suspend".
// Approved, it returns what it computed from the local and the read before
// the suspension; rejected, it catches REJECTED and returns something else.
const durableScript = `const keep = 40;
await mcp.%[1]s.kv_set({key: args.key, value: 2});
const before = await mcp.%[1]s.kv_get({key: args.key});
try {
  await mcp.%[1]s.kv_delete({key: args.key});
} catch (e) {
  if (e.code !== "REJECTED") throw e;
  return {kept: (await mcp.%[1]s.kv_get({key: args.key})).value, code: e.code, message: e.message};
}
const after = await mcp.%[1]s.kv_list({prefix: args.key});
return {sum: keep + before.value, left: after.keys.length};`

// durableDoc is the part of a response these tests read.
type durableDoc struct {
	OK          bool            `json:"ok"`
	Status      string          `json:"status"`
	ExecutionID string          `json:"execution_id"`
	Result      json.RawMessage `json:"result"`
	Error       *struct {
		Code, Message string
	} `json:"error"`
	Pending []struct {
		CallID       int `json:"call_id"`
		Server, Tool string
		Args         json.RawMessage
		Reason       string
	} `json:"pending"`
	ExpiresAt time.Time `json:"expires_at"`
}

// postJSONAs posts a JSON body as principal ("" for nobody, the header
// read by the API Gateway stand-in; a pml serve ignores it: its principal
// is "") and decodes the answer, whatever its status.
func postJSONAs(t *testing.T, url, principal string, body any) (int, durableDoc) {
	t.Helper()
	b, _ := json.Marshal(body)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	if principal != "" {
		req.Header.Set(principalHeader, principal)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var d durableDoc
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("POST %s: status %d, not a JSON document: %s", url, resp.StatusCode, raw)
	}
	var c bytes.Buffer
	if json.Compact(&c, d.Result) == nil {
		d.Result = c.Bytes()
	}
	return resp.StatusCode, d
}

// durableFront is one deployment shape: where the first process answers,
// how to stop it, and where a fresh one answers afterwards.
type durableFront struct {
	server string                    // the demo server's name in the tool set
	first  string                    // base URL of the process that suspends
	stop   func(t *testing.T)        // stops it
	second func(t *testing.T) string // base URL of a fresh process
	// expiring returns the base URL of a process whose suspensions expire
	// at once, and undoes that when the test ends.
	expiring func(t *testing.T) string
	// trace reads an execution's record, or nil where traces are per process.
	trace func(t *testing.T, id string) *trace.Execution
	// agent runs the scripts and approver decides; both "" where the
	// caller is the person at the keyboard (pml serve on loopback).
	agent, approver string
}

func suspendOne(t *testing.T, f durableFront, base, key string) durableDoc {
	t.Helper()
	status, d := postJSONAs(t, base+"/execute", f.agent, map[string]any{
		"code": fmt.Sprintf(durableScript, f.server), "args": map[string]string{"key": key}, "approval": "suspend"})
	if status != http.StatusAccepted || d.Status != "suspended" || d.OK || d.ExecutionID == "" || d.ExpiresAt.IsZero() {
		t.Fatalf("the first request: status %d, %+v, want 202 suspended", status, d)
	}
	if len(d.Pending) != 1 {
		t.Fatalf("pending %+v, want the one destructive call", d.Pending)
	}
	p := d.Pending[0]
	if p.CallID != 3 || p.Server != f.server || p.Tool != "kv_delete" || p.Reason != "approval" || !strings.Contains(string(p.Args), key) {
		t.Fatalf("pending call %+v (args %s)", p, p.Args)
	}
	return d
}

func resumeURL(base, id string) string { return base + "/executions/" + id + "/resume" }

// testDurable runs the scenario against one front end.
func testDurable(t *testing.T, f durableFront) {
	key := fmt.Sprintf("durable-%d", time.Now().UnixNano())
	approved := suspendOne(t, f, f.first, key+"-a")
	rejected := suspendOne(t, f, f.first, key+"-r")
	f.stop(t)
	second := f.second(t)

	approve := map[string]any{"decisions": map[string]string{"3": "approve"}}
	if f.agent != "" {
		// The agent may not approve what it asked for: the approver does.
		status, d := postJSONAs(t, resumeURL(second, approved.ExecutionID), f.agent, approve)
		if status != http.StatusForbidden || d.Error == nil || !strings.Contains(d.Error.Message, "the caller may reject") {
			t.Fatalf("the agent approving its own: status %d, error %+v, want 403", status, d.Error)
		}
	}
	status, d := postJSONAs(t, resumeURL(second, approved.ExecutionID), f.approver, approve)
	if status != http.StatusOK || !d.OK || string(d.Result) != `{"sum":42,"left":0}` {
		t.Fatalf("approve in a fresh process: status %d, result %s, error %+v", status, d.Result, d.Error)
	}
	status, d = postJSONAs(t, resumeURL(second, approved.ExecutionID), f.approver, approve)
	if status != http.StatusConflict || d.Error == nil || d.Error.Code != "CONFLICT" {
		t.Fatalf("a second resume: status %d, error %+v, want 409 CONFLICT", status, d.Error)
	}

	// The agent may reject.
	status, d = postJSONAs(t, resumeURL(second, rejected.ExecutionID), f.agent, map[string]any{
		"decisions": map[string]any{"3": map[string]string{"decision": "reject", "reason": "keep it"}}})
	if status != http.StatusOK || !d.OK || !strings.HasPrefix(string(d.Result), `{"kept":2,"code":"REJECTED","message":`) || !strings.Contains(string(d.Result), "keep it") {
		t.Fatalf("reject: status %d, result %s, error %+v", status, d.Result, d.Error)
	}

	status, d = postJSONAs(t, resumeURL(second, "ex_000000000000000000000000"), f.approver, approve)
	if status != http.StatusNotFound {
		t.Fatalf("an unknown execution: status %d, error %+v, want 404", status, d.Error)
	}

	expired := suspendOne(t, f, f.expiring(t), key+"-e")
	time.Sleep(300 * time.Millisecond)
	status, d = postJSONAs(t, resumeURL(second, expired.ExecutionID), f.approver, approve)
	if status != http.StatusGone || d.Error == nil || d.Error.Code != "EXPIRED" {
		t.Fatalf("an expired resume: status %d, error %+v, want 410 EXPIRED", status, d.Error)
	}

	if f.trace == nil {
		return
	}
	ex := f.trace(t, approved.ExecutionID)
	var types []string
	for _, e := range ex.Events {
		types = append(types, e.Type)
	}
	if ex.Status != trace.StatusOK || strings.Join(types, ",") != trace.EventSuspend+","+trace.EventResume {
		t.Fatalf("the trace: status %q, events %v; want one execution, ok, suspended then resumed", ex.Status, types)
	}
}

// TestDurableAcrossServe: `pml serve` suspends, is stopped, and a second
// `pml serve` over the same stores resumes.
func TestDurableAcrossServe(t *testing.T) {
	demo, err := demoserver.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = demo.Close() })
	shared := t.TempDir()
	env := []string{app.EnvSuspDir + "=" + shared + "/suspensions"}
	start := func(t *testing.T, more ...string) *served {
		return startServe(t, append(env, more...), "--mcp", "demo="+demo.StreamableURL())
	}
	first := start(t)
	testDurable(t, durableFront{
		server: "demo",
		first:  first.base,
		stop: func(t *testing.T) {
			_ = first.proc.Kill()
			<-first.exited
		},
		second:   func(t *testing.T) string { return start(t).base },
		expiring: func(t *testing.T) string { return start(t, app.EnvSuspTTL+"=100ms").base },
	})
}

// TestDurableAcrossLambdaContainers: the execute function suspends behind
// API Gateway, its container is stopped, and a fresh container resumes
// from DynamoDB (Local).
func TestDurableAcrossLambdaContainers(t *testing.T) {
	s := newStack(t)
	table := s.capTable + "_susp"
	if err := suspend.CreateTable(context.Background(), s.db.Client(), table); err != nil {
		t.Fatal(err)
	}
	s.emu.SetEnv(app.EnvSuspTable + "=" + table)
	base := s.apiGateway(t)
	// Direct Invoke: the same document, without HTTP around it; a fresh
	// container resumes with {"resume": …}.
	t.Run("direct invoke", func(t *testing.T) {
		key := fmt.Sprintf("direct-%d", time.Now().UnixNano())
		var d durableDoc
		out := s.invoke(t, "execute", map[string]any{"code": fmt.Sprintf(durableScript, "kv"), "args": map[string]string{"key": key}, "approval": "suspend"}, "")
		if err := json.Unmarshal(out, &d); err != nil || d.Status != "suspended" || len(d.Pending) != 1 || d.Pending[0].CallID != 3 {
			t.Fatalf("a direct invocation with approval suspend: %s", out)
		}
		if _, err := s.emu.Recycle("execute"); err != nil {
			t.Fatal(err)
		}
		// A direct invocation names nobody: under the deployed policy it
		// may reject, never approve…
		out = s.invoke(t, "execute", map[string]any{"resume": map[string]any{"execution_id": d.ExecutionID, "decisions": map[string]string{"3": "approve"}}}, "")
		var r durableDoc
		if err := json.Unmarshal(out, &r); err != nil || r.OK || r.Error == nil || r.Error.Code != "FORBIDDEN" {
			t.Fatalf("a direct approval: %s", out)
		}
		// …and an approver decides it over HTTP, in a fresh container.
		status, r := postJSONAs(t, resumeURL(base, d.ExecutionID), approverPrincipal, map[string]any{"decisions": map[string]string{"3": "approve"}})
		if status != http.StatusOK || !r.OK || !strings.Contains(string(r.Result), `"sum":42`) {
			t.Fatalf("the approver's resume: status %d %s %+v", status, r.Result, r.Error)
		}
	})
	recycle := func(t *testing.T) {
		if _, err := s.emu.Recycle("execute"); err != nil {
			t.Fatal(err)
		}
	}
	testDurable(t, durableFront{
		server:   "kv",
		agent:    agentPrincipal,
		approver: approverPrincipal,
		first:    base,
		stop:     recycle,
		second:   func(*testing.T) string { return base },
		expiring: func(t *testing.T) string {
			s.emu.SetEnv(app.EnvSuspTTL + "=100ms")
			recycle(t)
			t.Cleanup(func() {
				s.emu.SetEnv(app.EnvSuspTTL + "=24h")
				recycle(t)
			})
			return base
		},
		trace: func(t *testing.T, id string) *trace.Execution {
			ex, _, err := s.traces.GetExecution(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			return &ex
		},
	})
}
