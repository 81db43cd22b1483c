package journal_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/journal"
)

// crashChildEnv names the directory a crash child writes in: the test
// binary, started with it set, runs crashChild instead of the tests.
const crashChildEnv = "PML_JOURNAL_CRASH_DIR"

// crashChild is a host that makes effects for ever, as the executor does:
// intent, then the effect (a line appended to the "server's" own log,
// synced, as a server that applied it would), then the outcome. It goes on
// the execution a killed predecessor left: a pending entry is settled
// unknown first (the continuation's business, here only so the next call
// id is free).
func crashChild() {
	dir := os.Getenv(crashChildEnv)
	ctx := context.Background()
	s := journal.NewFile(filepath.Join(dir, "journal"), journal.Options{})
	entries, err := s.List(ctx, "crash")
	if err != nil {
		panic(err)
	}
	next := len(entries) + 1
	for _, e := range entries {
		if e.Status == journal.Pending {
			if err := s.Settle(ctx, "crash", e.CallID, journal.Outcome{Status: journal.Unknown, Error: fault.New(fault.OutcomeUnknown, "crashed")}); err != nil {
				panic(err)
			}
		}
	}
	server, err := os.OpenFile(filepath.Join(dir, "server.log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		panic(err)
	}
	fmt.Println("ready")
	for call := next; ; call++ {
		e := &journal.Entry{ExecutionID: "crash", CallID: call, Server: "kv", Tool: "kv_set", Key: journal.Key("crash", call),
			Args: json.RawMessage(fmt.Sprintf(`{"n":%d,"pad":%q}`, call, strings.Repeat("p", rand.N(3000))))}
		if old, err := s.Intend(ctx, e); err != nil || old != nil {
			panic(fmt.Sprint(old, err))
		}
		if _, err := fmt.Fprintln(server, e.Key); err != nil {
			panic(err)
		}
		if err := server.Sync(); err != nil {
			panic(err)
		}
		if err := s.Settle(ctx, "crash", call, journal.Outcome{Status: journal.Applied, Result: json.RawMessage(`{"stored":true}`)}); err != nil {
			panic(err)
		}
	}
}

// TestSIGKILLAtManyPoints kills a host making effects through the file
// store at 30 random points, each run going on from what the last left.
// After every kill: every effect the server applied is in the journal
// (applied, or pending for the one in flight), every effect the journal
// says applied the server applied, none twice, and at most one is pending,
// the last.
func TestSIGKILLAtManyPoints(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 30 processes")
	}
	dir := t.TempDir()
	kills, torn := 0, 0
	for point := range 30 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("point %d: the child said %q %v", point, line, err)
		}
		time.Sleep(time.Duration(rand.N(40000)) * time.Microsecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		err = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("point %d: the child ended on its own: %v", point, err)
		}
		kills++
		raw, _ := os.ReadFile(filepath.Join(dir, "journal", "crash.jsonl"))
		if len(raw) > 0 && raw[len(raw)-1] != '\n' {
			torn++
		}
		checkCrashInvariants(t, dir, point)
	}
	t.Logf("%d kills, %d of them left a torn line", kills, torn)
}

func checkCrashInvariants(t *testing.T, dir string, point int) {
	t.Helper()
	entries, err := journal.NewFile(filepath.Join(dir, "journal"), journal.Options{}).List(context.Background(), "crash")
	if err != nil {
		t.Fatalf("point %d: %v", point, err)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "server.log"))
	applied := map[string]bool{}
	for _, k := range strings.Fields(string(raw)) {
		if applied[k] {
			t.Fatalf("point %d: the server applied %s twice", point, k)
		}
		applied[k] = true
	}
	byKey := map[string]journal.Entry{}
	pending := 0
	for i, e := range entries {
		if e.CallID != i+1 {
			t.Fatalf("point %d: entry %d is call %d", point, i, e.CallID)
		}
		byKey[e.Key] = e
		switch e.Status {
		case journal.Applied:
			if !applied[e.Key] {
				t.Fatalf("point %d: call %d is journalled applied and the server never applied it", point, e.CallID)
			}
		case journal.Pending:
			pending++
			if i != len(entries)-1 {
				t.Fatalf("point %d: call %d is pending and not the last", point, e.CallID)
			}
		}
	}
	if pending > 1 {
		t.Fatalf("point %d: %d pending", point, pending)
	}
	for k := range applied {
		e, ok := byKey[k]
		if !ok {
			t.Fatalf("point %d: the server applied %s and the journal has no entry for it: lost from the record", point, k)
		}
		if e.Status != journal.Applied && e.Status != journal.Pending && e.Status != journal.Unknown {
			t.Fatalf("point %d: call %d was applied and is journalled %s", point, e.CallID, e.Status)
		}
	}
}
