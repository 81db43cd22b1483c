package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/pml-sandbox/pml/internal/app"
)

// learnedProgram is one pattern: the text, the key and the token change
// from run to run; the token looks like a secret and must never be kept.
const learnedProgram = `// count the words of a text and keep the count
const w = await mcp.%s.word_count({text: %q});
await mcp.%s.kv_set({key: %q, value: {words: w.words, token: %q}});
return w.words`

func learnedRun(i int, text, kv string) string {
	return fmt.Sprintf(learnedProgram, text, fmt.Sprintf("a text of run %d with words", i), kv, fmt.Sprintf("count-%d", i), learnedSecret(i))
}

func learnedSecret(i int) string { return fmt.Sprintf("sk_live_%024d", i+7) }

// call sends a request through the API Gateway stand-in as principal and
// returns the status and body.
func call(t *testing.T, base, principal, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
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
	return resp.StatusCode, string(raw)
}

type suggestionList struct {
	Suggestions []struct {
		ID          string          `json:"id"`
		Name        string          `json:"name"`
		Code        string          `json:"code"`
		Successes   int             `json:"successes"`
		InputSchema json.RawMessage `json:"input_schema"`
		Tools       []string        `json:"tools"`
	} `json:"suggestions"`
}

// TestLearnedDeployed: under the deployed shape — the execute, capability
// and aggregate functions behind the Lambda emulator, traces in DynamoDB
// Local, the aggregate function fed from DynamoDB Local's stream as the
// event source mapping feeds it — three successful runs of one pattern by
// one principal make a suggestion for that principal, made of its runs,
// not for another principal nor for an approver who never ran it (what a
// principal's runs held reaches nobody else); no secret-looking literal
// of the runs is anywhere in it (nor in the table); the principal
// proposes it (a draft, under the deployed policy), an approver publishes
// the draft, and it is callable at once, by name, from the capability
// function's process.
func TestLearnedDeployed(t *testing.T) {
	s := newStack(t)
	gw := s.apiGateway(t)
	const other = "jwt:https://idp.test#agent-8"
	for i := range 3 {
		body, _ := json.Marshal(map[string]any{"code": learnedRun(i, "text", "kv")})
		status, out := call(t, gw, agentPrincipal, "POST", "/execute", string(body))
		if status != 200 || !strings.Contains(out, `"ok":true`) {
			t.Fatalf("run %d: %d %s", i, status, out)
		}
		if i < 2 {
			// Not yet: K is 3.
			s.aggregate(t)
			if _, out := call(t, gw, agentPrincipal, "GET", "/capabilities/suggestions", ""); strings.Contains(out, `"id"`) {
				t.Fatalf("suggested after %d runs: %s", i+1, out)
			}
		}
	}
	// Another principal's runs of another program, and a failure of this
	// one, count for nothing here.
	body, _ := json.Marshal(map[string]any{"code": `await mcp.text.word_count({text: "x"}); return 1`})
	call(t, gw, other, "POST", "/execute", string(body))
	body, _ = json.Marshal(map[string]any{"code": strings.Replace(learnedRun(9, "text", "kv"), "return w.words", "throw new Error('late')", 1)})
	call(t, gw, agentPrincipal, "POST", "/execute", string(body))
	s.aggregate(t)

	list := func(principal string) (suggestionList, string) {
		status, out := call(t, gw, principal, "GET", "/capabilities/suggestions", "")
		if status != 200 {
			t.Fatalf("suggestions for %s: %d %s", principal, status, out)
		}
		var l suggestionList
		if err := json.Unmarshal([]byte(out), &l); err != nil {
			t.Fatal(err)
		}
		return l, out
	}
	mine, raw := list(agentPrincipal)
	if len(mine.Suggestions) != 1 || mine.Suggestions[0].Successes != 3 {
		t.Fatalf("the agent's suggestions: %s", raw)
	}
	sug := mine.Suggestions[0]
	if strings.Join(sug.Tools, ",") != "text:word_count,kv:kv_set" || !strings.Contains(sug.Code, "args.text") || !strings.Contains(sug.Code, "args.key") || !strings.Contains(sug.Code, "args.token") {
		t.Fatalf("suggestion: %s", raw)
	}
	approved, rawApprover := list(approverPrincipal)
	if len(approved.Suggestions) != 0 {
		t.Fatalf("an approver who never ran it reads the agent's runs: %s", rawApprover)
	}
	if others, raw := list(other); len(others.Suggestions) != 0 {
		t.Fatalf("another principal sees the agent's candidate: %s", raw)
	}
	// Over /mcp too: list_capabilities has a suggested part, the caller's.
	mcpList := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_capabilities","arguments":{}}}`
	if _, out := call(t, gw, agentPrincipal, "POST", "/mcp", mcpList); !strings.Contains(out, sug.ID) {
		t.Errorf("list_capabilities for the agent lacks its suggestion: %s", out)
	}
	if _, out := call(t, gw, other, "POST", "/mcp", mcpList); strings.Contains(out, sug.ID) {
		t.Errorf("list_capabilities shows another principal the agent's suggestion: %s", out)
	}
	// Another principal cannot publish what it cannot see.
	if status, out := call(t, gw, other, "POST", "/capabilities/suggestions/"+sug.ID+"/publish", `{}`); status != 404 {
		t.Errorf("another principal published: %d %s", status, out)
	}

	// No secret: not in what anyone was shown, not in any item of the
	// traces table (execution items, counters, journals).
	scan, err := s.db.Client().Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(s.tracesTable)})
	if err != nil {
		t.Fatal(err)
	}
	table, _ := json.Marshal(scan.Items)
	for i := range 10 {
		for where, text := range map[string]string{"agent's list": raw, "approver's list": rawApprover, "traces table": string(table)} {
			if strings.Contains(text, learnedSecret(i)) {
				t.Fatalf("the %s holds run %d's secret", where, i)
			}
		}
	}

	// The agent proposes it (the seam to the guarded path: a draft, since
	// the agent may not publish), an approver publishes the draft; the
	// capability function, another process, runs it at once.
	status, out := call(t, gw, agentPrincipal, "POST", "/capabilities/suggestions/"+sug.ID+"/publish", `{"name": "words:count_and_keep"}`)
	var proposed struct {
		Draft struct {
			ID string `json:"id"`
		} `json:"draft"`
	}
	if status != 202 || json.Unmarshal([]byte(out), &proposed) != nil || proposed.Draft.ID == "" {
		t.Fatalf("propose: %d %s", status, out)
	}
	status, out = call(t, gw, approverPrincipal, "POST", "/capabilities/drafts/"+proposed.Draft.ID+"/publish", `{}`)
	if status != 201 || !strings.Contains(out, `"version":1`) {
		t.Fatalf("publish: %d %s", status, out)
	}
	body, _ = json.Marshal(map[string]any{"code": `return await mcp.words.count_and_keep({text: "one two three", key: "k", token: "t"})`})
	status, out = call(t, gw, agentPrincipal, "POST", "/execute", string(body))
	if status != 200 || !strings.Contains(out, `"result":3`) || !strings.Contains(out, `"child_execution_id"`) {
		t.Fatalf("calling the published suggestion: %d %s", status, out)
	}
}

