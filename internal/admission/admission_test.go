package admission

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pml-sandbox/pml/internal/fault"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const mib = 1 << 20

// budget is a small controller: 100 MiB, 10 idle, 2 executions of 10 MiB
// each (the headroom is 12.5 MiB, so growth fills it to 87.5 MiB).
func budget(t *testing.T, wait time.Duration) *Controller {
	t.Helper()
	c, err := New(Config{Memory: 100 * mib, Baseline: 10 * mib, Executions: 2, Wait: wait, Reserve: 10 * mib, WaitReserve: 1 * mib})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// settled checks that nothing is held: no execution, no waiter, the
// baseline only.
func settled(t *testing.T, c *Controller) {
	t.Helper()
	s := c.Stats()
	if s.Running != 0 || s.Waiting != 0 || s.MemoryBytes != s.BaselineBytes || s.GrowthBytes != 0 {
		t.Errorf("not settled: %+v", s)
	}
}

// waitFor polls cond until it holds, failing the test after a while.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the condition never held")
		}
	}
}

func TestNewRefusesABudgetWithNoRoom(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"room", Config{Memory: 1 << 30, Baseline: 100 * mib, Executions: 4}, true},
		{"baseline fills it", Config{Memory: 128 * mib, Baseline: 100 * mib, Executions: 4}, false},
		{"no executions", Config{Memory: 1 << 30, Executions: 0}, false},
		{"no memory", Config{Memory: 0, Executions: 4}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(tt.cfg)
			if (err == nil) != tt.ok {
				t.Fatalf("New: %v, want ok %v", err, tt.ok)
			}
			if c != nil && (c.Config().Wait != DefaultWait || c.Config().Reserve != DefaultReserve) {
				t.Errorf("defaults not filled: %+v", c.Config())
			}
		})
	}
}

// TestExecutionsWaitInOrder: past the number of executions, requests wait
// and are admitted oldest first as executions end.
func TestExecutionsWaitInOrder(t *testing.T) {
	c := budget(t, time.Minute)
	ctx := context.Background()
	a, err := c.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan int, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		// Queue them one after the other: the second waits behind the first.
		wg.Add(1)
		go func() {
			defer wg.Done()
			tk, err := c.Acquire(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			order <- i
			tk.Release()
		}()
		waitFor(t, func() bool { return c.Stats().Waiting == i+1 })
	}
	a.Release()
	if got := <-order; got != 0 {
		t.Errorf("admitted %d first, want the oldest waiter", got)
	}
	a.Release() // a second release does nothing
	b.Release()
	wg.Wait()
	settled(t, c)
}

// TestRefusedAfterWaiting: a request that finds no room within the wait
// is UNAVAILABLE, retryable, naming the budget that was short, with the
// delay to retry after; so is one whose caller gives up.
func TestRefusedAfterWaiting(t *testing.T) {
	tests := []struct {
		name       string
		executions int
		hold       func(c *Controller) (release func())
		limit      string
	}{
		{"executions", 2, func(c *Controller) func() {
			a, _ := c.Acquire(context.Background())
			b, _ := c.Acquire(context.Background())
			return func() { a.Release(); b.Release() }
		}, fault.LimitServerExecutions},
		{"memory", 10, func(c *Controller) func() {
			a, _ := c.Acquire(context.Background())
			// Growth up to the ceiling (10 + 10 + 67.5 = 87.5 MiB) leaves
			// the headroom: one more execution starts (97.5), and a third
			// no longer fits in 100.
			if !a.Grow(67*mib + mib/2) {
				t.Fatal("growth under the ceiling was refused")
			}
			b, err := c.Acquire(context.Background())
			if err != nil {
				t.Fatalf("the headroom did not admit an execution: %v", err)
			}
			return func() { a.Free(67*mib + mib/2); a.Release(); b.Release() }
		}, fault.LimitServerMemory},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var told []string // OnRefuse is called on the refused request's goroutine
			c, err := New(Config{Memory: 100 * mib, Baseline: 10 * mib, Executions: tt.executions, Wait: 20 * time.Millisecond, Reserve: 10 * mib, WaitReserve: mib,
				OnRefuse: func(limit string) { told = append(told, limit) }})
			if err != nil {
				t.Fatal(err)
			}
			release := tt.hold(c)
			tk, ferr := c.Acquire(context.Background())
			if tk != nil || ferr == nil {
				t.Fatal("admitted past the budget")
			}
			if ferr.Code != fault.Unavailable || !ferr.Retryable || ferr.Limit != tt.limit {
				t.Errorf("refusal %+v, want UNAVAILABLE retryable %s", ferr, tt.limit)
			}
			if d, _ := ferr.Details.(map[string]any); d["retry_after_s"] != 1 {
				t.Errorf("details %v, want retry_after_s 1", ferr.Details)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if _, err := c.Acquire(ctx); err == nil || err.Limit != tt.limit {
				t.Errorf("a caller that gave up: %v", err)
			}
			if s := c.Stats(); s.Refused != 2 || s.Waiting != 0 {
				t.Errorf("stats %+v", s)
			}
			if len(told) != 2 || told[0] != tt.limit || told[1] != tt.limit {
				t.Errorf("OnRefuse was told %v; want %s twice", told, tt.limit)
			}
			release()
			settled(t, c)
		})
	}
}

