package suspend_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/testutil/dynamolocal"
)

// runsPlace is one storage of runs, and of suspensions beside them (a
// table holds both; a directory each).
type runsPlace struct {
	runs  func(opts suspend.Options) suspend.Runs
	store func(opts suspend.Options) suspend.Store
}

// forEachRuns runs f once per kind of Runs store, on fresh storage.
func forEachRuns(t *testing.T, f func(t *testing.T, p runsPlace, clk *clock)) {
	t.Run("file", func(t *testing.T) {
		dir := t.TempDir()
		f(t, runsPlace{
			runs:  func(o suspend.Options) suspend.Runs { return suspend.NewFileRuns(filepath.Join(dir, "runs"), o) },
			store: func(o suspend.Options) suspend.Store { return suspend.NewFile(filepath.Join(dir, "suspensions"), o) },
		}, newClock())
	})
	t.Run("dynamodb", func(t *testing.T) {
		db := dynamolocal.Start(t).Client()
		table := dynamolocal.TableName(t)
		if err := suspend.CreateTable(context.Background(), db, table); err != nil {
			t.Fatal(err)
		}
		f(t, runsPlace{
			runs:  func(o suspend.Options) suspend.Runs { return suspend.NewDynamoRuns(db, table, o) },
			store: func(o suspend.Options) suspend.Store { return suspend.NewDynamo(db, table, o) },
		}, newClock())
	})
}

func wantState(t *testing.T, err error, state suspend.State) {
	t.Helper()
	var se *suspend.StateError
	if !errors.As(err, &se) || !errors.Is(err, suspend.ErrConflict) || se.State != state {
		t.Fatalf("got %v, want a conflict finding %s", err, state)
	}
}

// TestRunLifecycle: queued with its request, claimed once, ended by its
// runner with its document, whatever cancel requests came meanwhile.
func TestRunLifecycle(t *testing.T) {
	forEachRuns(t, func(t *testing.T, p runsPlace, clk *clock) {
		ctx := context.Background()
		runs := p.runs(suspend.Options{Now: clk.Now})
		r := &suspend.Run{ID: "ex_1", Principal: "jwt:i#s", Body: []byte(`{"code":"return 1"}`)}
		if err := runs.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
		if r.Version != 1 || r.State != suspend.RunQueued || !r.ExpiresAt.Equal(clk.Now().Add(suspend.DefaultTTL)) {
			t.Fatalf("created %+v", r)
		}
		if err := runs.Create(ctx, &suspend.Run{ID: "ex_1", Body: []byte("x")}); !errors.Is(err, suspend.ErrConflict) {
			t.Fatalf("a second create: %v", err)
		}
		got, err := runs.Load(ctx, "ex_1")
		if err != nil || got.State != suspend.RunQueued || string(got.Body) != `{"code":"return 1"}` || got.Principal != "jwt:i#s" {
			t.Fatalf("load %+v %v", got, err)
		}
		claimed, err := runs.Claim(ctx, "ex_1", 1, time.Minute)
		if err != nil || claimed.State != suspend.RunRunning || claimed.Version != 2 || claimed.Runner == "" || string(claimed.Body) != `{"code":"return 1"}` {
			t.Fatalf("claim %+v %v", claimed, err)
		}
		_, err = runs.Claim(ctx, "ex_1", 1, time.Minute)
		wantState(t, err, suspend.RunRunning)

		// A cancel request does not take the claim away.
		c, err := runs.RequestCancel(ctx, "ex_1")
		if err != nil || !c.CancelRequested || c.State != suspend.RunRunning {
			t.Fatalf("cancel request %+v %v", c, err)
		}
		if yes, err := runs.CancelRequested(ctx, "ex_1"); !yes || err != nil {
			t.Fatalf("cancel requested: %v %v", yes, err)
		}
		if err := runs.Finish(ctx, "ex_1", "someone else", suspend.RunCompleted, []byte("{}"), time.Time{}); !errors.Is(err, suspend.ErrConflict) {
			t.Fatalf("finishing another's claim: %v", err)
		}
		doc := bytes.Repeat([]byte("d"), 900<<10) // chunked in DynamoDB
		if err := runs.Finish(ctx, "ex_1", claimed.Runner, suspend.RunCancelled, doc, time.Time{}); err != nil {
			t.Fatal(err)
		}
		got, err = runs.Load(ctx, "ex_1")
		if err != nil || got.State != suspend.RunCancelled || !bytes.Equal(got.Body, doc) {
			t.Fatalf("ended: %v %v (%d bytes)", got.State, err, len(got.Body))
		}
		wantState(t, runs.Finish(ctx, "ex_1", claimed.Runner, suspend.RunCompleted, []byte("{}"), time.Time{}), suspend.RunCancelled)

		// Past its expiry it is gone.
		clk.Add(suspend.DefaultTTL + time.Second)
		if _, err := runs.Load(ctx, "ex_1"); !errors.Is(err, suspend.ErrExpired) {
			t.Fatalf("expired: %v", err)
		}
		if _, err := runs.Load(ctx, "ex_none"); !errors.Is(err, suspend.ErrNotFound) {
			t.Fatalf("unknown: %v", err)
		}
	})
}

