package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/testutil/mcptest"
	mcpkind "github.com/pml-sandbox/pml/internal/toolsource/mcp"
)

// Sessions end to end (issue 32): an agent's working state kept between
// executions and continued by whichever process or container gets the
// next one.

// sessionDoc is the part of an execution's answer these tests read.
type sessionDoc struct {
	OK          bool                       `json:"ok"`
	Result      json.RawMessage            `json:"result"`
	ExecutionID string                     `json:"execution_id"`
	Error       *sessionErr                `json:"error"`
	Session     *execution.ResponseSession `json:"session"`
	Calls       []json.RawMessage          `json:"calls"`
}

type sessionErr struct {
	Code      string         `json:"code"`
	Message   string         `json:"message"`
	Retryable bool           `json:"retryable"`
	Limit     string         `json:"limit"`
	Details   map[string]any `json:"details"`
}

// sessionHTTP is one HTTP front of sessions: a base URL and what happens
// to the process behind it between steps.
type sessionHTTP struct {
	base    func(t *testing.T) string // the base URL now (it may move when a process is replaced)
	recycle func(t *testing.T)        // a fresh process or container for the next step
	// other is a principal that does not own the sessions ("" where the
	// front has only one principal: pml serve).
	owner, other string
	// gone reports that the store holds nothing of session id.
	gone      func(t *testing.T, id string) bool
	sleepTool string // the demo server's name in the tool set
}

func (f sessionHTTP) request(t *testing.T, method, path, principal string, body any) (int, http.Header, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, f.base(t)+path, rd)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if principal != "" {
		req.Header.Set(principalHeader, principal)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, raw
}

func (f sessionHTTP) step(t *testing.T, principal string, body map[string]any) (int, http.Header, sessionDoc) {
	t.Helper()
	status, h, raw := f.request(t, http.MethodPost, "/execute", principal, body)
	var d sessionDoc
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("POST /execute: status %d, not a document: %s", status, raw)
	}
	var c bytes.Buffer
	if json.Compact(&c, d.Result) == nil {
		d.Result = c.Bytes()
	}
	return status, h, d
}

// okStep runs body in the front's next process and wants it kept.
func (f sessionHTTP) okStep(t *testing.T, body map[string]any, want string) sessionDoc {
	t.Helper()
	f.recycle(t)
	status, _, d := f.step(t, f.owner, body)
	if status != http.StatusOK || !d.OK || string(d.Result) != want || d.Session == nil || !d.Session.Saved {
		t.Fatalf("%v: status %d, result %s, error %+v, session %+v; want 200 %s, kept", body["code"], status, d.Result, d.Error, d.Session, want)
	}
	return d
}