// TestGrowthKeepsHeadroom: growth is granted up to the ceiling and refused
// past it, while a new execution's reserve still fits in the headroom;
// memory given back admits a request waiting for it.
func TestGrowthKeepsHeadroom(t *testing.T) {
	c, err := New(Config{Memory: 100 * mib, Baseline: 10 * mib, Executions: 10, Wait: time.Minute, Reserve: 10 * mib, WaitReserve: mib})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	big, _ := c.Acquire(ctx)
	if !big.Grow(65 * mib) { // 10+10+65 = 85 <= 87.5
		t.Fatal("growth under the ceiling refused")
	}
	if big.Grow(5 * mib) { // 90 > 87.5
		t.Fatal("growth into the headroom granted")
	}
	small, ferr := c.Acquire(ctx) // 85 + 10 = 95 <= 100: the headroom admits it
	if ferr != nil {
		t.Fatalf("a new execution was refused while only growth was short: %v", ferr)
	}
	// 95 used: a third execution waits for memory...
	got := make(chan *Ticket)
	go func() {
		tk, err := c.Acquire(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- tk
	}()
	waitFor(t, func() bool { return c.Stats().Waiting == 1 })
	// ...until the big one's memory is unmapped.
	big.Free(65 * mib)
	third := <-got
	big.Release()
	small.Release()
	third.Release()
	if s := c.Stats(); s.GrowthRefused != 1 || s.Admitted != 3 {
		t.Errorf("stats %+v", s)
	}
	settled(t, c)
}

// TestExplain: only a memory failure of an execution whose growth the
// budget refused becomes the server's UNAVAILABLE.
func TestExplain(t *testing.T) {
	oom := func() *fault.Error { return fault.Limitf(fault.LimitMemory, "the script ran out of memory") }
	c := budget(t, time.Minute)
	refused, _ := c.Acquire(context.Background())
	if refused.Grow(1 << 30) {
		t.Fatal("a gigabyte granted")
	}
	granted, _ := c.Acquire(context.Background())
	defer refused.Release()
	defer granted.Release()
	tests := []struct {
		name string
		ctx  context.Context
		err  *fault.Error
		want bool
	}{
		{"refused growth, out of memory", refused.Context(context.Background()), oom(), true},
		{"refused growth, another failure", refused.Context(context.Background()), fault.New(fault.ScriptError, "x"), false},
		{"refused growth, success", refused.Context(context.Background()), nil, false},
		{"granted growth, out of memory", granted.Context(context.Background()), oom(), false},
		{"no ticket", context.Background(), oom(), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := Explain(tt.ctx, tt.err)
			if (e != nil) != tt.want {
				t.Fatalf("Explain = %v, want replaced %v", e, tt.want)
			}
			if e != nil && (e.Code != fault.Unavailable || e.Limit != fault.LimitServerMemory || !e.Retryable) {
				t.Errorf("explained as %+v", e)
			}
		})
	}
}

// TestConcurrentAcquire: many requests at once over a small budget all end
// admitted or refused, and the budget comes back whole.
func TestConcurrentAcquire(t *testing.T) {
	c := budget(t, 50*time.Millisecond)
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tk, err := c.Acquire(context.Background())
			if err != nil {
				return
			}
			if tk.Grow(8 * mib) {
				defer tk.Free(8 * mib)
			}
			time.Sleep(time.Millisecond)
			tk.Release()
		}()
	}
	wg.Wait()
	s := c.Stats()
	if s.Admitted+s.Refused != 64 || s.Admitted == 0 {
		t.Errorf("stats %+v", s)
	}
	settled(t, c)
}

func TestDefaultConfig(t *testing.T) {
	cfg := DefaultConfig()
	if cfg.Memory <= 0 || cfg.Baseline <= 0 || cfg.Executions <= 0 {
		t.Fatalf("default config %+v", cfg)
	}
	if _, err := New(cfg); err != nil {
		t.Errorf("the machine's default budget: %v", err)
	}
}

func TestRetryAfter(t *testing.T) {
	c := budget(t, 2500*time.Millisecond)
	tests := []struct {
		status int
		preset string
		want   string
	}{
		{http.StatusServiceUnavailable, "", "3"},
		{http.StatusServiceUnavailable, "60", "60"},
		{http.StatusOK, "", ""},
	}
	for _, tt := range tests {
		h := c.RetryAfter(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if tt.preset != "" {
				w.Header().Set("Retry-After", tt.preset)
			}
			w.WriteHeader(tt.status)
		}))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", "/execute", nil))
		if got := rec.Header().Get("Retry-After"); got != tt.want {
			t.Errorf("status %d (preset %q): Retry-After %q, want %q", tt.status, tt.preset, got, tt.want)
		}
	}
}
