package journal_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/journal"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/testutil/dynamolocal"
)

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) != "" {
		crashChild()
		return
	}
	os.Exit(dynamolocal.Run(m))
}

// stores are the three stores, each opened fresh per test.
func stores(t *testing.T) map[string]journal.Store {
	t.Helper()
	return map[string]journal.Store{
		"memory": journal.NewMemory(),
		"file":   journal.NewFile(t.TempDir(), journal.Options{}),
		"dynamo": dynamoStore(t),
	}
}

func dynamoStore(t *testing.T) *journal.Dynamo {
	t.Helper()
	db := dynamolocal.Start(t).Client()
	table := dynamolocal.TableName(t)
	// The suspensions table, as suspend.CreateTable and the template
	// declare it: the journal shares it.
	if err := suspend.CreateTable(context.Background(), db, table); err != nil {
		t.Fatal(err)
	}
	return journal.NewDynamo(db, table, journal.Options{})
}

func intent(exec string, call int) *journal.Entry {
	args := json.RawMessage(fmt.Sprintf(`{"key":"k%d","value":%d}`, call, call))
	return &journal.Entry{ExecutionID: exec, CallID: call, Principal: "alice", Server: "kv", Tool: "kv_set",
		Key: journal.Key(exec, call), Args: args, Honours: true}
}