// testSessions runs the scenario against one front.
func testSessions(t *testing.T, f sessionHTTP) {
	// Define a function in step 1 and call it in step 3, a const
	// declared again in step 2, each step in a fresh process.
	first := f.okStep(t, map[string]any{"code": `function double(x) { return 2 * x }
const limit = 1;
let items = [1, 2];
return limit`, "session": "new"}, `1`)
	id := first.Session.ID
	if !strings.HasPrefix(id, "ss_") || first.Session.Executions != 1 {
		t.Fatalf("the first answer's session: %+v", first.Session)
	}
	f.okStep(t, map[string]any{"code": `const limit = 21; return limit`, "session_id": id}, `21`)
	f.okStep(t, map[string]any{"code": `return [double(limit), items]`, "session_id": id}, `[42,[1,2]]`)

	// A failed step leaves the state of the step before it.
	f.recycle(t)
	status, _, d := f.step(t, f.owner, map[string]any{"code": `items.push(3); const limit = 0; throw new Error("halfway")`, "session_id": id})
	if status != http.StatusUnprocessableEntity || d.OK || d.Session == nil || d.Session.Saved || !strings.Contains(d.Session.Note, "keeps nothing of it") {
		t.Fatalf("a failing step: status %d, error %+v, session %+v", status, d.Error, d.Session)
	}
	f.okStep(t, map[string]any{"code": `return [limit, items]`, "session_id": id}, `[21,[1,2]]`)

	// A concurrent step is refused, naming the one that runs.
	f.recycle(t)
	long := make(chan sessionDoc, 1)
	longBody, _ := json.Marshal(map[string]any{"code": fmt.Sprintf(`await mcp.%s.sleep({ms: 3000}); items.push("slept"); return items.length`, f.sleepTool), "session_id": id})
	longURL := f.base(t) + "/execute"
	go func() {
		// Not f.step: a goroutine may not end the test.
		var d sessionDoc
		req, _ := http.NewRequest(http.MethodPost, longURL, bytes.NewReader(longBody))
		req.Header.Set("Content-Type", "application/json")
		if f.owner != "" {
			req.Header.Set(principalHeader, f.owner)
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			_ = json.Unmarshal(raw, &d)
		}
		long <- d
	}()
	running := waitRunning(t, f, id)
	status, h, d := f.step(t, f.owner, map[string]any{"code": `items.push("concurrent"); return items`, "session_id": id})
	if status != http.StatusConflict || d.Error == nil || d.Error.Code != "CONFLICT" || !d.Error.Retryable || !strings.Contains(d.Error.Message, running) || h.Get("Retry-After") == "" {
		t.Fatalf("a concurrent step: status %d, error %+v, Retry-After %q; want 409 naming %s", status, d.Error, h.Get("Retry-After"), running)
	}
	if ld := <-long; !ld.OK || string(ld.Result) != `3` {
		t.Fatalf("the step that held the session: %s %+v", ld.Result, ld.Error)
	}
	f.okStep(t, map[string]any{"code": `return items`, "session_id": id}, `[1,2,"slept"]`)

	// The description, for its owner.
	status, _, raw := f.request(t, http.MethodGet, "/sessions/"+id, f.owner, nil)
	var info execution.SessionInfo
	if err := json.Unmarshal(raw, &info); status != http.StatusOK || err != nil || info.Executions != 6 || len(info.History) != 7 || info.State != "idle" {
		t.Fatalf("GET /sessions/%s: %d %s", id, status, raw)
	}
	if strings.Contains(string(raw), "memory") {
		t.Fatalf("the description shows the state: %s", raw)
	}

	// Another principal: 404, exactly as an id that never was.
	if f.other != "" {
		for _, try := range []func() (int, []byte){
			func() (int, []byte) {
				s, _, d := f.step(t, f.other, map[string]any{"code": `return items`, "session_id": id})
				b, _ := json.Marshal(d.Error)
				return s, b
			},
			func() (int, []byte) {
				s, _, b := f.request(t, http.MethodGet, "/sessions/"+id, f.other, nil)
				return s, b
			},
			func() (int, []byte) {
				s, _, b := f.request(t, http.MethodDelete, "/sessions/"+id, f.other, nil)
				return s, b
			},
		} {
			status, body := try()
			if status != http.StatusNotFound || !strings.Contains(string(body), `no session \"`+id+`\"`) {
				t.Fatalf("another principal: %d %s", status, body)
			}
		}
		_, _, unknown := f.request(t, http.MethodGet, "/sessions/ss_neverwas", f.other, nil)
		_, _, theirs := f.request(t, http.MethodGet, "/sessions/"+id, f.other, nil)
		if strings.ReplaceAll(string(theirs), id, "ID") != strings.ReplaceAll(string(unknown), "ss_neverwas", "ID") {
			t.Fatalf("another's session reads otherwise than an unknown one: %s vs %s", theirs, unknown)
		}
	}

	// Deleted: gone from the store.
	if status, _, raw := f.request(t, http.MethodDelete, "/sessions/"+id, f.owner, nil); status != http.StatusOK {
		t.Fatalf("DELETE: %d %s", status, raw)
	}
	if status, _, _ := f.request(t, http.MethodGet, "/sessions/"+id, f.owner, nil); status != http.StatusNotFound {
		t.Fatalf("GET after DELETE: %d", status)
	}
	if status, _, d := f.step(t, f.owner, map[string]any{"code": `return 1`, "session_id": id}); status != http.StatusNotFound || d.Error == nil || d.Error.Code != "NOT_FOUND" {
		t.Fatalf("a step after DELETE: %d %+v", status, d.Error)
	}
	if !f.gone(t, id) {
		t.Fatalf("the store still holds session %s", id)
	}

	// Expired: EXPIRED once its idle time has passed.
	short := f.okStep(t, map[string]any{"code": `const x = 1`, "session": "new", "session_ttl_s": 1}, `null`)
	time.Sleep(1500 * time.Millisecond)
	if status, _, d := f.step(t, f.owner, map[string]any{"code": `return x`, "session_id": short.Session.ID}); status != http.StatusGone || d.Error == nil || d.Error.Code != "EXPIRED" {
		t.Fatalf("an expired session: %d %+v", status, d.Error)
	}
}

