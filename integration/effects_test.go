package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/journal"
	"github.com/pml-sandbox/pml/internal/testutil/lambdaemu"
)

// writesScript makes 10 writes in a loop between reads (a read is call
// 3i+1, a write 3i+2; the pause, a read too, 3i+3), under prefix.
func writesScript(prefix string, pauseMS int) string {
	return fmt.Sprintf(`for (let i = 0; i < 10; i++) {
  await mcp.kv.kv_get({key: %[1]q + i})
  await mcp.kv.kv_set({key: %[1]q + i, value: i})
  await mcp.kv.sleep({ms: %[2]d})
}
return "done"`, prefix, pauseMS)
}

// effectsDoc is the part of an execution's document these tests read.
type effectsDoc struct {
	Status       string             `json:"status"`
	TraceMissing bool               `json:"trace_missing"`
	Effects      []execution.Effect `json:"effects"`
}

func getEffects(t *testing.T, base, id string) effectsDoc {
	t.Helper()
	resp, err := http.Get(base + "/executions/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var d effectsDoc
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %v", id, resp.StatusCode, err)
	}
	return d
}

// checkWrites: effects are exactly the writes of writesScript's first n
// iterations, applied, each with the key of its execution and call.
func checkWrites(t *testing.T, id string, effects []execution.Effect, n int) {
	t.Helper()
	if len(effects) != n {
		t.Fatalf("%d effects, want %d: %+v", len(effects), n, effects)
	}
	for i, e := range effects {
		call := 3*i + 2
		if e.CallID != call || e.Server != "kv" || e.Tool != "kv_set" || e.Status != "applied" || e.Key != journal.Key(id, call) {
			t.Errorf("effect %d: %+v, want call %d applied with key %s", i, e, call, journal.Key(id, call))
		}
	}
}

// TestEffectsListed: behind the emulator, with the journal in DynamoDB
// Local, a script's 10 writes between reads are listed — all applied, with
// their keys — by GET /executions/{id}, and its reads are not.
func TestEffectsListed(t *testing.T) {
	s := longStack(t, nil)
	base := s.apiGateway(t)
	prefix := fmt.Sprintf("listed-%d-", time.Now().UnixNano())
	d := decodeDoc(t, post(t, context.Background(), base+"/execute", fmt.Sprintf(`{"code": %q}`, writesScript(prefix, 1))))
	if !d.OK {
		t.Fatalf("%+v", d.Error)
	}
	doc := getEffects(t, base, d.ExecutionID)
	checkWrites(t, d.ExecutionID, doc.Effects, 10)
	if doc.TraceMissing {
		t.Error("the trace was there")
	}
}

// waitApplied polls a journal until it holds n applied entries of id.
func waitApplied(t *testing.T, j journal.Reader, id string, n int) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		entries, err := j.List(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		applied := 0
		for _, e := range entries {
			if e.Status == journal.Applied {
				applied++
			}
		}
		if applied >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d applied after a minute: %+v", applied, entries)
		}
	}
}

// checkKilled: after the kill, the journal holds exactly the writes made
// before it — applied, and at most the one in flight pending — and the
// server holds exactly the writes the journal says happened.
func checkKilled(t *testing.T, j journal.Reader, id string, n int, prefix string, keys []string) {
	t.Helper()
	entries, err := j.List(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var applied []journal.Entry
	pending := 0
	for _, e := range entries {
		switch e.Status {
		case journal.Applied:
			applied = append(applied, e)
		case journal.Pending:
			pending++
		default:
			t.Errorf("entry %+v", e)
		}
	}
	if len(applied) != n || pending > 1 {
		t.Fatalf("the journal after the kill: %d applied, %d pending: %+v", len(applied), pending, entries)
	}
	for i, e := range applied {
		if e.CallID != 3*i+2 || e.Key != journal.Key(id, e.CallID) || e.Attempts != 1 {
			t.Errorf("applied %d: %+v", i, e)
		}
	}
	// Every write the journal says applied is on the server, and nothing
	// else but the one in flight.
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprint(prefix, i)
	}
	if len(keys) < n || strings.Join(keys[:n], ",") != strings.Join(want, ",") || len(keys) > n+pending {
		t.Fatalf("the server holds %v; the journal %d applied, %d pending", keys, n, pending)
	}
}