// TestStoreContract holds every store to the same conditions: an intent
// is written once, an outcome once, an attempt counted once, and List
// folds them in call order.
func TestStoreContract(t *testing.T) {
	ctx := context.Background()
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			exec := "exec-" + strings.ReplaceAll(name, "/", "-")
			if got, err := s.List(ctx, exec); err != nil || len(got) != 0 {
				t.Fatalf("List of a new execution: %v %v", got, err)
			}
			for call := 1; call <= 3; call++ {
				if old, err := s.Intend(ctx, intent(exec, call)); err != nil || old != nil {
					t.Fatalf("Intend %d: %v %v", call, old, err)
				}
			}
			// The second intent of a call writes nothing and answers the
			// first, as stored.
			again := intent(exec, 2)
			again.Server = "other"
			old, err := s.Intend(ctx, again)
			if err != nil || old == nil || old.Server != "kv" || old.Status != journal.Pending || old.Attempts != 1 || old.Key != journal.Key(exec, 2) {
				t.Fatalf("second Intend: %+v %v", old, err)
			}
			if err := s.Settle(ctx, exec, 1, journal.Outcome{Status: journal.Applied, Result: json.RawMessage(`{"stored":true}`)}); err != nil {
				t.Fatal(err)
			}
			if err := s.Settle(ctx, exec, 1, journal.Outcome{Status: journal.Failed}); !errors.Is(err, journal.ErrConflict) {
				t.Fatalf("settling a settled entry: %v", err)
			}
			if err := s.Settle(ctx, exec, 9, journal.Outcome{Status: journal.Applied}); !errors.Is(err, journal.ErrNotFound) {
				t.Fatalf("settling no entry: %v", err)
			}
			if err := s.Settle(ctx, exec, 3, journal.Outcome{Status: journal.Pending}); err == nil {
				t.Fatal("pending accepted as an outcome")
			}
			// Attempts: counted once at a given attempt, never on a
			// settled entry.
			if err := s.Resend(ctx, exec, 2, 1); err != nil {
				t.Fatal(err)
			}
			if err := s.Resend(ctx, exec, 2, 1); !errors.Is(err, journal.ErrConflict) {
				t.Fatalf("the same attempt counted twice: %v", err)
			}
			if err := s.Resend(ctx, exec, 1, 1); !errors.Is(err, journal.ErrConflict) {
				t.Fatalf("an attempt at a settled entry: %v", err)
			}
			if err := s.Resend(ctx, exec, 7, 1); !errors.Is(err, journal.ErrNotFound) {
				t.Fatalf("an attempt at no entry: %v", err)
			}
			ferr := fault.New(fault.ToolError, "no such key").WithTool("kv:kv_set")
			if err := s.Settle(ctx, exec, 2, journal.Outcome{Status: journal.Failed, Error: ferr}); err != nil {
				t.Fatal(err)
			}
			// A compensation is claimed only from what its claimer read:
			// of two rollbacks, one claims; a claim is settled, or
			// released, only by its own rollback.
			claim := &journal.Compensation{Status: "running", ExecutionID: "rollback-1", CallID: 4, Server: "kv", Tool: "kv_delete"}
			if err := s.SetCompensation(ctx, exec, 1, nil, claim); err != nil {
				t.Fatal(err)
			}
			if err := s.SetCompensation(ctx, exec, 1, nil, &journal.Compensation{Status: "running", ExecutionID: "rollback-2", CallID: 1}); !errors.Is(err, journal.ErrConflict) {
				t.Fatalf("a second claim: %v", err)
			}
			other := &journal.Compensation{Status: "running", ExecutionID: "rollback-2", CallID: 4}
			if err := s.SetCompensation(ctx, exec, 1, other, nil); !errors.Is(err, journal.ErrConflict) {
				t.Fatalf("another rollback's release: %v", err)
			}
			if err := s.SetCompensation(ctx, exec, 3, nil, claim); err != nil {
				t.Fatal(err)
			}
			if err := s.SetCompensation(ctx, exec, 3, claim, nil); err != nil {
				t.Fatalf("releasing a claim: %v", err)
			}
			done := &journal.Compensation{Status: "compensated", ExecutionID: "rollback-1", CallID: 4}
			if err := s.SetCompensation(ctx, exec, 1, claim, done); err != nil {
				t.Fatal(err)
			}
			if err := s.SetCompensation(ctx, exec, 1, claim, done); !errors.Is(err, journal.ErrConflict) {
				t.Fatalf("a claim settled twice: %v", err)
			}
			if err := s.SetCompensation(ctx, exec, 8, nil, claim); !errors.Is(err, journal.ErrNotFound) {
				t.Fatalf("a compensation of no entry: %v", err)
			}

			got, err := s.List(ctx, exec)
			if err != nil || len(got) != 3 {
				t.Fatalf("List: %+v %v", got, err)
			}
			e1, e2, e3 := got[0], got[1], got[2]
			if e1.CallID != 1 || e1.Status != journal.Applied || string(e1.Result) != `{"stored":true}` || e1.ResultBytes != 15 || e1.SettledAt.IsZero() ||
				e1.Compensation == nil || e1.Compensation.ExecutionID != "rollback-1" || e1.Compensation.Status != "compensated" || e1.Principal != "alice" || !e1.Honours {
				t.Errorf("entry 1: %+v", e1)
			}
			if string(e1.Args) != `{"key":"k1","value":1}` || e1.ArgsDigest != journal.Digest(e1.Args) || e1.ArgsBytes != len(e1.Args) {
				t.Errorf("entry 1's arguments: %s %s %d", e1.Args, e1.ArgsDigest, e1.ArgsBytes)
			}
			if e2.Status != journal.Failed || e2.Attempts != 2 || e2.Error == nil || e2.Error.Code != fault.ToolError || e2.Error.Message != "no such key" {
				t.Errorf("entry 2: %+v %+v", e2, e2.Error)
			}
			if e3.Status != journal.Pending || e3.Attempts != 1 || e3.IntendedAt.IsZero() || e3.Compensation != nil {
				t.Errorf("entry 3: %+v", e3)
			}
			// A user reads pending as unknown once the run has ended.
			if effs := journal.Effects(got, true); effs[2].Status != "unknown" || effs[2].Error == nil || effs[2].Error.Code != fault.OutcomeUnknown {
				t.Errorf("ended: %+v", effs[2])
			}
			if effs := journal.Effects(got, false); effs[2].Status != "pending" || effs[0].Status != "applied" || effs[0].Key != journal.Key(exec, 1) {
				t.Errorf("running: %+v", effs)
			}
			// Another execution's journal is its own.
			if other, err := s.List(ctx, exec+"-other"); err != nil || len(other) != 0 {
				t.Errorf("another execution: %+v %v", other, err)
			}
		})
	}
}

