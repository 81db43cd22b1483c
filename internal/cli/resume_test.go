package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/cli"
)

// suspended is the part of pml run's document a suspension adds.
type suspended struct {
	OK          bool   `json:"ok"`
	Status      string `json:"status"`
	ExecutionID string `json:"execution_id"`
	Result      json.RawMessage
	Error       *struct{ Code string }
	Pending     []struct {
		CallID       int `json:"call_id"`
		Server, Tool string
		Args         json.RawMessage
		Reason       string
	}
	ExpiresAt time.Time `json:"expires_at"`
}

func pmlDoc(t *testing.T, args ...string) (int, suspended, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := cli.Main(context.Background(), append([]string{args[0], "--cache-dir", cacheDir}, args[1:]...), &out, &errOut)
	var d suspended
	if strings.HasPrefix(strings.TrimSpace(out.String()), "{") {
		if err := json.Unmarshal(out.Bytes(), &d); err != nil {
			t.Fatalf("output is not one JSON object: %v\n%s", err, out.String())
		}
	}
	// The document is indented for people; compare the values compactly.
	d.Result = compact(d.Result)
	for i := range d.Pending {
		d.Pending[i].Args = compact(d.Pending[i].Args)
	}
	return code, d, errOut.String()
}

func compact(raw json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return raw
	}
	return b.Bytes()
}

// approvalScript keeps a local across the suspension, reads with a tool
// that needs no approval, then calls a destructive one and reports what
// became of it.
const approvalScript = `const local = 40;
const e = await mcp.demo.echo({n: 1});
let d;
try { d = await mcp.demo.kv_delete({key: "nope"}) } catch (err) { d = err.code + ": " + err.message }
return [local + e.n + 1, d]`

func suspendRun(t *testing.T, extra ...string) suspended {
	t.Helper()
	code, d, stderr := pmlDoc(t, append([]string{"run", "--approval", "suspend", "-e", approvalScript}, extra...)...)
	if code != cli.ExitSuspended {
		t.Fatalf("pml run --approval suspend exited %d, want %d: %+v %s", code, cli.ExitSuspended, d, stderr)
	}
	if d.Status != "suspended" || d.OK || d.ExecutionID == "" || len(d.Pending) != 1 || d.ExpiresAt.IsZero() {
		t.Fatalf("document: %+v", d)
	}
	p := d.Pending[0]
	if p.CallID != 2 || p.Server != "demo" || p.Tool != "kv_delete" || string(p.Args) != `{"key":"nope"}` || p.Reason != "approval" {
		t.Fatalf("pending call: %+v (args %s)", p, p.Args)
	}
	return d
}

func TestRunSuspendsAndResumes(t *testing.T) {
	t.Run("approve", func(t *testing.T) {
		d := suspendRun(t)
		// The approved call runs in this (new) process's demo store, where
		// the key is missing: the tool's own error, caught by the script.
		code, r, stderr := pmlDoc(t, "resume", d.ExecutionID, "--approve", "2")
		if code != cli.ExitOK || !strings.HasPrefix(string(r.Result), `[42,"TOOL_ERROR: `) {
			t.Fatalf("resume: exit %d, result %s, error %+v: %s", code, r.Result, r.Error, stderr)
		}
		code, r, _ = pmlDoc(t, "resume", d.ExecutionID, "--approve", "2")
		if code != cli.ExitFailed || r.Error == nil || r.Error.Code != "CONFLICT" {
			t.Fatalf("a second resume: exit %d, error %+v; want %d CONFLICT", code, r.Error, cli.ExitFailed)
		}
	})
	t.Run("reject with a reason", func(t *testing.T) {
		d := suspendRun(t)
		code, r, stderr := pmlDoc(t, "resume", "--reject", "2", "--reason", "not today", d.ExecutionID)
		if code != cli.ExitOK || !strings.HasPrefix(string(r.Result), `[42,"REJECTED: `) || !strings.Contains(string(r.Result), "not today") {
			t.Fatalf("resume: exit %d, result %s, error %+v: %s", code, r.Result, r.Error, stderr)
		}
	})
	t.Run("expired", func(t *testing.T) {
		d := suspendRun(t, "--suspension-ttl", "1ms")
		time.Sleep(5 * time.Millisecond)
		code, r, _ := pmlDoc(t, "resume", d.ExecutionID, "--approve", "2")
		if code != cli.ExitFailed || r.Error == nil || r.Error.Code != "EXPIRED" {
			t.Fatalf("an expired resume: exit %d, error %+v; want %d EXPIRED", code, r.Error, cli.ExitFailed)
		}
	})
	t.Run("undecided calls stay pending", func(t *testing.T) {
		code, d, stderr := pmlDoc(t, "run", "--approval", "suspend", "-e",
			`const [a, b] = await Promise.all([mcp.demo.kv_delete({key: "a"}).catch(e => e.code), mcp.demo.kv_delete({key: "b"}).catch(e => e.code)]); return [a, b]`)
		if code != cli.ExitSuspended || len(d.Pending) != 2 {
			t.Fatalf("exit %d, %+v: %s", code, d, stderr)
		}
		code, r, stderr := pmlDoc(t, "resume", d.ExecutionID, "--reject", "1")
		if code != cli.ExitSuspended || len(r.Pending) != 1 || r.Pending[0].CallID != 2 {
			t.Fatalf("a partial decision: exit %d, %+v: %s", code, r, stderr)
		}
		code, r, stderr = pmlDoc(t, "resume", d.ExecutionID, "--reject", "2")
		if code != cli.ExitOK || string(r.Result) != `["REJECTED","REJECTED"]` {
			t.Fatalf("the last decision: exit %d, result %s, error %+v: %s", code, r.Result, r.Error, stderr)
		}
	})
}