// TestEffectsSurviveSIGKILLBehindTheEmulator: the execute function's
// process is killed (SIGKILL) right after the 4th write's outcome is
// journalled in DynamoDB Local: the journal holds exactly those 4 applied
// effects, and the execution's document lists them.
func TestEffectsSurviveSIGKILLBehindTheEmulator(t *testing.T) {
	s := longStack(t, func(f *lambdaemu.Function) { f.AsyncDuplicates = 0 })
	base := s.apiGateway(t)
	j := journal.NewDynamo(s.db.Client(), s.suspTable, journal.Options{})
	prefix := fmt.Sprintf("killed-%d-", time.Now().UnixNano())
	d := decodeDoc(t, post(t, context.Background(), base+"/execute", fmt.Sprintf(`{"code": %q, "async": true, "timeout_ms": 60000}`, writesScript(prefix, 1500))))
	if d.Status != "running" {
		t.Fatalf("POST async: %+v", d)
	}
	waitApplied(t, j, d.ExecutionID, 4)
	if n, err := s.emu.Recycle("execute"); err != nil || n == 0 {
		t.Fatalf("recycle: %d %v", n, err)
	}
	var keys []string
	resp := decodeDoc(t, post(t, context.Background(), base+"/execute", fmt.Sprintf(`{"code": %q}`, fmt.Sprintf(`return await mcp.kv.kv_list({prefix: %q})`, prefix))))
	if err := json.Unmarshal(resp.Result, &struct{ Keys *[]string }{&keys}); err != nil || !resp.OK {
		t.Fatalf("reading the server: %s %+v", resp.Result, resp.Error)
	}
	checkKilled(t, j, d.ExecutionID, 4, prefix, keys)
	doc := getEffects(t, base, d.ExecutionID)
	checkWrites(t, d.ExecutionID, doc.Effects, 4)
}

// TestEffectsSurviveSIGKILLOfServe: `pml serve` running an asynchronous
// execution is killed (SIGKILL) right after the 4th write's outcome is
// journalled in its directory: the journal file holds exactly those 4
// applied effects, and a new `pml serve` over the same directory lists
// them in the execution's document.
func TestEffectsSurviveSIGKILLOfServe(t *testing.T) {
	demo, err := demoserver.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = demo.Close() })
	shared := t.TempDir()
	env := []string{app.EnvSuspDir + "=" + filepath.Join(shared, "suspensions")}
	first := startServe(t, env, "--mcp", "kv="+demo.SSEURL())
	j := journal.NewFile(filepath.Join(shared, "suspensions", "journal"), journal.Options{})
	prefix := fmt.Sprintf("serve-%d-", time.Now().UnixNano())
	d := decodeDoc(t, post(t, context.Background(), first.base+"/execute", fmt.Sprintf(`{"code": %q, "async": true, "timeout_ms": 60000}`, writesScript(prefix, 1500))))
	if d.Status != "running" {
		t.Fatalf("POST async: %+v", d)
	}
	waitApplied(t, j, d.ExecutionID, 4)
	if err := first.proc.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.exited
	second := startServe(t, env, "--mcp", "kv="+demo.SSEURL())
	out, err := execute(context.Background(), second.base, fmt.Sprintf(`return await mcp.kv.kv_list({prefix: %q})`, prefix), 10000)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(out["result"])
	var keys []string
	_ = json.Unmarshal(raw, &struct{ Keys *[]string }{&keys})
	checkKilled(t, j, d.ExecutionID, 4, prefix, keys)
	doc := getEffects(t, second.base, d.ExecutionID)
	checkWrites(t, d.ExecutionID, doc.Effects, 4)
	if !strings.Contains(doc.Status, "running") && doc.Status != "failed" {
		t.Errorf("status %q", doc.Status)
	}
}
