package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/journal"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/testutil/lambdaemu"
)

// contLease is the run lease of the continuation tests behind the
// emulator: short, so that a run whose runner died is taken over in
// seconds (the deployment's is 30 s).
const contLease = 2 * time.Second

// contStack is longStack with more MCP servers and a short run lease: the
// execute function behind the emulator (its asynchronous invocations
// retried once, after the lease lapsed, as Lambda retries a minute
// later), its suspensions, runs and journal in DynamoDB Local.
func contStack(t *testing.T, servers []string, adjust func(*lambdaemu.Function)) *stack {
	t.Helper()
	tableName := fmt.Sprintf("cont_%d", time.Now().UnixNano())
	s := newStackWith(t, stackOptions{
		servers: servers,
		env:     []string{app.EnvStreamREST + "=on", app.EnvSuspTable + "=" + tableName, app.EnvRunLease + "=" + contLease.String()},
		execute: func(f *lambdaemu.Function) {
			f.Timeout, f.MaxConcurrency = 90*time.Second, 8
			f.AsyncRetries, f.AsyncRetryDelay = 1, contLease+time.Second
			if adjust != nil {
				adjust(f)
			}
		},
	})
	if err := suspend.CreateTable(context.Background(), s.db.Client(), tableName); err != nil {
		t.Fatal(err)
	}
	s.suspTable = tableName
	return s
}

// checkLedger: every write of prefix was applied exactly once on the
// server, and the document lists the 10 effects with their keys, all
// applied but the one unknown (call id; 0 for none).
func checkLedger(t *testing.T, l *writeLedger, prefix, id string, doc contDoc, unknown int) {
	t.Helper()
	for i := range 10 {
		if n := l.times(fmt.Sprint(prefix, i)); n != 1 {
			t.Errorf("the server applied %s%d %d times", prefix, i, n)
		}
	}
	if len(doc.Effects) != 10 {
		t.Fatalf("%d effects listed: %+v", len(doc.Effects), doc.Effects)
	}
	for i, e := range doc.Effects {
		call, want := 3*i+2, "applied"
		if call == unknown {
			want = "unknown"
		}
		if e.CallID != call || e.Key != journal.Key(id, call) || e.Status != want {
			t.Errorf("effect %d: %+v, want call %d %s with key %s", i, e, call, want, journal.Key(id, call))
		}
	}
}

