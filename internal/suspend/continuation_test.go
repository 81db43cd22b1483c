package suspend_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/testutil/dynamolocal"
)

// claimRun creates and claims run id, leased for lease.
func claimRun(t *testing.T, runs suspend.Runs, id string, lease time.Duration) *suspend.Run {
	t.Helper()
	ctx := context.Background()
	if err := runs.Create(ctx, &suspend.Run{ID: id, Principal: "p", Body: []byte(`{"code":"return 1"}`)}); err != nil {
		t.Fatal(err)
	}
	r, err := runs.Claim(ctx, id, 1, lease)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestRunHeartbeatAndCheckpoint: the runner's heartbeat keeps its claim
// past the first lease; its checkpoints are kept (large ones chunked); a
// lapsed run is taken over once, by one of many, with its request and last
// checkpoint; the runner it was taken from can then neither renew, nor
// checkpoint, nor end it.
func TestRunHeartbeatAndCheckpoint(t *testing.T) {
	forEachRuns(t, func(t *testing.T, p runsPlace, clk *clock) {
		ctx := context.Background()
		runs := p.runs(suspend.Options{Now: clk.Now})
		first := claimRun(t, runs, "ex_c", 30*time.Second)
		clk.Add(20 * time.Second)
		if cancel, err := runs.Renew(ctx, "ex_c", first.Runner, 30*time.Second); err != nil || cancel {
			t.Fatalf("renew: %v %v", cancel, err)
		}
		clk.Add(20 * time.Second) // 40 s after the claim, 20 after the beat
		if r, _ := runs.Load(ctx, "ex_c"); r.Lapsed(clk.Now()) {
			t.Fatal("lapsed though renewed")
		}
		if _, err := runs.Takeover(ctx, "ex_c", first.Version+1, time.Minute); !errors.Is(err, suspend.ErrConflict) {
			t.Fatalf("a live run taken over: %v", err)
		}
		big := bytes.Repeat([]byte("c"), 900<<10)
		if err := runs.Checkpoint(ctx, "ex_c", first.Runner, []byte("one")); err != nil {
			t.Fatal(err)
		}
		if err := runs.Checkpoint(ctx, "ex_c", first.Runner, big); err != nil {
			t.Fatal(err)
		}
		if err := runs.Checkpoint(ctx, "ex_c", "someone else", []byte("x")); !errors.Is(err, suspend.ErrConflict) {
			t.Fatalf("another's checkpoint: %v", err)
		}
		if err := runs.Checkpoint(ctx, "ex_c", first.Runner, make([]byte, suspend.MaxCheckpointBytes+1)); !errors.Is(err, suspend.ErrInvalid) {
			t.Fatalf("an oversized checkpoint: %v", err)
		}
		// The runner dies: its lease lapses, and of many takeovers one wins.
		clk.Add(31 * time.Second)
		lapsed, err := runs.Load(ctx, "ex_c")
		if err != nil || !lapsed.Lapsed(clk.Now()) || !lapsed.HasCheckpoint || lapsed.Checkpoint != nil {
			t.Fatalf("lapsed: %+v %v", lapsed, err)
		}
		var mu sync.Mutex
		var won []*suspend.Run
		var wg sync.WaitGroup
		for range 6 {
			wg.Go(func() {
				r, err := p.runs(suspend.Options{Now: clk.Now}).Takeover(ctx, "ex_c", lapsed.Version, time.Minute)
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					won = append(won, r)
				} else if !errors.Is(err, suspend.ErrConflict) {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if len(won) != 1 {
			t.Fatalf("%d takeovers won", len(won))
		}
		second := won[0]
		if second.Runner == first.Runner || second.Takeovers != 1 || !bytes.Equal(second.Checkpoint, big) || string(second.Body) != `{"code":"return 1"}` {
			t.Fatalf("taken over: runner %q takeovers %d checkpoint %d bytes body %q", second.Runner, second.Takeovers, len(second.Checkpoint), second.Body)
		}
		// The first runner is fenced off.
		if _, err := runs.Renew(ctx, "ex_c", first.Runner, time.Minute); !errors.Is(err, suspend.ErrConflict) {
			t.Fatalf("the old runner renewed: %v", err)
		}
		if err := runs.Checkpoint(ctx, "ex_c", first.Runner, []byte("late")); !errors.Is(err, suspend.ErrConflict) {
			t.Fatalf("the old runner checkpointed: %v", err)
		}
		if err := runs.Finish(ctx, "ex_c", first.Runner, suspend.RunCompleted, []byte("{}"), time.Time{}); !errors.Is(err, suspend.ErrConflict) {
			t.Fatalf("the old runner finished: %v", err)
		}
		// A checkpoint of the new runner resets the count of takeovers.
		if err := runs.Checkpoint(ctx, "ex_c", second.Runner, []byte("two")); err != nil {
			t.Fatal(err)
		}
		if r, _ := runs.Load(ctx, "ex_c"); r.Takeovers != 0 {
			t.Fatalf("takeovers after a checkpoint: %d", r.Takeovers)
		}
		if err := runs.Finish(ctx, "ex_c", second.Runner, suspend.RunCompleted, []byte(`{"ok":true}`), time.Time{}); err != nil {
			t.Fatal(err)
		}
		if r, err := runs.Load(ctx, "ex_c"); err != nil || r.State != suspend.RunCompleted || r.HasCheckpoint {
			t.Fatalf("finished: %+v %v", r, err)
		}
	})
}

// TestRunNotContinuedForEver: a run taken over MaxTakeovers times without
// a checkpoint in between, or one whose checkpoints were dropped, is
// failed rather than taken over again.
func TestRunNotContinuedForEver(t *testing.T) {
	forEachRuns(t, func(t *testing.T, p runsPlace, clk *clock) {
		ctx := context.Background()
		runs := p.runs(suspend.Options{Now: clk.Now})
		r := claimRun(t, runs, "ex_poison", time.Second)
		for i := range suspend.MaxTakeovers {
			clk.Add(2 * time.Second)
			next, err := runs.Takeover(ctx, "ex_poison", r.Version, time.Second)
			if err != nil {
				t.Fatalf("takeover %d: %v", i+1, err)
			}
			r = next
		}
		clk.Add(2 * time.Second)
		_, err := runs.Takeover(ctx, "ex_poison", r.Version, time.Second)
		wantState(t, err, suspend.Failed)
		if got, _ := runs.Load(ctx, "ex_poison"); got.State != suspend.Failed || got.FailureCode != suspend.CodeRunAbandoned {
			t.Fatalf("after too many takeovers: %+v", got)
		}

		big := claimRun(t, runs, "ex_big", time.Second)
		if err := runs.Checkpoint(ctx, "ex_big", big.Runner, []byte("small")); err != nil {
			t.Fatal(err)
		}
		if err := runs.DropCheckpoint(ctx, "ex_big", big.Runner, "checkpoint_bytes"); err != nil {
			t.Fatal(err)
		}
		clk.Add(2 * time.Second)
		got, _ := runs.Load(ctx, "ex_big")
		if got.State != suspend.Failed || got.FailureCode != suspend.CodeRunAbandoned {
			t.Fatalf("a lapsed run that cannot be continued: %+v", got)
		}
	})
}

// TestLapsedListed: the sweeper's list holds the running runs whose lease
// lapsed, not the live ones, nor the ended ones.
func TestLapsedListed(t *testing.T) {
	forEachRuns(t, func(t *testing.T, p runsPlace, clk *clock) {
		ctx := context.Background()
		runs := p.runs(suspend.Options{Now: clk.Now})
		dead := claimRun(t, runs, "ex_dead", 10*time.Second)
		live := claimRun(t, runs, "ex_live", 10*time.Second)
		ended := claimRun(t, runs, "ex_ended", 10*time.Second)
		if err := runs.Create(ctx, &suspend.Run{ID: "ex_queued", Body: []byte("r")}); err != nil {
			t.Fatal(err)
		}
		if l, err := runs.Lapsed(ctx, 10); err != nil || len(l) != 0 {
			t.Fatalf("lapsed at once: %+v %v", l, err)
		}
		if err := runs.Finish(ctx, "ex_ended", ended.Runner, suspend.RunCompleted, []byte("{}"), time.Time{}); err != nil {
			t.Fatal(err)
		}
		clk.Add(8 * time.Second)
		if _, err := runs.Renew(ctx, "ex_live", live.Runner, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if l, err := runs.Lapsed(ctx, 10); err != nil || len(l) != 0 {
			t.Fatalf("lapsed within the lease: %+v %v", l, err)
		}
		// The dead runner's lease lapses; the queued run has waited for
		// its launcher longer than StrandedAfter.
		clk.Add(3 * time.Second)
		l, err := runs.Lapsed(ctx, 10)
		ids := []string{}
		for _, r := range l {
			ids = append(ids, r.ID)
		}
		slices.Sort(ids)
		if err != nil || strings.Join(ids, ",") != dead.ID+",ex_queued" {
			t.Fatalf("lapsed: %v %v", ids, err)
		}
	})
}

// BenchmarkRunRenew is the heartbeat's cost: one renewal of a claim's
// lease (a read of the record and a write conditioned on its version),
// every Lease/3 (10 s by default) while a run lives.
//
//	go test -run '^$' -bench RunRenew -benchtime 500x ./internal/suspend/
func BenchmarkRunRenew(b *testing.B) {
	bench := func(b *testing.B, runs suspend.Runs) {
		ctx := context.Background()
		if err := runs.Create(ctx, &suspend.Run{ID: "ex_beat", Body: []byte(`{}`)}); err != nil {
			b.Fatal(err)
		}
		r, err := runs.Claim(ctx, "ex_beat", 1, time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		took := make([]time.Duration, 0, b.N)
		for b.Loop() {
			start := time.Now()
			if _, err := runs.Renew(ctx, "ex_beat", r.Runner, time.Minute); err != nil {
				b.Fatal(err)
			}
			took = append(took, time.Since(start))
		}
		slices.Sort(took)
		b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(took[len(took)*99/100].Microseconds()), "p99-µs")
	}
	b.Run("file", func(b *testing.B) { bench(b, suspend.NewFileRuns(b.TempDir(), suspend.Options{})) })
	b.Run("dynamodb-local", func(b *testing.B) {
		db := dynamolocal.Start(b).Client()
		table := dynamolocal.TableName(b)
		if err := suspend.CreateTable(context.Background(), db, table); err != nil {
			b.Fatal(err)
		}
		bench(b, suspend.NewDynamoRuns(db, table, suspend.Options{}))
	})
}
