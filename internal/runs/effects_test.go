package runs_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/journal"
	"github.com/pml-sandbox/pml/internal/runs"
	"github.com/pml-sandbox/pml/internal/suspend"
)

// TestAbandonedRunListsEffects: the document of an asynchronous execution
// lists what its journal holds while it runs (the write in flight
// pending), and once its runner is lost (that write unknown): what it did
// to the world is told even though it never wrote a document of its own.
func TestAbandonedRunListsEffects(t *testing.T) {
	ctx := context.Background()
	d := newDeployment(t)
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	d.clk = func() time.Time { return time.Unix(0, now.Load()) }
	j := journal.NewFile(filepath.Join(d.dir, "journal"), journal.Options{})
	var id string
	s := d.process(t, runs.Options{Launch: func(_ context.Context, i string) error { id = i; return nil }, Journal: j})
	s.Execute(ctx, async(countScript))
	store := suspend.NewFileRuns(filepath.Join(d.dir, "runs"), suspend.Options{Now: d.clk})
	if _, err := store.Claim(ctx, id, 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	// The runner journalled two writes, the second in flight, and died.
	for call := 1; call <= 2; call++ {
		e := &journal.Entry{ExecutionID: id, CallID: call, Principal: owner, Server: "demo", Tool: "kv_set", Key: journal.Key(id, call), Args: json.RawMessage(`{}`)}
		if _, err := j.Intend(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Settle(ctx, id, 1, journal.Outcome{Status: journal.Applied}); err != nil {
		t.Fatal(err)
	}
	doc, ferr := s.Status(ctx, id, owner)
	if ferr != nil || doc.Status != execution.StatusRunning || len(doc.Effects) != 2 || doc.Effects[0].Status != "applied" || doc.Effects[1].Status != "pending" {
		t.Fatalf("running: %+v %+v", doc, ferr)
	}
	// Its lease lapses and a runner takes it over: it has no checkpoint,
	// which every effect waits for, and its journal shows effects that
	// may have happened (impossible by construction): it is not started
	// again from its code, and fails saying why.
	now.Add(int64(2 * time.Minute))
	if err := s.Run(ctx, id); err != nil {
		t.Fatal(err)
	}
	doc, ferr = s.Status(ctx, id, owner)
	if ferr != nil || doc.Status != execution.StatusFailed || len(doc.Effects) != 2 || doc.Effects[1].Status != "unknown" || doc.Effects[1].Key != journal.Key(id, 2) ||
		!strings.Contains(doc.Error.Message, "not started again from its code") || d.executions.Load() != 0 {
		t.Fatalf("lost: %+v %+v", doc, ferr)
	}
	if _, ferr := s.Status(ctx, id, stranger); ferr == nil {
		t.Fatal("a stranger read it")
	}
}
