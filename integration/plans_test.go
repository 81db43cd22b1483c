package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/trace"
	"github.com/pml-sandbox/pml/internal/tracedb"
)

// petLoop stores twenty pets and "last", deletes the pets in a loop (calls
// 22–41, line 4), then "last" from a second line (call 42).
const petLoop = `const pets = []
for (let i = 0; i < 20; i++) { pets.push("pet" + i); await mcp.demo.kv_set({key: "pet" + i, value: i}) }
await mcp.demo.kv_set({key: "last", value: 0})
for (const key of pets) await mcp.demo.kv_delete({key})
const last = await mcp.demo.kv_delete({key: "last"})
return {deleted: pets.length, last}`

// getJSON fetches url and decodes its JSON.
func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode
}

// TestPlanGrantInBrowser: under the deployed policy (the caller decides
// nothing), a script deletes twenty pets in a loop, then one more key from
// another line. The person at pml serve's keyboard opens the execution in
// headless Chromium, reads the plan — both call sites, the loop, the calls
// so far, the call that waits — and approves the loop's call site for 20
// calls with one decision: the twenty deletes run, the plan shows them
// counted and the grant spent, and the second site still asks. The trace
// records twenty calls approved by the person under that grant.
func TestPlanGrantInBrowser(t *testing.T) {
	demo, err := demoserver.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = demo.Close() })
	dir := t.TempDir()
	traces := filepath.Join(dir, "traces.jsonl")
	env := []string{app.EnvSuspDir + "=" + filepath.Join(dir, "suspended"), app.EnvApprovalKeyFile + "=" + filepath.Join(dir, "approval.key"),
		app.EnvTracesFile + "=" + traces}
	s := startServe(t, env, "--mcp", "demo="+demo.StreamableURL(), "--caller-decides", "off")
	status, doc := postJSON(t, s.base+"/execute", `{"code": `+jsonString(petLoop)+`, "approval": "suspend"}`)
	id, _ := doc["execution_id"].(string)
	if status != http.StatusAccepted || doc["status"] != "suspended" {
		t.Fatalf("suspend: %d %+v", status, doc)
	}
	if p := doc["pending"].([]any)[0].(map[string]any); p["call_id"] != 22.0 || p["line"] != 4.0 {
		t.Fatalf("pending %+v", p)
	}
	link := signInLink(t, s, "the pets' deletes")
	execURL := s.base + "/approvals/" + id

	ctx := newBrowser(t)
	browse(t, ctx, "sign in", chromedp.Navigate(link), visible("#principal"))
	// The page's addresses carry the session's key: the execution's is
	// opened as the page links it.
	execURL = keyed(t, ctx, execURL)
	browse(t, ctx, "open the execution", chromedp.Navigate(execURL), visible("#plan"))
	loopSite, second := textOf(t, ctx, "#site-1"), textOf(t, ctx, "#site-2")
	if !strings.Contains(loopSite, "demo.kv_delete") || !strings.Contains(loopSite, "4") || !regexp.MustCompile(`\byes\b`).MatchString(loopSite) ||
		!strings.Contains(loopSite, "#22") || !strings.Contains(second, "5") || !regexp.MustCompile(`\bno\b`).MatchString(second) {
		t.Fatalf("the plan: %q / %q", loopSite, second)
	}
	if calls := textOf(t, ctx, "#site-1 .calls"); calls != "1" {
		t.Fatalf("the loop's calls so far: %q", calls)
	}
	browse(t, ctx, "approve the loop's call site for 20 calls",
		chromedp.SetValue(chromedp.CSS("#count-22"), "20"), click("#grant-22"), visible("#outcome"))
	if outcome := textOf(t, ctx, "#outcome"); !strings.Contains(outcome, "for up to 20 calls") || !strings.Contains(outcome, "20 of its calls") ||
		!strings.Contains(outcome, "waits again") {
		t.Fatalf("the grant: %q", outcome)
	}
	browse(t, ctx, "open the execution again", chromedp.Navigate(execURL), visible("#plan"))
	if calls, waiting, used := textOf(t, ctx, "#site-1 .calls"), textOf(t, ctx, "#site-2 .waiting"), textOf(t, ctx, "#grant-g1 .used"); calls != "20" ||
		waiting != "#42" || used != "20 of 20" {
		t.Fatalf("after the grant: calls %q, second site waiting %q, grant %q", calls, waiting, used)
	}
	browse(t, ctx, "approve the second site's call alone", click("#approve-42"), visible("#outcome"))
	if outcome := textOf(t, ctx, "#outcome"); !strings.Contains(outcome, "You approved call #42") || !strings.Contains(outcome, "succeeded") {
		t.Fatalf("the last call: %q", outcome)
	}

	var end struct {
		Status string `json:"status"`
		Result struct {
			Deleted int    `json:"deleted"`
			Last    string `json:"last"`
		} `json:"result"`
	}
	if status := getJSON(t, s.base+"/executions/"+id, &end); status != 200 || end.Status != "completed" || end.Result.Deleted != 20 || end.Result.Last != "deleted last" {
		t.Fatalf("the end: %d %+v", status, end)
	}
	// The trace, as the server wrote it.
	ex, calls, err := tracedb.NewFile(traces, 0).GetExecution(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	granted, alone := 0, 0
	for _, c := range calls {
		switch a := c.Approval; {
		case a == nil:
		case a.Grant == "g1" && a.By == "local:person" && a.Via == "page" && c.CallID >= 22 && c.CallID <= 41:
			granted++
		case a.Grant == "" && c.CallID == 42:
			alone++
		default:
			t.Errorf("call %d approved %+v", c.CallID, a)
		}
	}
	if granted != 20 || alone != 1 {
		t.Fatalf("%d calls traced under the grant (want 20), %d alone (want 1)", granted, alone)
	}
	var grant *trace.Grant
	for _, e := range ex.Events {
		if len(e.Grants) > 0 && e.Principal == "local:person" && e.Via == "page" {
			grant = &e.Grants[0]
		}
	}
	if grant == nil || grant.ID != "g1" || grant.Max != 20 || grant.Tool != "demo:kv_delete" || grant.Line != 4 {
		t.Fatalf("the grant in the trace: %+v (events %+v)", grant, ex.Events)
	}
}