// TestConcurrentIntent: of many writers of one call's intent at once (two
// runners of one execution), exactly one writes it; the others get its
// entry.
func TestConcurrentIntent(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			if name == "file" {
				// Two stores over one directory: two processes' worth of
				// state, kept honest by the flock alone.
				s = journal.NewFile(dir, journal.Options{})
			}
			other := s
			if name == "file" {
				other = journal.NewFile(dir, journal.Options{})
			}
			var wg sync.WaitGroup
			var mu sync.Mutex
			wrote, answered := 0, 0
			for i := range 16 {
				st := s
				if i%2 == 1 {
					st = other
				}
				wg.Go(func() {
					e := intent("race", 1)
					e.Tool = fmt.Sprintf("writer-%d", i)
					old, err := st.Intend(ctx, e)
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err != nil:
						t.Error(err)
					case old == nil:
						wrote++
					default:
						answered++
					}
				})
			}
			wg.Wait()
			if wrote != 1 || answered != 15 {
				t.Fatalf("%d wrote the intent, %d were answered", wrote, answered)
			}
			// Of concurrent attempts at the pending entry, one counts.
			won := 0
			for range 8 {
				wg.Go(func() {
					if err := other.Resend(ctx, "race", 1, 1); err == nil {
						mu.Lock()
						won++
						mu.Unlock()
					} else if !errors.Is(err, journal.ErrConflict) {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			if won != 1 {
				t.Fatalf("%d resends won", won)
			}
			// Of concurrent rollbacks claiming the entry's compensation,
			// one claims it.
			claimed := 0
			for i := range 8 {
				st := s
				if i%2 == 1 {
					st = other
				}
				wg.Go(func() {
					c := &journal.Compensation{Status: "running", ExecutionID: fmt.Sprintf("rollback-%d", i), CallID: 1}
					if err := st.SetCompensation(ctx, "race", 1, nil, c); err == nil {
						mu.Lock()
						claimed++
						mu.Unlock()
					} else if !errors.Is(err, journal.ErrConflict) {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			if claimed != 1 {
				t.Fatalf("%d rollbacks claimed the compensation", claimed)
			}
		})
	}
}

// TestBounds: arguments and results past their caps are kept as digest
// and size only, never a prefix; an error's message is cut.
func TestBounds(t *testing.T) {
	ctx := context.Background()
	big := json.RawMessage(`"` + strings.Repeat("x", journal.MaxArgsBytes) + `"`)
	huge := json.RawMessage(`"` + strings.Repeat("y", journal.MaxResultBytes) + `"`)
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			e := intent("bounds", 1)
			e.Args = big
			if _, err := s.Intend(ctx, e); err != nil {
				t.Fatal(err)
			}
			if err := s.Settle(ctx, "bounds", 1, journal.Outcome{Status: journal.Applied, Result: huge}); err != nil {
				t.Fatal(err)
			}
			e2 := intent("bounds", 2)
			if _, err := s.Intend(ctx, e2); err != nil {
				t.Fatal(err)
			}
			long := fault.New(fault.Timeout, "%s", strings.Repeat("é", journal.MaxErrorBytes))
			if err := s.Settle(ctx, "bounds", 2, journal.Outcome{Status: journal.Unknown, Error: long}); err != nil {
				t.Fatal(err)
			}
			got, err := s.List(ctx, "bounds")
			if err != nil || len(got) != 2 {
				t.Fatal(got, err)
			}
			if got[0].Args != nil || got[0].ArgsBytes != len(big) || got[0].ArgsDigest != journal.Digest(big) {
				t.Errorf("over-cap arguments: %d bytes kept, %d said, digest %s", len(got[0].Args), got[0].ArgsBytes, got[0].ArgsDigest)
			}
			if got[0].Result != nil || got[0].ResultBytes != len(huge) || got[0].Status != journal.Applied {
				t.Errorf("over-cap result: %d bytes kept, %d said", len(got[0].Result), got[0].ResultBytes)
			}
			if m := got[1].Error.Message; len(m) > journal.MaxErrorBytes+len("…") || !strings.HasSuffix(m, "…") || !json.Valid([]byte(`"`+m+`"`)) {
				t.Errorf("error message of %d bytes", len(m))
			}
		})
	}
}

// TestKey: a key is the same for the same execution and call, different
// for any other, and shaped for a header.
func TestKey(t *testing.T) {
	k := journal.Key("exec-1", 7)
	if k != journal.Key("exec-1", 7) {
		t.Fatal("not stable")
	}
	if !regexp.MustCompile(`^pml-[a-z2-7]{26}$`).MatchString(k) {
		t.Fatalf("key %q", k)
	}
	seen := map[string]string{}
	for _, exec := range []string{"exec-1", "exec-17", "exec-", "exec-11"} {
		for call := range 20 {
			key := journal.Key(exec, call)
			who := fmt.Sprintf("%s/%d", exec, call)
			if prev, dup := seen[key]; dup {
				t.Fatalf("%s and %s share %s", prev, who, key)
			}
			seen[key] = who
		}
	}
	// The separator keeps ("exec-1", 17) from ("exec-11", 7).
	if journal.Key("exec-1", 17) == journal.Key("exec-11", 7) {
		t.Fatal("ambiguous")
	}
}

// TestFileTornLine: a line cut short by a writer that died is never
// folded, and the next writer cuts it away before appending, so the file
// reads whole after.
func TestFileTornLine(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := journal.NewFile(dir, journal.Options{})
	for call := 1; call <= 2; call++ {
		if _, err := s.Intend(ctx, intent("torn", call)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Settle(ctx, "torn", 1, journal.Outcome{Status: journal.Applied, Result: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "torn.jsonl")
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// A dead writer's half line: the settle of call 2.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"op":"settle","call_id":2,"status":"app`); err != nil {
		t.Fatal(err)
	}
	f.Close()
	// A fresh reader (another process) folds the whole lines only.
	got, err := journal.NewFile(dir, journal.Options{}).List(ctx, "torn")
	if err != nil || len(got) != 2 || got[0].Status != journal.Applied || got[1].Status != journal.Pending {
		t.Fatalf("List over a torn line: %+v %v", got, err)
	}
	// The next writer cuts it and appends a whole line.
	w := journal.NewFile(dir, journal.Options{})
	if err := w.Settle(ctx, "torn", 2, journal.Outcome{Status: journal.Failed, Error: fault.New(fault.ToolError, "no")}); err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(after, whole) || bytes.Contains(after, []byte(`"app{`)) || !bytes.HasSuffix(after, []byte("\n")) {
		t.Fatalf("the file after the next write:\n%s", after)
	}
	got, err = journal.NewFile(dir, journal.Options{}).List(ctx, "torn")
	if err != nil || len(got) != 2 || got[1].Status != journal.Failed {
		t.Fatalf("List after: %+v %v", got, err)
	}
	// A line that is not JSON at all (damage) is skipped, not fatal.
	f, _ = os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	_, _ = f.WriteString("garbage\n")
	f.Close()
	if _, err := journal.NewFile(dir, journal.Options{}).Intend(ctx, intent("torn", 3)); err != nil {
		t.Fatal(err)
	}
	if got, err := journal.NewFile(dir, journal.Options{}).List(ctx, "torn"); err != nil || len(got) != 3 {
		t.Fatalf("List past a damaged line: %+v %v", got, err)
	}
}

// TestFileSweep: a file written last more than the TTL ago goes when a new
// one is made; a recent one stays.
func TestFileSweep(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	now := time.Now()
	clock := func() time.Time { return now }
	s := journal.NewFile(dir, journal.Options{TTL: time.Hour, Now: clock})
	for _, id := range []string{"old", "recent"} {
		if _, err := s.Intend(ctx, intent(id, 1)); err != nil {
			t.Fatal(err)
		}
	}
	past := now.Add(-2 * time.Hour)
	if err := os.Chtimes(filepath.Join(dir, "old.jsonl"), past, past); err != nil {
		t.Fatal(err)
	}
	// A new store (another process, or the next hour) sweeps on its first
	// new file.
	s2 := journal.NewFile(dir, journal.Options{TTL: time.Hour, Now: clock})
	if _, err := s2.Intend(ctx, intent("new", 1)); err != nil {
		t.Fatal(err)
	}
	if got, _ := s2.List(ctx, "old"); len(got) != 0 {
		t.Errorf("the old journal was kept: %+v", got)
	}
	if got, _ := s2.List(ctx, "recent"); len(got) != 1 {
		t.Errorf("the recent journal: %+v", got)
	}
}

// TestInvalidIDs: an id that cannot be a file name or key is refused on
// write and empty on read.
func TestInvalidIDs(t *testing.T) {
	ctx := context.Background()
	for name, s := range stores(t) {
		for _, id := range []string{"", "../x", ".hidden", "a/b", strings.Repeat("a", 200)} {
			if _, err := s.Intend(ctx, intent(id, 1)); err == nil {
				t.Errorf("%s: intent of %q accepted", name, id)
			}
			if got, err := s.List(ctx, id); err != nil || len(got) != 0 {
				t.Errorf("%s: List(%q) = %v %v", name, id, got, err)
			}
		}
		if _, err := s.Intend(ctx, intent("x", 0)); err == nil {
			t.Errorf("%s: call id 0 accepted", name)
		}
	}
}