// waitRunning waits until session id is held by an execution, and returns
// that execution's id.
func waitRunning(t *testing.T, f sessionHTTP, id string) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		status, _, raw := f.request(t, http.MethodGet, "/sessions/"+id, f.owner, nil)
		var info execution.SessionInfo
		if status == http.StatusOK && json.Unmarshal(raw, &info) == nil && info.State == "running" && info.Running != "" {
			return info.Running
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("session %s never ran", id)
	return ""
}

// TestSessionsAcrossServe: every step is served by a fresh `pml serve`
// over the same directory.
func TestSessionsAcrossServe(t *testing.T) {
	demo, err := demoserver.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = demo.Close() })
	shared := t.TempDir()
	start := func(t *testing.T) *served {
		return startServe(t, []string{app.EnvSuspDir + "=" + shared}, "--mcp", "demo="+demo.StreamableURL())
	}
	cur := start(t)
	testSessions(t, sessionHTTP{
		base: func(*testing.T) string { return cur.base },
		recycle: func(t *testing.T) {
			_ = cur.proc.Kill()
			<-cur.exited
			cur = start(t)
		},
		gone: func(t *testing.T, id string) bool {
			m, _ := filepath.Glob(filepath.Join(app.SessionsDir(shared), id+"*"))
			return len(m) == 0
		},
		sleepTool: "demo",
	})
}