// TestRunClaimedOnce: of many claims at once, from stores over the same
// storage (processes, containers), exactly one runs it.
func TestRunClaimedOnce(t *testing.T) {
	forEachRuns(t, func(t *testing.T, p runsPlace, clk *clock) {
		ctx := context.Background()
		if err := p.runs(suspend.Options{Now: clk.Now}).Create(ctx, &suspend.Run{ID: "ex_once", Body: []byte("req")}); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		won, lost := 0, 0
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				_, err := p.runs(suspend.Options{Now: clk.Now}).Claim(ctx, "ex_once", 1, time.Minute)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					won++
				case errors.Is(err, suspend.ErrConflict):
					lost++
				default:
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if won != 1 || lost != 7 {
			t.Fatalf("%d claims won, %d lost; want exactly one", won, lost)
		}
	})
}

// TestRunAbandoned: a claim past its lease waits to be taken over; one
// that nothing takes over within TakeoverWindow is failed and never handed
// out again, and its late runner cannot end it.
func TestRunAbandoned(t *testing.T) {
	forEachRuns(t, func(t *testing.T, p runsPlace, clk *clock) {
		ctx := context.Background()
		runs := p.runs(suspend.Options{Now: clk.Now})
		if err := runs.Create(ctx, &suspend.Run{ID: "ex_lost", Body: []byte("req")}); err != nil {
			t.Fatal(err)
		}
		claimed, err := runs.Claim(ctx, "ex_lost", 1, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		clk.Add(59 * time.Second)
		if r, err := runs.Load(ctx, "ex_lost"); err != nil || r.State != suspend.RunRunning || r.Lapsed(clk.Now()) {
			t.Fatalf("within its lease: %+v %v", r, err)
		}
		clk.Add(2 * time.Second)
		if r, err := runs.Load(ctx, "ex_lost"); err != nil || r.State != suspend.RunRunning || !r.Lapsed(clk.Now()) {
			t.Fatalf("past its lease, waiting to be taken over: %+v %v", r, err)
		}
		clk.Add(suspend.TakeoverWindow)
		r, err := runs.Load(ctx, "ex_lost")
		if err != nil || r.State != suspend.Failed || r.FailureCode != suspend.CodeRunAbandoned || r.Body != nil {
			t.Fatalf("past the takeover window: %+v %v", r, err)
		}
		wantState(t, runs.Finish(ctx, "ex_lost", claimed.Runner, suspend.RunCompleted, []byte("{}"), time.Time{}), suspend.Failed)
		_, err = runs.Claim(ctx, "ex_lost", r.Version, time.Minute)
		wantState(t, err, suspend.Failed)
	})
}

// TestRunSettle: a queued run is cancelled before anything claims it (and
// then nothing can), a suspended one moves on at its version only; a run
// and a suspension of the same execution are two records.
func TestRunSettle(t *testing.T) {
	forEachRuns(t, func(t *testing.T, p runsPlace, clk *clock) {
		ctx := context.Background()
		runs := p.runs(suspend.Options{Now: clk.Now})
		if err := runs.Create(ctx, &suspend.Run{ID: "ex_q", Body: []byte("req")}); err != nil {
			t.Fatal(err)
		}
		if r, err := runs.RequestCancel(ctx, "ex_q"); err != nil || r.State != suspend.RunQueued || r.CancelRequested {
			t.Fatalf("a cancel request on a queued run changes nothing: %+v %v", r, err)
		}
		wantState(t, runs.Settle(ctx, "ex_q", 7, suspend.RunCancelled, []byte("{}"), time.Time{}), suspend.RunQueued)
		if err := runs.Settle(ctx, "ex_q", 1, suspend.RunCancelled, []byte(`{"status":"cancelled"}`), time.Time{}); err != nil {
			t.Fatal(err)
		}
		_, err := runs.Claim(ctx, "ex_q", 1, time.Minute)
		wantState(t, err, suspend.RunCancelled)
		if err := runs.Settle(ctx, "ex_q", 2, suspend.RunQueued, nil, time.Time{}); !errors.Is(err, suspend.ErrInvalid) {
			t.Fatalf("settling back to queued: %v", err)
		}

		// Suspended by its runner, then settled when its resume ended.
		if err := runs.Create(ctx, &suspend.Run{ID: "ex_s", Body: []byte("req")}); err != nil {
			t.Fatal(err)
		}
		claimed, err := runs.Claim(ctx, "ex_s", 1, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		wantState(t, runs.Settle(ctx, "ex_s", claimed.Version, suspend.RunCompleted, []byte("{}"), time.Time{}), suspend.RunRunning)
		until := clk.Now().Add(time.Hour)
		if err := runs.Finish(ctx, "ex_s", claimed.Runner, suspend.Suspended, []byte(`{"status":"suspended"}`), until); err != nil {
			t.Fatal(err)
		}
		r, err := runs.Load(ctx, "ex_s")
		if err != nil || r.State != suspend.Suspended || !r.ExpiresAt.Equal(until) {
			t.Fatalf("suspended: %+v %v", r, err)
		}
		if _, err := p.store(suspend.Options{Now: clk.Now}).Load(ctx, "ex_s"); !errors.Is(err, suspend.ErrNotFound) {
			t.Fatalf("the run is not a suspension record: %v", err)
		}
		if err := runs.Settle(ctx, "ex_s", r.Version, suspend.RunCompleted, []byte(`{"ok":true}`), time.Time{}); err != nil {
			t.Fatal(err)
		}
		if r, err := runs.Load(ctx, "ex_s"); err != nil || r.State != suspend.RunCompleted || string(r.Body) != `{"ok":true}` {
			t.Fatalf("completed: %+v %v", r, err)
		}
	})
}
