package guest

import (
	"context"
	"sync"
	"testing"

	"github.com/pml-sandbox/pml/internal/fault"
)

// capBudget grants growth up to limit bytes outstanding.
type capBudget struct {
	mu                    sync.Mutex
	limit, held, granted  int64
	refused, grows, frees int
}

func (b *capBudget) Grow(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.grows++
	if b.held+n > b.limit {
		b.refused++
		return false
	}
	b.held += n
	b.granted += n
	return true
}

func (b *capBudget) Free(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.frees++
	b.held -= n
}

// TestMemoryBudget: a run charges its memory's growth to the budget in its
// context, a refusal is the script running out of memory (never a trap or
// a host failure), and everything granted comes back once the engine has
// unmapped the instances. Runs without a budget charge nothing.
func TestMemoryBudget(t *testing.T) {
	const big = "const a = new Uint8Array(32 << 20); a.fill(1); return a[5] + a.length"
	tests := []struct {
		name    string
		limit   int64 // -1: no budget in the context
		code    string
		ok      bool
		refused bool
	}{
		{"granted", 1 << 30, big, true, false},
		{"refused", 4 << 20, big, false, true},
		{"trivial under a tiny budget", 1, "return 1 + 1", true, false},
		{"no budget", -1, big, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			e, err := New(ctx, Options{})
			if err != nil {
				t.Fatal(err)
			}
			b := &capBudget{limit: tt.limit}
			rctx := ctx
			if tt.limit >= 0 {
				rctx = WithMemoryBudget(ctx, b)
			}
			res := e.Run(rctx, Request{Code: tt.code})
			if err := e.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if res.OK != tt.ok {
				t.Fatalf("ok = %v, want %v (error %v)", res.OK, tt.ok, res.Err)
			}
			if !tt.ok && (res.Err.Code != fault.LimitExceeded || res.Err.Limit != fault.LimitMemory) {
				t.Errorf("a refused growth ended the run with %v; want the script's out-of-memory", res.Err)
			}
			b.mu.Lock()
			defer b.mu.Unlock()
			if (b.refused > 0) != tt.refused {
				t.Errorf("refusals = %d, want refused %v", b.refused, tt.refused)
			}
			if tt.limit < 0 && b.grows > 0 {
				t.Errorf("a run without a budget in its context charged one %d times", b.grows)
			}
			if tt.ok && tt.limit >= 1<<30 && b.granted < 20<<20 {
				t.Errorf("granted %d bytes for a 32 MiB array (the post-init memory has about 9 MiB)", b.granted)
			}
			if b.held != 0 {
				t.Errorf("%d bytes still charged after the engine closed (%d grows, %d frees)", b.held, b.grows, b.frees)
			}
		})
	}
}