// TestSessionsAcrossLambdaContainers: the execute function behind API
// Gateway, its container recycled between steps, sessions in DynamoDB
// Local.
func TestSessionsAcrossLambdaContainers(t *testing.T) {
	s := newStack(t)
	table := s.capTable + "_susp"
	if err := suspend.CreateTable(context.Background(), s.db.Client(), table); err != nil {
		t.Fatal(err)
	}
	s.emu.SetEnv(app.EnvSuspTable + "=" + table)
	base := s.apiGateway(t)
	recycle := func(t *testing.T) {
		if _, err := s.emu.Recycle("execute"); err != nil {
			t.Fatal(err)
		}
	}
	testSessions(t, sessionHTTP{
		base:    func(*testing.T) string { return base },
		recycle: recycle,
		owner:   agentPrincipal, other: approverPrincipal, // an approver decides calls, it does not read sessions
		gone:      func(t *testing.T, id string) bool { return len(partitionOf(t, s.db.Client(), table, "SESS#"+id)) == 0 },
		sleepTool: "kv",
	})

	// The same over the MCP endpoint, with a fresh container per call.
	t.Run("mcp", func(t *testing.T) {
		call := func(t *testing.T, name string, args map[string]any) (*mcp.CallToolResult, sessionDoc) {
			t.Helper()
			recycle(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			c := mcptest.Streamable(t, base+"/mcp", mcpkind.ProtocolVersion)
			var req mcp.CallToolRequest
			req.Params.Name, req.Params.Arguments = name, args
			res, err := c.CallTool(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := json.Marshal(res.StructuredContent)
			var d sessionDoc
			_ = json.Unmarshal(raw, &d)
			return res, d
		}
		res, d := call(t, "execute_code", map[string]any{"code": `function greet(n) { return "hi " + n } const who = "agent"`, "session": "new"})
		if res.IsError || d.Session == nil || !d.Session.Saved {
			t.Fatalf("execute_code, new session: %+v", res)
		}
		id := d.Session.ID
		if text := res.Content[0].(mcp.TextContent).Text; !strings.Contains(text, "session "+id+": state kept") || !strings.Contains(text, "greet, who") {
			t.Fatalf("the model's text does not tell of the session: %q", text)
		}
		if res, d = call(t, "execute_code", map[string]any{"code": `const who = "model"; return greet(who)`, "session_id": id}); res.IsError || string(d.Result) != `"hi model"` {
			t.Fatalf("execute_code, continued: %+v", res)
		}
		if res, _ = call(t, "end_session", map[string]any{"session_id": id}); res.IsError {
			t.Fatalf("end_session: %+v", res)
		}
		if res, d = call(t, "execute_code", map[string]any{"code": `return greet(who)`, "session_id": id}); !res.IsError || d.Error == nil || d.Error.Code != "NOT_FOUND" {
			t.Fatalf("after end_session: %+v", res)
		}
		if n := len(partitionOf(t, s.db.Client(), table, "SESS#"+id)); n != 0 {
			t.Fatalf("%d items left after end_session", n)
		}
	})
}

// partitionOf reads every item of partition pk.
func partitionOf(t *testing.T, db *dynamodb.Client, table, pk string) []map[string]types.AttributeValue {
	t.Helper()
	out, err := db.Query(context.Background(), &dynamodb.QueryInput{
		TableName:                 aws.String(table),
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: pk}},
		ConsistentRead:            aws.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Items
}

// TestSessionsThroughTheCLI: pml run --session, each step a process of
// its own, and pml session list, show and rm.
func TestSessionsThroughTheCLI(t *testing.T) {
	dir := t.TempDir()
	env := append(os.Environ(), "XDG_DATA_HOME="+dir, app.EnvSuspDir+"="+filepath.Join(dir, "susp"), app.EnvLogLevel+"=warn")
	cache := filepath.Join(dir, "cache")
	run := func(t *testing.T, want int, args ...string) sessionDoc {
		t.Helper()
		out, code := runPML(t, env, append([]string{"run", "--cache-dir", cache}, args...)...)
		var d sessionDoc
		if err := json.Unmarshal([]byte(out), &d); err != nil || code != want {
			t.Fatalf("pml run %v: exit %d, want %d: %s", args, code, want, out)
		}
		var c bytes.Buffer
		if json.Compact(&c, d.Result) == nil {
			d.Result = c.Bytes()
		}
		return d
	}
	d := run(t, 0, "--session", "new", "-e", `const seen = await mcp.demo.echo({n: 1}); function twice(x) { return 2 * x }`)
	id := d.Session.ID
	run(t, 0, "--session", id, "-e", `const seen = {n: 20}`)
	if d = run(t, 0, "--session", id, "-e", `return twice(seen.n) + 2`); string(d.Result) != "42" {
		t.Fatalf("the third step: %s", d.Result)
	}
	if d = run(t, 1, "--session", id, "-e", `const seen = 0; throw new Error("x")`); d.Session == nil || d.Session.Saved {
		t.Fatalf("a failing step: %+v", d.Session)
	}
	if d = run(t, 0, "--session", id, "-e", `return seen`); string(d.Result) != `{"n":20}` {
		t.Fatalf("after the failed step: %s", d.Result)
	}
	out, code := runPML(t, env, "session", "list")
	var list []execution.SessionInfo
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list) != 1 || list[0].ID != id || list[0].Executions != 4 {
		t.Fatalf("pml session list: %d %s", code, out)
	}
	if out, code = runPML(t, env, "session", "show", id); code != 0 || !strings.Contains(out, `"seen"`) || !strings.Contains(out, `"twice"`) {
		t.Fatalf("pml session show: %d %s", code, out)
	}
	if out, code = runPML(t, env, "session", "rm", id); code != 0 {
		t.Fatalf("pml session rm: %d %s", code, out)
	}
	if out, code = runPML(t, env, "session", "show", id); code != 1 || !strings.Contains(out, "NOT_FOUND") {
		t.Fatalf("pml session show after rm: %d %s", code, out)
	}
	run(t, 1, "--session", id, "-e", `return seen`)
	if m, _ := filepath.Glob(filepath.Join(dir, "susp", "sessions", id+"*")); len(m) != 0 {
		t.Fatalf("files left after rm: %v", m)
	}
}

// recordsServer is an MCP server over loopback with one tool answering 500
// records, counting its calls.
func recordsServer(t *testing.T) (string, *atomic.Int32) {
	t.Helper()
	calls := new(atomic.Int32)
	s := server.NewMCPServer("records", "1.0.0", server.WithToolCapabilities(false))
	s.AddTool(mcp.NewTool("list_records", mcp.WithDescription("Every sales record."), mcp.WithReadOnlyHintAnnotation(true)),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			calls.Add(1)
			type record struct {
				ID     int     `json:"id"`
				Region string  `json:"region"`
				Amount float64 `json:"amount"`
			}
			out := struct {
				Records []record `json:"records"`
			}{}
			for i := range 500 {
				out.Records = append(out.Records, record{ID: i + 1, Region: []string{"eu", "us", "apac"}[i%3], Amount: float64(i%50) * 10})
			}
			b, _ := json.Marshal(out)
			return mcp.NewToolResultStructured(out, string(b)), nil
		})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: server.NewStreamableHTTPServer(s, server.WithStateLess(true)), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	return "http://" + ln.Addr().String() + "/mcp", calls
}