// TestLearnedLocal: the same locally — `pml serve` runs the pattern, `pml
// capability suggest` in another process reads it from the trace file and
// publishes it, and `pml run`, a third process, calls it.
func TestLearnedLocal(t *testing.T) {
	dir := t.TempDir()
	env := []string{app.EnvTracesFile + "=" + dir + "/traces.jsonl", app.EnvCapFile + "=" + dir + "/caps.json", "XDG_DATA_HOME=" + dir, app.EnvLogLevel + "=warn"}
	srv := startServe(t, env)
	for i := range 3 {
		out, err := execute(context.Background(), srv.base, learnedRun(i, "demo", "demo"), 30000)
		if err != nil || out["ok"] != true {
			t.Fatalf("run %d: %v %v", i, out, err)
		}
	}
	cli := append(os.Environ(), env...)
	out, code := runPML(t, cli, "capability", "suggest")
	if code != 0 {
		t.Fatalf("suggest: %d %s", code, out)
	}
	var l suggestionList
	if err := json.Unmarshal([]byte(out), &l); err != nil || len(l.Suggestions) != 1 || l.Suggestions[0].Successes != 3 {
		t.Fatalf("suggest: %v %s", err, out)
	}
	for i := range 3 {
		if strings.Contains(out, learnedSecret(i)) {
			t.Fatalf("the suggestion holds a secret: %s", out)
		}
	}
	if out, code := runPML(t, cli, "capability", "suggest", "--min-runs", "4"); code != 0 || strings.Contains(out, l.Suggestions[0].ID) {
		t.Fatalf("suggested below K: %s", out)
	}
	out, code = runPML(t, cli, "capability", "suggest", "--publish", l.Suggestions[0].ID, "--name", "words:count_and_keep")
	if code != 0 || !strings.Contains(out, `"version": 1`) && !strings.Contains(out, `"version":1`) {
		t.Fatalf("publish: %d %s", code, out)
	}
	out, code = runPML(t, cli, "run", "--cache-dir", dir, "-e", `return await mcp.words.count_and_keep({text: "one two", key: "k", token: "t"})`)
	if code != 0 || !strings.Contains(out, `"result": 2`) && !strings.Contains(out, `"result":2`) {
		t.Fatalf("run: %d %s", code, out)
	}
}
