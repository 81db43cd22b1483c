package capability_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/capability"
)

// batchRegistry records AddCalls batches and fails them while failing is
// set.
type batchRegistry struct {
	capability.Registry
	mu      sync.Mutex
	batches []map[string]int64
	failing bool
}

func (b *batchRegistry) AddCalls(ctx context.Context, counts map[string]int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failing {
		return errors.New("registry down")
	}
	b.batches = append(b.batches, counts)
	return b.Registry.AddCalls(ctx, counts)
}

func (b *batchRegistry) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.batches)
}

// TestCounterBatches: a thousand calls within the period are one write of
// the counts; a failed write keeps them for the next; Close writes the
// rest.
func TestCounterBatches(t *testing.T) {
	ctx := context.Background()
	base := capability.NewFileRegistry(filepath.Join(t.TempDir(), "caps.json"))
	defer base.Close()
	for _, n := range []string{"c:a", "c:b"} {
		if _, err := base.Save(ctx, capability.Capability{Name: n, Code: "return 1"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	reg := &batchRegistry{Registry: base}
	c := capability.NewCounter(reg, time.Hour, slog.New(slog.DiscardHandler))
	for range 1000 {
		c.Add("c:a")
	}
	c.Add("c:b")
	if err := c.Flush(ctx); err != nil || reg.count() != 0 {
		t.Fatalf("flushed before the period was over: %d batches, %v", reg.count(), err)
	}
	reg.failing = true
	if err := c.Close(ctx); err == nil {
		t.Fatal("a failed write reported no error")
	}
	if p := c.Pending(); p["c:a"] != 1000 || p["c:b"] != 1 {
		t.Fatalf("counts lost on a failed write: %v", p)
	}
	reg.failing = false
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if reg.count() != 1 {
		t.Fatalf("%d batches; want 1", reg.count())
	}
	got, _ := base.Lookup(ctx, []string{"c:a", "c:b"})
	if got["c:a"].Calls != 1000 || got["c:b"].Calls != 1 {
		t.Fatalf("counts written: %d, %d", got["c:a"].Calls, got["c:b"].Calls)
	}
}

// TestCounterWritesWhenThePeriodEnds: once the period is over the next
// call starts a write in the background, and Flush writes what is due.
func TestCounterWritesWhenThePeriodEnds(t *testing.T) {
	ctx := context.Background()
	base := capability.NewFileRegistry(filepath.Join(t.TempDir(), "caps.json"))
	defer base.Close()
	if _, err := base.Save(ctx, capability.Capability{Name: "c:a", Code: "return 1"}, nil); err != nil {
		t.Fatal(err)
	}
	reg := &batchRegistry{Registry: base}
	c := capability.NewCounter(reg, 50*time.Millisecond, nil)
	defer c.Close(ctx)
	c.Add("c:a")
	time.Sleep(60 * time.Millisecond)
	c.Add("c:a") // starts the write of both
	deadline := time.Now().Add(10 * time.Second)
	for reg.count() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if reg.count() != 1 {
		t.Fatal("no background write after the period")
	}
	c.Add("c:a")
	time.Sleep(60 * time.Millisecond)
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := base.Lookup(ctx, []string{"c:a"}); got["c:a"].Calls != 3 {
		t.Fatalf("calls = %d; want 3", got["c:a"].Calls)
	}
}