// TestAgentFlowFetchOnceFilterLater is an agent's flow over MCP: step 1
// fetches 500 records into a session, step 2 filters them without fetching
// again; the server saw one call, and the traces show one call in all.
func TestAgentFlowFetchOnceFilterLater(t *testing.T) {
	url, calls := recordsServer(t)
	srv := startServe(t, []string{app.EnvSuspDir + "=" + t.TempDir()}, "--mcp", "sales="+url)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	agent := mcptest.Streamable(t, srv.base+"/mcp", mcpkind.ProtocolVersion)
	callTool := func(c *client.Client, args map[string]any) sessionDoc {
		t.Helper()
		var req mcp.CallToolRequest
		req.Params.Name, req.Params.Arguments = "execute_code", args
		res, err := c.CallTool(ctx, req)
		if err != nil || res.IsError {
			t.Fatalf("execute_code %v: %+v %v", args["code"], res, err)
		}
		raw, _ := json.Marshal(res.StructuredContent)
		var d sessionDoc
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	step1 := callTool(agent, map[string]any{"session": "new",
		"code": `const {records} = await mcp.sales.list_records({});
return {count: records.length, regions: [...new Set(records.map(r => r.region))]}`})
	if string(step1.Result) != `{"count":500,"regions":["eu","us","apac"]}` {
		t.Fatalf("step 1: %s", step1.Result)
	}
	step2 := callTool(agent, map[string]any{"session_id": step1.Session.ID,
		"code": `const eu = records.filter(r => r.region === "eu" && r.amount >= 400);
return {count: eu.length, total: eu.reduce((s, r) => s + r.amount, 0)}`})
	if string(step2.Result) != `{"count":33,"total":14700}` {
		t.Fatalf("step 2: %s", step2.Result)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("the MCP server was called %d times, want once", n)
	}
	// The traces: one call in step 1, none in step 2, the two linked as
	// the session's executions in order.
	for i, d := range []sessionDoc{step1, step2} {
		resp, err := http.Get(srv.base + "/executions/" + d.ExecutionID)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var tr struct {
			Execution struct {
				Calls       int    `json:"calls"`
				SessionID   string `json:"session_id"`
				SessionStep int    `json:"session_step"`
			} `json:"execution"`
		}
		if err := json.Unmarshal(raw, &tr); err != nil {
			t.Fatalf("trace %s: %s", d.ExecutionID, raw)
		}
		if tr.Execution.Calls != 1-i || tr.Execution.SessionID != step1.Session.ID || tr.Execution.SessionStep != i+1 {
			t.Fatalf("trace of step %d: %s", i+1, raw)
		}
	}
}