// TestContinuedBehindTheEmulator: an asynchronous execution making 10
// writes between reads runs behind the emulator (the real execute binary,
// DynamoDB Local); its execute process is SIGKILLed, and the execution is
// continued in a new process from its last checkpoint and completes: right
// after the 4th write's outcome is journalled (continued by Lambda's retry
// of the failed invocation); while the 5th is in flight against a server
// that honours Idempotency-Key (sent again once, with its key, applied
// once); and while the 5th is in flight against one that does not (not
// sent again: the script catches OUTCOME_UNKNOWN, the document says
// unknown; continued by the schedule's sweep, Lambda's retry turned off).
func TestContinuedBehindTheEmulator(t *testing.T) {
	honours, not := startLedger(t, true), startLedger(t, false)
	for _, tc := range []struct {
		name    string
		server  *writeLedger
		inWrite bool // kill with the 5th write in flight, else after the 4th's outcome
		sweep   bool // continued by a sweep, not by Lambda's retry
		want    string
	}{
		{"after the 4th write", honours, false, false, `["ok","ok","ok","ok","ok","ok","ok","ok","ok","ok"]`},
		{"5th in flight, keys honoured", honours, true, false, `["ok","ok","ok","ok","ok","ok","ok","ok","ok","ok"]`},
		{"5th in flight, keys not honoured", not, true, true, `["ok","ok","ok","ok","OUTCOME_UNKNOWN","ok","ok","ok","ok","ok"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := contStack(t, []string{tc.server.config("ledger")}, func(f *lambdaemu.Function) {
				f.AsyncDuplicates = 0
				if tc.sweep {
					f.AsyncRetries = -1
				}
			})
			base := s.apiGateway(t)
			j := journal.NewDynamo(s.db.Client(), s.suspTable, journal.Options{})
			prefix := fmt.Sprintf("cont-%d-", time.Now().UnixNano())
			var held <-chan struct{}
			if tc.inWrite {
				held = tc.server.hold(prefix + "4")
			}
			d := decodeDoc(t, post(t, context.Background(), base+"/execute",
				fmt.Sprintf(`{"code": %q, "async": true, "timeout_ms": 60000}`, ledgerScript("ledger", prefix, 1500))))
			if d.Status != "running" {
				t.Fatalf("POST async: %+v", d)
			}
			if tc.inWrite {
				select {
				case <-held:
				case <-time.After(60 * time.Second):
					t.Fatal("the 5th write never came")
				}
			} else {
				waitApplied(t, j, d.ExecutionID, 4)
			}
			killed := time.Now()
			if n, err := s.emu.Recycle("execute"); err != nil || n == 0 {
				t.Fatalf("recycle: %d %v", n, err)
			}
			tc.server.unhold() // the held write's answer goes nowhere
			if tc.sweep {
				time.Sleep(contLease + 500*time.Millisecond)
				if out, fnErr, err := s.emu.Invoke(context.Background(), "execute", []byte(`{"sweep": {}}`)); err != nil || fnErr || string(out) != `{"swept":1}` {
					t.Fatalf("sweep: %s %v %v", out, fnErr, err)
				}
			}
			doc := waitEnded(t, base, d.ExecutionID, 90*time.Second)
			t.Logf("continued and completed %v after the kill", time.Since(killed).Round(time.Millisecond))
			if doc.Status != "completed" || !doc.OK || string(doc.Result) != tc.want {
				t.Fatalf("document: %s %s %+v", doc.Status, doc.Result, doc.Error)
			}
			unknown := 0
			if tc.sweep {
				unknown = 14
			}
			checkLedger(t, tc.server, prefix, d.ExecutionID, doc, unknown)
			entries, err := j.List(context.Background(), d.ExecutionID)
			if err != nil || len(entries) != 10 {
				t.Fatalf("journal: %d entries %v", len(entries), err)
			}
			if e := entries[4]; tc.inWrite && !tc.sweep && e.Attempts != 2 || tc.sweep && e.Attempts != 1 {
				t.Errorf("the 5th write's entry: %+v", e)
			}
		})
	}
}

// TestContinuedAfterServeKilled: `pml serve` running an asynchronous
// execution is SIGKILLed right after the 4th write's outcome is journalled;
// a new `pml serve` over the same stores, with its defaults (a 30 s lease,
// a sweep every 10 s), continues it, and it completes within 90 seconds of
// the kill: each write applied once, all 10 listed applied.
func TestContinuedAfterServeKilled(t *testing.T) {
	l := startLedger(t, true)
	shared := t.TempDir()
	env := []string{app.EnvSuspDir + "=" + filepath.Join(shared, "suspensions"), app.EnvMCPServers + `={"servers": [` + l.config("ledger") + `]}`}
	cache := []string{"--cache-dir", filepath.Join(shared, "cache")}
	first := startServe(t, env, cache...)
	j := journal.NewFile(filepath.Join(shared, "suspensions", "journal"), journal.Options{})
	prefix := fmt.Sprintf("serve-cont-%d-", time.Now().UnixNano())
	d := decodeDoc(t, post(t, context.Background(), first.base+"/execute",
		fmt.Sprintf(`{"code": %q, "async": true, "timeout_ms": 60000}`, ledgerScript("ledger", prefix, 1500))))
	if d.Status != "running" {
		t.Fatalf("POST async: %+v", d)
	}
	waitApplied(t, j, d.ExecutionID, 4)
	if err := first.proc.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	<-first.exited
	second := startServe(t, env, cache...)
	doc := waitEnded(t, second.base, d.ExecutionID, 90*time.Second-time.Since(killed))
	t.Logf("continued and completed %v after the kill", time.Since(killed).Round(time.Millisecond))
	if doc.Status != "completed" || string(doc.Result) != `["ok","ok","ok","ok","ok","ok","ok","ok","ok","ok"]` {
		t.Fatalf("document: %s %s %+v", doc.Status, doc.Result, doc.Error)
	}
	checkLedger(t, l, prefix, d.ExecutionID, doc, 0)
}

// TestSIGKILLAtManyPointsOfRuns kills `pml serve` (SIGKILL) at random
// points, 20 of them while it runs one of its asynchronous executions of 10 writes between reads
// against a server that honours Idempotency-Key; each time a new `pml
// serve` over the same stores takes over what the last one ran (a 1 s
// lease, a sweep every 300 ms). After every kill: no write was applied
// twice, every write the server applied is in the journal under its key
// (applied, or pending for the one in flight), and every write the journal
// says applied the server applied. At the end every execution has ended:
// completed with every write applied once and listed applied, or failed
// with its reason.
func TestSIGKILLAtManyPointsOfRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("starts dozens of servers")
	}
	l := startLedger(t, true)
	shared := t.TempDir()
	env := []string{app.EnvSuspDir + "=" + filepath.Join(shared, "suspensions"), app.EnvMCPServers + `={"servers": [` + l.config("ledger") + `]}`,
		app.EnvRunLease + "=1s", app.EnvSweepEvery + "=300ms", app.EnvLogLevel + "=warn"}
	cache := []string{"--cache-dir", filepath.Join(shared, "cache")}
	j := journal.NewFile(filepath.Join(shared, "suspensions", "journal"), journal.Options{})
	prefixes := map[string]string{} // execution id → its keys' prefix
	var latest string
	srv := startServe(t, env, cache...)
	// Killed at random, until 20 of the kills found an execution running.
	kills, midRun := 0, 0
	for point := 0; midRun < 20; point++ {
		if point == 80 {
			t.Fatalf("only %d of %d kills found an execution running", midRun, point)
		}
		if latest == "" || !runningDoc(srv.base, latest) {
			prefix := fmt.Sprintf("many-%d-%d-", point, time.Now().UnixNano())
			d := decodeDoc(t, post(t, context.Background(), srv.base+"/execute",
				fmt.Sprintf(`{"code": %q, "async": true, "timeout_ms": 60000}`, ledgerScript("ledger", prefix, 300))))
			if d.Status != "running" {
				t.Fatalf("POST async: %+v", d)
			}
			latest, prefixes[d.ExecutionID] = d.ExecutionID, prefix
		}
		time.Sleep(time.Duration(100+rand.N(2400)) * time.Millisecond)
		if runningDoc(srv.base, latest) {
			midRun++
		}
		if err := srv.proc.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-srv.exited
		kills++
		checkKillInvariants(t, l, j, prefixes, point)
		srv = startServe(t, env, cache...)
	}
	completed, failed := 0, 0
	for id, prefix := range prefixes {
		doc := waitEnded(t, srv.base, id, 90*time.Second)
		switch {
		case doc.Status == "completed" && string(doc.Result) == `["ok","ok","ok","ok","ok","ok","ok","ok","ok","ok"]`:
			completed++
			checkLedger(t, l, prefix, id, doc, 0)
		case doc.Status == "failed" && doc.Error != nil && doc.Error.Message != "":
			failed++
			t.Logf("%s failed: %s", id, doc.Error.Message)
		default:
			t.Errorf("%s ended %s %s %+v", id, doc.Status, doc.Result, doc.Error)
		}
	}
	checkKillInvariants(t, l, j, prefixes, kills)
	t.Logf("%d kills (%d with an execution running) over %d executions: %d completed, %d failed", kills, midRun, len(prefixes), completed, failed)
}

// runningDoc reports whether execution id reads running on base.
func runningDoc(base, id string) bool {
	resp, err := http.Get(base + "/executions/" + id)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var d contDoc
	return json.NewDecoder(resp.Body).Decode(&d) == nil && d.Status == "running"
}

// checkKillInvariants holds the server and the journal to each other
// after a kill: nothing applied twice, nothing applied missing from the
// record, nothing recorded applied that the server never applied, and at
// most one write of an execution pending.
func checkKillInvariants(t *testing.T, l *writeLedger, j journal.Reader, prefixes map[string]string, point int) {
	t.Helper()
	if twice := l.twice(); len(twice) > 0 {
		t.Fatalf("point %d: applied more than once: %v", point, twice)
	}
	recorded := map[string]journal.Entry{}
	for id := range prefixes {
		entries, err := j.List(context.Background(), id)
		if err != nil {
			t.Fatalf("point %d: %v", point, err)
		}
		pending := 0
		for _, e := range entries {
			recorded[e.Key] = e
			switch e.Status {
			case journal.Applied:
				if !l.appliedIdem(e.Key) {
					t.Fatalf("point %d: %s call %d is journalled applied, and the server never applied it", point, id, e.CallID)
				}
			case journal.Pending:
				pending++
			}
		}
		if pending > 1 {
			t.Fatalf("point %d: %s has %d writes pending", point, id, pending)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for idem, key := range l.keys {
		e, ok := recorded[idem]
		if !ok || (e.Status != journal.Applied && e.Status != journal.Pending) {
			t.Fatalf("point %d: the server applied %s (key %s) and the journal has %+v: lost from the record", point, key, idem, e)
		}
	}
}
