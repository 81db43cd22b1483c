package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/pml-sandbox/pml/internal/testutil/askserver"
	"github.com/pml-sandbox/pml/internal/testutil/everything"
	"github.com/pml-sandbox/pml/internal/testutil/syncbuf"
)

// inlineServers serves the reference server (the official TypeScript
// SDK's, which speaks 2025-11-25: its trigger-elicitation-request tool
// asks with elicitation/create on the call's own stream, and exists only
// for a client that declares elicitation) and an mcp-go server that asks
// through 2026-07-28's input_required, and writes their configuration.
func inlineServers(t *testing.T) (cfg string, ask *askserver.Server) {
	t.Helper()
	ev := everything.Start(t, everything.Streamable)
	ask, err := askserver.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ask.Close() })
	cfg = filepath.Join(t.TempDir(), "servers.json")
	doc := fmt.Sprintf(`{"servers": [{"name": "ev", "url": %q, "transport": "streamable"}, {"name": "ask", "url": %q, "transport": "streamable"}]}`, ev.URL, ask.URL)
	if err := os.WriteFile(cfg, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg, ask
}

// TestRunAnswersInLine: pml run answers remote servers' questions while
// their calls are in flight, from --answers: the reference server's
// 2025-11-25 elicitation/create (the form's defaults filled in for the
// fields the answer leaves out) and an mcp-go server's 2026-07-28
// input_required (the call sent again with the answer and the server's
// state). Without an answerer pml declares no elicitation, so the
// reference server does not even offer its asking tool.
func TestRunAnswersInLine(t *testing.T) {
	cfg, ask := inlineServers(t)
	answers := filepath.Join(t.TempDir(), "answers.json")
	if err := os.WriteFile(answers, []byte(`{
		"ev:trigger-elicitation-request": {"action": "accept", "content": {"name": "Ada", "untitledSingleSelectEnum": "Joey"}},
		"ask:confirm_delete": {"action": "accept", "content": {"confirmed": true}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	script := `const ev = await mcp.ev["trigger-elicitation-request"]({});
		const ask = await mcp.ask.confirm_delete({item: "draft"});
		return {ev, ask}`
	out, code := runPML(t, pmlEnv(t), "run", "--config", cfg, "--demo", "off", "--call-detail", "none", "--answers", answers, "-e", script)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	var doc struct {
		Result struct {
			Ev  []string
			Ask map[string]any
		}
	}
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &doc); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	ev := strings.Join(doc.Result.Ev, "\n")
	for _, want := range []string{"User provided the requested information", "- Name: Ada", `"untitledSingleSelectEnum": "Joey"`,
		"- Favorite Integer: 42", `"titledMultipleSelectEnum": [`, `"fish-1"`} {
		if !strings.Contains(ev, want) {
			t.Errorf("the reference server's result lacks %q:\n%s", want, ev)
		}
	}
	if doc.Result.Ask["deleted"] != true || doc.Result.Ask["note"] != "none" {
		t.Errorf("the asking server's result: %v", doc.Result.Ask)
	}
	if r := ask.Retries(); len(r) != 1 || !r[0].Known {
		t.Errorf("retries %+v; want one with the server's own state", r)
	}

	out, code = runPML(t, pmlEnv(t), "run", "--config", cfg, "--demo", "off", "-e", `return await mcp.ev["trigger-elicitation-request"]({})`)
	if code == 0 || !strings.Contains(out, "TOOL_NOT_FOUND") {
		t.Fatalf("without an answerer: exit %d: %s; want TOOL_NOT_FOUND", code, out)
	}
	out, code = runPML(t, pmlEnv(t), "run", "--config", cfg, "--demo", "off", "--caller-decides", "off", "--answers", answers, "-e", "return 1")
	if code != 2 || !strings.Contains(out, "--caller-decides off") {
		t.Fatalf("--answers where the caller may not answer: exit %d: %s; want a usage error", code, out)
	}
}

// TestRunAsksAtTheTerminal: pml run on a terminal puts a remote server's
// question to the person at the keyboard: the message, then each field
// with its title and default, then whether to send it; Enter takes the
// default, and the server gets the answer with the call sent again.
func TestRunAsksAtTheTerminal(t *testing.T) {
	cfg, ask := inlineServers(t)
	cmd := exec.Command(bins.pml, "run", "--config", cfg, "--demo", "off", "--call-detail", "none", "-e",
		`return await mcp.ask.confirm_delete({item: "draft"})`)
	cmd.Env = pmlEnv(t)
	tty, err := pty.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	shown := &syncbuf.Buffer{}
	go func() { _, _ = io.Copy(shown, tty) }()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for _, step := range []struct{ wait, typ string }{
		{"ask:confirm_delete asks:", ""},
		{"Delete draft? This cannot be undone.", ""},
		{"Delete it? (yes/no):", "yes\r"},
		{"note (text) (optional) [none]:", "\r"},
		{"[a]ccept, [d]ecline, [c]ancel", "\r"},
		{`"deleted": true`, ""},
	} {
		for !strings.Contains(shown.String(), step.wait) {
			if ctx.Err() != nil {
				t.Fatalf("the terminal never showed %q:\n%s", step.wait, shown.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
		if step.typ != "" {
			if _, err := tty.WriteString(step.typ); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("pml run: %v\n%s", err, shown.String())
	}
	if r := ask.Retries(); len(r) != 1 || !r[0].Known {
		t.Errorf("retries %+v; want one with the server's own state", r)
	}
}
