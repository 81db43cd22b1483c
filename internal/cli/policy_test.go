package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/cli"
)

// policyCmd runs `pml policy ...` and returns the exit code and output.
func policyCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := cli.Main(context.Background(), append([]string{"policy"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

const demoPolicy = `@id("echo") permit (principal, action == PML::Action::"call", resource == PML::Tool::"demo:echo");
@id("no-adds") forbid (principal, action == PML::Action::"call", resource == PML::Tool::"demo:add");
@id("adds") permit (principal, action == PML::Action::"call", resource == PML::Tool::"demo:add");
`

// TestPolicyCommands: check, print, test and explain, as an operator uses
// them before and after deploying a policy file.
func TestPolicyCommands(t *testing.T) {
	dir := t.TempDir()
	good, bad, cases := filepath.Join(dir, "p.cedar"), filepath.Join(dir, "bad.cedar"), filepath.Join(dir, "cases.yaml")
	_ = os.WriteFile(good, []byte(demoPolicy), 0o600)
	_ = os.WriteFile(bad, []byte(`permit (principal, action == PML::Action::"call", resource) when { context.aproved };`), 0o600)

	if code, out, _ := policyCmd(t, "check", good); code != cli.ExitOK || !strings.Contains(out, "ok, 3 policies") {
		t.Errorf("check a good file: exit %d\n%s", code, out)
	}
	if code, out, _ := policyCmd(t, "check", good, bad); code != cli.ExitFailed || !strings.Contains(out, "aproved") {
		t.Errorf("check a bad file: exit %d\n%s", code, out)
	}
	code, out, _ := policyCmd(t, "print", "--approvers", "arn:aws:sts::123456789012:assumed-role/ops/*")
	if code != cli.ExitOK || !strings.Contains(out, `principal.role like "ops"`) || !strings.Contains(out, `@id("call-needs-a-person")`) {
		t.Errorf("print the default set: exit %d\n%s", code, out)
	}
	if code, out, _ := policyCmd(t, "print", "--schema"); code != cli.ExitOK || !strings.Contains(out, "namespace PML") {
		t.Errorf("print the schema: exit %d", code)
	}

	_ = os.WriteFile(cases, []byte(`cases:
  - {name: echo runs, principal: "jwt:https://idp#a", action: call, tool: "demo:echo", read_only: true, expect: allow, policies: [echo]}
  - {name: adds never, principal: "jwt:https://idp#a", action: call, tool: "demo:add", read_only: true, expect: deny, policies: [no-adds]}
  - {name: a wrong expectation, principal: "jwt:https://idp#a", action: call, tool: "demo:add", expect: allow}
`), 0o600)
	code, out, _ = policyCmd(t, "test", good, cases)
	if code != cli.ExitFailed || !strings.Contains(out, "ok   echo runs") || !strings.Contains(out, "ok   adds never") ||
		!strings.Contains(out, "FAIL a wrong expectation: deny (no-adds); want allow") || !strings.Contains(out, "3 cases, 1 failed") {
		t.Errorf("test: exit %d\n%s", code, out)
	}

	// Run under the file, then explain the execution from its trace.
	rc, o, errOut := pml(t, "run", "--policy", good, "-e", `await mcp.demo.echo({x: 1}); try { await mcp.demo.add({a: 1, b: 2}) } catch (e) { return e.code }`)
	if rc != cli.ExitOK || string(o.Result) != `"FORBIDDEN"` {
		t.Fatalf("run under the file: exit %d %s\n%s", rc, o.Result, errOut)
	}
	code, out, errOut = policyCmd(t, "explain", "--policy", good, o.ExecutionID)
	var doc struct {
		Calls []struct {
			Tool     string
			Policies []struct{ ID, Effect, Position, Text string }
		}
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || code != cli.ExitOK {
		t.Fatalf("explain: exit %d %v\n%s%s", code, err, out, errOut)
	}
	if len(doc.Calls) != 2 || doc.Calls[0].Policies[0].ID != "echo" || doc.Calls[1].Policies[0].ID != "no-adds" ||
		doc.Calls[1].Policies[0].Effect != "forbid" || !strings.HasSuffix(doc.Calls[1].Policies[0].Position, "p.cedar:2") {
		t.Errorf("explained: %+v", doc)
	}
	// A bad file stops the run before anything runs.
	if rc, _, errOut := pml(t, "run", "--policy", bad, "-e", `return 1`); rc != cli.ExitUsage || !strings.Contains(errOut, "aproved") {
		t.Errorf("run under a bad file: exit %d\n%s", rc, errOut)
	}
}