// TestOneRuleForWhatMayRun: a server from a configuration file, which
// does not allow destructive tools (the file's default), refuses a
// destructive call FORBIDDEN at once — saying how to let a person decide
// them — and nothing waits; arguments that do not fit the tool's schema
// fail INVALID_ARGUMENTS at once on a server that allows them; the same
// server's well-formed call waits for a person.
func TestOneRuleForWhatMayRun(t *testing.T) {
	demo, err := demoserver.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = demo.Close() })
	dir := t.TempDir()
	cfg := filepath.Join(dir, "servers.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`servers:
  - name: kv
    url: %s
  - name: gated
    url: %s
    allow_destructive: true
`, demo.StreamableURL(), demo.StreamableURL())), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{app.EnvSuspDir + "=" + filepath.Join(dir, "suspended"), app.EnvApprovalKeyFile + "=" + filepath.Join(dir, "approval.key")}
	s := startServe(t, env, "--config", cfg, "--caller-decides", "off")
	run := func(code string) (int, map[string]any) {
		t.Helper()
		return postJSON(t, s.base+"/execute", `{"code": `+jsonString(code)+`, "approval": "suspend"}`)
	}

	ended := func(id string) {
		t.Helper()
		var d struct {
			Execution struct{ Status string } `json:"execution"`
		}
		if status := getJSON(t, s.base+"/executions/"+id, &d); status != 200 || d.Execution.Status != "error" {
			t.Fatalf("execution %s: %d %+v, want it ended, nothing waiting", id, status, d)
		}
	}
	status, doc := run(`await mcp.kv.kv_set({key: "n", value: 1}); return await mcp.kv.kv_delete({key: "n"})`)
	e, _ := doc["error"].(map[string]any)
	if doc["status"] == "suspended" || doc["pending"] != nil || e == nil || e["code"] != "FORBIDDEN" ||
		!strings.Contains(fmt.Sprint(e["message"]), "allow_destructive: true") {
		t.Fatalf("a destructive call of a server that refuses them: %d %+v", status, doc)
	}
	ended(doc["execution_id"].(string))
	status, doc = run(`return await mcp.gated.kv_delete({kee: "n"})`)
	e, _ = doc["error"].(map[string]any)
	if doc["status"] == "suspended" || e == nil || e["code"] != "INVALID_ARGUMENTS" {
		t.Fatalf("arguments that do not fit: %d %+v", status, doc)
	}
	ended(doc["execution_id"].(string))
	status, doc = run(`return await mcp.gated.kv_delete({key: "n"})`)
	if status != http.StatusAccepted || doc["status"] != "suspended" {
		t.Fatalf("a call a person may approve: %d %+v", status, doc)
	}
}

// TestSessionExecutionWaitsForAPerson: an execution of a session asks for
// a person, waits (holding the session: another execution of it is
// refused), is approved, and continues; the session keeps what it did.
func TestSessionExecutionWaitsForAPerson(t *testing.T) {
	demo, err := demoserver.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = demo.Close() })
	s := startServe(t, []string{app.EnvSuspDir + "=" + t.TempDir()}, "--mcp", "demo="+demo.StreamableURL())
	status, doc := postJSON(t, s.base+"/execute", `{"code": "await mcp.demo.kv_set({key: \"s\", value: 1}); let n = 1; return n", "session": "new"}`)
	sess, _ := doc["session"].(map[string]any)
	sid, _ := sess["id"].(string)
	if status != 200 || sid == "" {
		t.Fatalf("a new session: %d %+v", status, doc)
	}
	status, doc = postJSON(t, s.base+"/execute", `{"code": "n = n + 1; const d = await mcp.demo.kv_delete({key: \"s\"}); n = n + 1; return [n, d]", "session_id": "`+sid+`", "approval": "suspend"}`)
	id, _ := doc["execution_id"].(string)
	if status != http.StatusAccepted || doc["status"] != "suspended" {
		t.Fatalf("the session's execution: %d %+v", status, doc)
	}
	if status, doc := postJSON(t, s.base+"/execute", `{"code": "return n", "session_id": "`+sid+`"}`); status != http.StatusConflict {
		t.Fatalf("another execution of the session while one waits: %d %+v", status, doc)
	}
	status, doc = postJSON(t, s.base+"/executions/"+id+"/resume", `{"decisions": {"1": "approve"}}`)
	if r, _ := json.Marshal(doc["result"]); status != 200 || string(r) != `[3,"deleted s"]` {
		t.Fatalf("resumed: %d %s %+v", status, r, doc)
	}
	if status, doc := postJSON(t, s.base+"/execute", `{"code": "return n", "session_id": "`+sid+`"}`); status != 200 || doc["result"] != 3.0 {
		t.Fatalf("the session after: %d %+v", status, doc)
	}
}
