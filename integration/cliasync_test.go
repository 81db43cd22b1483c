package integration

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestRunAsyncCLI: pml run --async prints the execution's id at once and
// exits while a detached pml process runs it; pml status --wait reads it to
// its end; pml status --cancel stops another at its next step.
func TestRunAsyncCLI(t *testing.T) {
	env := pmlEnv(t)
	doc := func(out string) runDoc {
		t.Helper()
		var d runDoc
		if err := json.Unmarshal([]byte(out), &d); err != nil {
			t.Fatalf("not a document: %s", out)
		}
		return d
	}
	start := time.Now()
	out, code := runPML(t, env, "run", "--async", "-e", `await mcp.demo.sleep({ms: 1500}); return "later"`)
	d := doc(out)
	if code != 0 || d.Status != "running" || d.ExecutionID == "" || time.Since(start) > 20*time.Second {
		t.Fatalf("pml run --async: exit %d %s", code, out)
	}
	out, code = runPML(t, env, "status", d.ExecutionID, "--wait")
	if f := doc(out); code != 0 || f.Status != "completed" || string(f.Result) != `"later"` {
		t.Fatalf("pml status --wait: exit %d %s", code, out)
	}

	out, _ = runPML(t, env, "run", "--async", "-e", `for (let i = 0; i < 100; i++) await mcp.demo.sleep({ms: 200}); return "never"`)
	d = doc(out)
	time.Sleep(2 * time.Second)
	out, code = runPML(t, env, "status", "--cancel", "--wait", d.ExecutionID)
	if f := doc(out); code != 1 || f.Status != "cancelled" || f.Error == nil || f.Error.Code != "CANCELLED" {
		t.Fatalf("pml status --cancel --wait: exit %d %s", code, out)
	}
	if out, code := runPML(t, env, "status", "ex_nope"); code != 1 || !strings.Contains(out, "NOT_FOUND") {
		t.Fatalf("an unknown id: exit %d %s", code, out)
	}
}