func TestResumeUsage(t *testing.T) {
	tests := []struct {
		name string
		args []string
		exit int
		code string
	}{
		{"no id", []string{"resume", "--approve", "2"}, cli.ExitUsage, ""},
		{"no decision", []string{"resume", "ex_x"}, cli.ExitUsage, ""},
		{"a call id that is not a number", []string{"resume", "ex_x", "--approve", "two"}, cli.ExitUsage, ""},
		{"approved and rejected", []string{"resume", "ex_x", "--approve", "2", "--reject", "1,2"}, cli.ExitUsage, ""},
		{"a reason without a rejection", []string{"resume", "ex_x", "--approve", "2", "--reason", "x"}, cli.ExitUsage, ""},
		{"an unknown execution", []string{"resume", "ex_nope", "--approve", "2"}, cli.ExitFailed, "NOT_FOUND"},
		{"a bad approval mode", []string{"run", "--approval", "maybe", "-e", "return 1"}, cli.ExitUsage, ""},
		{"refuse stays the default", []string{"run", "-e", `await mcp.demo.kv_delete({key: "k"})`}, cli.ExitFailed, "FORBIDDEN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, d, stderr := pmlDoc(t, tt.args...)
			if code != tt.exit {
				t.Fatalf("exit %d, want %d: %s", code, tt.exit, stderr)
			}
			if tt.code != "" && (d.Error == nil || d.Error.Code != tt.code) {
				t.Fatalf("error %+v, want %s", d.Error, tt.code)
			}
			if tt.exit == cli.ExitUsage && stderr == "" {
				t.Fatal("a usage error must say what is wrong on stderr")
			}
		})
	}
}

// TestNoOutputNamesAnApprover: with approvers configured and the caller
// not deciding, what pml run, pml resume and pml status print says who
// decides by role, never by a configured principal.
func TestNoOutputNamesAnApprover(t *testing.T) {
	policy := []string{"--approvers", "arn:aws:iam::123456789012:role/ops-*,jwt:https://idp.example#alice",
		"--trusted-clients", "jwt:https://idp.example#trusted-*", "--caller-decides", "off"}
	run := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		cli.Main(context.Background(), append(append([]string{args[0], "--cache-dir", cacheDir}, args[1:]...), policy...), &out, &errOut)
		return out.String() + errOut.String()
	}
	suspendedOut := run("run", "--approval", "suspend", "-e", approvalScript)
	var d suspended
	if err := json.Unmarshal([]byte(suspendedOut), &d); err != nil || d.Status != "suspended" || !strings.Contains(suspendedOut, "an approver") {
		t.Fatalf("want a suspension naming the approvers' role: %v\n%s", err, suspendedOut)
	}
	outputs := map[string]string{
		"pml run":                     suspendedOut,
		"pml resume --approve":        run("resume", d.ExecutionID, "--approve", "2"),
		"pml run --allow-destructive": run("run", "--allow-destructive", "-e", `await mcp.demo.kv_delete({key: "k"})`),
	}
	if !strings.Contains(outputs["pml resume --approve"], "FORBIDDEN") {
		t.Fatalf("the caller approved its own call: %s", outputs["pml resume --approve"])
	}
	for what, o := range outputs {
		for _, part := range []string{"123456789012", "ops-", "idp.example", "trusted-"} {
			if strings.Contains(o, part) {
				t.Errorf("%s names an approver (%q): %s", what, part, o)
			}
		}
	}
}
