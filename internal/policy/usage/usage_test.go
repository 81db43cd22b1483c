package usage_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/dynamotable"
	"github.com/pml-sandbox/pml/internal/policy"
	"github.com/pml-sandbox/pml/internal/policy/usage"
	"github.com/pml-sandbox/pml/internal/testutil/cputime"
	"github.com/pml-sandbox/pml/internal/testutil/dynamolocal"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv("PML_USAGE_CHILD"); dir != "" {
		os.Exit(child(dir))
	}
	os.Exit(dynamolocal.Run(m))
}

// window is the current hour's: a count whose window has passed is
// swept away.
var window = time.Now().Truncate(time.Hour)

func key(principal string) policy.CountKey {
	return policy.CountKey{Policy: "deletes", Measure: "calls", Principal: principal, Tool: "pets:deletePet",
		Window: window, Expires: window.Add(2 * time.Hour)}
}

// counters are the real counters under test, each opened twice: two
// "containers" sharing one store.
func counters(t *testing.T) map[string][2]policy.Counter {
	t.Helper()
	dir := t.TempDir()
	a, err := usage.NewDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := usage.NewDir(dir)
	out := map[string][2]policy.Counter{"dir": {a, b}}
	if os.Getenv("PML_SKIP_DYNAMODB") == "" {
		db := dynamolocal.Start(t).Client()
		table := dynamolocal.TableName(t)
		if err := dynamotable.Create(context.Background(), db, table, "ttl"); err != nil {
			t.Fatal(err)
		}
		out["dynamo"] = [2]policy.Counter{usage.NewDynamo(db, table), usage.NewDynamo(db, table)}
	}
	return out
}

// TestNeverPastTheLimit: two containers adding at once, 80 attempts
// against a limit of 37: exactly 37 are added, whatever the interleaving.
func TestNeverPastTheLimit(t *testing.T) {
	for name, cs := range counters(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			var wg sync.WaitGroup
			var mu sync.Mutex
			added := 0
			for i := range 8 {
				wg.Go(func() {
					for range 10 {
						_, ok, err := cs[i%2].Add(ctx, key("alice"), 1, 37)
						if err != nil {
							t.Error(err)
							return
						}
						if ok {
							mu.Lock()
							added++
							mu.Unlock()
						}
					}
				})
			}
			wg.Wait()
			if added != 37 {
				t.Fatalf("added %d times; the limit is 37", added)
			}
			if n, ok, _ := cs[0].Add(ctx, key("alice"), 1, 37); ok || n != 37 {
				t.Fatalf("one more: count %d, added %v", n, ok)
			}
			// Another principal's count is its own; a refund and an
			// unconditional add (an approved call) always go in.
			if n, ok, _ := cs[1].Add(ctx, key("bob"), 5, 37); !ok || n != 5 {
				t.Fatalf("bob: %d %v", n, ok)
			}
			if n, ok, _ := cs[1].Add(ctx, key("alice"), -1, -1); !ok || n != 36 {
				t.Fatalf("refund: %d %v", n, ok)
			}
			if n, ok, _ := cs[0].Add(ctx, key("alice"), 10, -1); !ok || n != 46 {
				t.Fatalf("unconditional: %d %v", n, ok)
			}
			if _, ok, _ := cs[0].Add(ctx, key("carol"), 38, 37); ok {
				t.Fatal("a single add past the limit went in")
			}
		})
	}
}

// TestDirAcrossProcesses: processes sharing the directory (pml serve and
// pml run beside it) count alike: three child processes add at once.
func TestDirAcrossProcesses(t *testing.T) {
	dir := t.TempDir()
	var cmds []*exec.Cmd
	for range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "PML_USAGE_CHILD="+dir)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	added := 0
	for _, cmd := range cmds {
		err := cmd.Wait()
		if ee, ok := err.(*exec.ExitError); ok {
			added += ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if added != 25 {
		t.Fatalf("three processes added %d times under a limit of 25", added)
	}
}

// child adds 20 times against a limit of 25 and exits with how many went
// in.
func child(dir string) int {
	c, err := usage.NewDir(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 100
	}
	n := 0
	for range 20 {
		if _, ok, err := c.Add(context.Background(), key("alice"), 1, 25); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 100
		} else if ok {
			n++
		}
	}
	return n
}

// BenchmarkAdd is the counter's cost per limited call: one conditional
// update (a file under a lock, written and synced, and its directory
// synced; a DynamoDB Local UpdateItem).
func BenchmarkAdd(b *testing.B) {
	dir := b.TempDir()
	d, _ := usage.NewDir(dir)
	run := func(b *testing.B, c policy.Counter) {
		ctx := context.Background()
		i := 0
		cpu0 := cputime.Process()
		for b.Loop() {
			i++
			if _, _, err := c.Add(ctx, key("p"+strconv.Itoa(i%100)), 1, 1<<40); err != nil {
				b.Fatal(err)
			}
		}
		// The client's CPU time: the rest is the store's (and, for
		// DynamoDB Local, a JVM on the same two cores).
		b.ReportMetric(float64((cputime.Process()-cpu0).Nanoseconds())/float64(b.N)/1000, "cpu-µs/op")
	}
	b.Run("dir", func(b *testing.B) { run(b, d) })
	if os.Getenv("PML_SKIP_DYNAMODB") != "" {
		return
	}
	b.Run("dynamodb-local", func(b *testing.B) {
		db := dynamolocal.Start(b).Client()
		table := dynamolocal.TableName(b)
		_ = dynamotable.Create(context.Background(), db, table, "ttl")
		run(b, usage.NewDynamo(db, table))
	})
}
