// Package admission is `pml serve`'s server-wide budget: how many
// executions run at once, and how much memory the process holds. A request
// that would run an execution takes a Ticket first; when the budget is
// spent it waits, in order of arrival, for a bounded time, then is refused
// with UNAVAILABLE (retryable, naming the budget), which the HTTP front
// answers 503 with Retry-After.
//
// Memory is counted, not measured: the process's idle size (Baseline),
// a fixed Reserve per admitted execution for what it holds outside the
// sandbox and the sandbox's post-init pages (the request, its response,
// event queues), a smaller one per waiting request, and every byte the
// sandbox's linear memory grows by, charged as it grows (guest.MemoryBudget)
// and given back when it is unmapped. Charging growth as it happens, rather
// than reserving each execution's worst case (its heap limit, 64 MiB and
// more) up front, lets small scripts run beside big ones: a big one whose
// growth does not fit fails at once, and its caller is told the server's
// budget refused it (Explain). Growth may not take the last part of the
// budget (the headroom), so new executions can still start while big ones
// hold the rest.
package admission

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
)

// Defaults.
const (
	// DefaultWait is how long a request waits for room.
	DefaultWait = 3 * time.Second
	// DefaultReserve is held for each running execution: the sandbox's
	// post-init memory it may write (about 9 MiB, copy-on-write), its
	// request and response (each up to 1 MiB by default), its logs and an
	// event stream's queue.
	DefaultReserve = 16 << 20
	// DefaultWaitReserve is held for each waiting request: its decoded
	// body (up to 1 MiB) and what decoding left.
	DefaultWaitReserve = 2 << 20
	// executionsPerCPU sets the default number of executions at once:
	// most executions wait on their tools, not on a CPU.
	executionsPerCPU = 32
)

// Config is a budget. New fills zero fields with the defaults, except
// Memory, Baseline and Executions (DefaultConfig measures the machine).
type Config struct {
	// Memory is the most the process may hold, in bytes: its resident
	// size stays under it.
	Memory int64
	// Baseline is what the process holds with nothing running (its
	// resident size once started), counted against Memory.
	Baseline int64
	// Executions is how many executions may run at once.
	Executions int
	// Wait is how long a request waits for room before it is refused.
	Wait time.Duration
	// Reserve is held for each running execution besides its sandbox's
	// growth; WaitReserve for each waiting request.
	Reserve, WaitReserve int64
	// OnRefuse, when set, is told the limit of each request refused
	// (fault.LimitServerExecutions or fault.LimitServerMemory): metrics
	// count them as limit hits. It is called without the controller's
	// lock held and must not block.
	OnRefuse func(limit string)
}

// Controller admits executions within one budget. It is safe for
// concurrent use.
type Controller struct {
	cfg Config
	// growCeil is what growth may fill the budget to: Memory less the
	// headroom kept for starting executions.
	growCeil int64

	mu      sync.Mutex
	running int
	used    int64      // Baseline, reservations and charged growth
	queue   *list.List // of *waiter, oldest first
	stats   Stats
}

// Stats are a controller's state and counters.
type Stats struct {
	Running       int   `json:"running"`
	Waiting       int   `json:"waiting"`
	MaxExecutions int   `json:"max_executions"`
	MemoryBytes   int64 `json:"memory_bytes"`   // counted now: baseline, reservations, growth
	MemoryBudget  int64 `json:"memory_budget"`  // Config.Memory
	BaselineBytes int64 `json:"baseline_bytes"` // Config.Baseline
	GrowthBytes   int64 `json:"growth_bytes"`   // sandbox growth charged now
	Admitted      int64 `json:"admitted"`       // executions admitted so far
	Refused       int64 `json:"refused"`        // requests refused for want of room
	GrowthRefused int64 `json:"growth_refused"` // sandbox growths refused
}

type waiter struct {
	ready    chan struct{} // closed once admitted
	admitted bool          // set under mu with ready closed
}

// New returns a controller for cfg. The budget must hold the idle process
// and at least one execution besides the headroom.
func New(cfg Config) (*Controller, error) {
	if cfg.Wait <= 0 {
		cfg.Wait = DefaultWait
	}
	if cfg.Reserve <= 0 {
		cfg.Reserve = DefaultReserve
	}
	if cfg.WaitReserve <= 0 {
		cfg.WaitReserve = DefaultWaitReserve
	}
	if cfg.Executions <= 0 {
		return nil, errors.New("admission: the number of executions at once must be positive")
	}
	if cfg.Memory <= 0 {
		return nil, errors.New("admission: the memory budget must be positive")
	}
	headroom := max(cfg.Memory/8, cfg.Reserve)
	growCeil := cfg.Memory - headroom
	if cfg.Baseline+cfg.Reserve > growCeil {
		return nil, fmt.Errorf("admission: a memory budget of %s leaves no room for executions: the server holds %s idle, each execution %s, and %s is kept for starting them",
			size(cfg.Memory), size(cfg.Baseline), size(cfg.Reserve), size(headroom))
	}
	return &Controller{cfg: cfg, growCeil: growCeil, used: cfg.Baseline, queue: list.New()}, nil
}

// DefaultConfig is the budget for this machine: half its memory, or three
// quarters of its cgroup's limit when one is set (the container is the
// server's own); executionsPerCPU executions per CPU Go may use (which
// follows a cgroup's CPU limit); and the process's resident size now as
// the baseline, so call it once the server is ready.
func DefaultConfig() Config {
	return Config{
		Memory:     DefaultMemory(),
		Baseline:   ProcessRSS(),
		Executions: DefaultExecutions(),
		Wait:       DefaultWait,
		Reserve:    defaultReserve(),
	}
}

// DefaultExecutions is the default number of executions at once.
func DefaultExecutions() int { return executionsPerCPU * runtime.GOMAXPROCS(0) }

// defaultReserve is DefaultReserve where the guest charges its growth;
// elsewhere the default heap limit's worst case is reserved up front too
// (its linear memory can reach a quarter more than the heap, plus 16 MiB
// of stack and data).
func defaultReserve() int64 {
	if guest.MemoryCharged {
		return DefaultReserve
	}
	heap := guest.DefaultLimits().MemoryBytes
	return DefaultReserve + heap + heap/4 + 16<<20
}

// Ticket is one admitted execution's hold on the budget. Its context
// (Context) charges the sandbox's growth to the budget; Release ends the
// hold. Growth already charged is given back as the sandbox's memory is
// unmapped, which may be after Release.
type Ticket struct {
	c        *Controller
	released atomic.Bool
	refused  atomic.Int64 // growths refused
}

// Acquire admits one execution, waiting up to the configured time (or
// until ctx ends) for room. The error is UNAVAILABLE, retryable, with the
// budget that was short in its Limit (fault.LimitServerExecutions or
// fault.LimitServerMemory).
func (c *Controller) Acquire(ctx context.Context) (*Ticket, *fault.Error) {
	c.mu.Lock()
	if c.queue.Len() == 0 && c.fits(c.cfg.Reserve) {
		c.admitLocked(c.cfg.Reserve)
		c.mu.Unlock()
		return &Ticket{c: c}, nil
	}
	if c.used+c.cfg.WaitReserve > c.cfg.Memory {
		c.stats.Refused++
		err := c.refusalLocked(0)
		c.mu.Unlock()
		return nil, c.refused(err)
	}
	w := &waiter{ready: make(chan struct{})}
	c.used += c.cfg.WaitReserve
	el := c.queue.PushBack(w)
	c.mu.Unlock()

	t := time.NewTimer(c.cfg.Wait)
	defer t.Stop()
	start := time.Now()
	select {
	case <-w.ready:
		return &Ticket{c: c}, nil
	case <-t.C:
	case <-ctx.Done():
	}
	c.mu.Lock()
	if w.admitted { // admitted as the wait ended
		c.mu.Unlock()
		return &Ticket{c: c}, nil
	}
	c.queue.Remove(el)
	c.used -= c.cfg.WaitReserve
	c.stats.Refused++
	err := c.refusalLocked(time.Since(start))
	// The head may have been what stopped others (it never is: every
	// waiter needs the same), but the wait reserve it held is free now.
	c.dispatchLocked()
	c.mu.Unlock()
	return nil, c.refused(err)
}

// refused tells OnRefuse of a refusal, and returns it.
func (c *Controller) refused(err *fault.Error) *fault.Error {
	if c.cfg.OnRefuse != nil {
		c.cfg.OnRefuse(err.Limit)
	}
	return err
}

// fits reports whether an execution needing need more bytes can start now.
func (c *Controller) fits(need int64) bool {
	return c.running < c.cfg.Executions && c.used+need <= c.cfg.Memory
}

func (c *Controller) admitLocked(need int64) {
	c.running++
	c.used += need
	c.stats.Admitted++
}

// dispatchLocked admits waiters, oldest first, while they fit.
func (c *Controller) dispatchLocked() {
	for el := c.queue.Front(); el != nil; el = c.queue.Front() {
		if !c.fits(c.cfg.Reserve - c.cfg.WaitReserve) {
			return
		}
		w := c.queue.Remove(el).(*waiter)
		c.admitLocked(c.cfg.Reserve - c.cfg.WaitReserve)
		w.admitted = true
		close(w.ready)
	}
}

// refusalLocked is the error of a request refused after waiting waited.
func (c *Controller) refusalLocked(waited time.Duration) *fault.Error {
	var e *fault.Error
	if c.running >= c.cfg.Executions {
		e = fault.New(fault.Unavailable, "the server is running %d executions, its most at once (pml serve --max-executions); this request waited %v for one to end: retry after %d s",
			c.running, waited.Round(time.Millisecond), c.RetryAfterSeconds())
		e.Limit = fault.LimitServerExecutions
	} else {
		e = fault.New(fault.Unavailable, "the server's memory budget (%s, pml serve --max-memory) is held by running executions; this request waited %v for room: retry after %d s",
			size(c.cfg.Memory), waited.Round(time.Millisecond), c.RetryAfterSeconds())
		e.Limit = fault.LimitServerMemory
	}
	e.Retryable = true
	e.Details = map[string]any{"retry_after_s": c.RetryAfterSeconds()}
	return e
}

// RetryAfterSeconds is what a refused caller is told to wait: as long as
// it waited already, at least a second.
func (c *Controller) RetryAfterSeconds() int {
	return max(1, int(math.Ceil(c.cfg.Wait.Seconds())))
}

// release ends an execution's hold.
func (c *Controller) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running--
	c.used -= c.cfg.Reserve
	c.dispatchLocked()
}

func (c *Controller) grow(n int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.used+n > c.growCeil {
		c.stats.GrowthRefused++
		return false
	}
	c.used += n
	c.stats.GrowthBytes += n
	return true
}

func (c *Controller) free(n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.used -= n
	c.stats.GrowthBytes -= n
	c.dispatchLocked()
}

// Stats returns the counters now.
func (c *Controller) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Running, s.Waiting, s.MemoryBytes = c.running, c.queue.Len(), c.used
	s.MaxExecutions, s.MemoryBudget, s.BaselineBytes = c.cfg.Executions, c.cfg.Memory, c.cfg.Baseline
	return s
}

// Config returns the budget the controller enforces, defaults filled in.
func (c *Controller) Config() Config { return c.cfg }

// Release ends the ticket's hold on the budget; later calls do nothing.
func (t *Ticket) Release() {
	if t.released.CompareAndSwap(false, true) {
		t.c.release()
	}
}

// Grow implements guest.MemoryBudget.
func (t *Ticket) Grow(n int64) bool {
	if t.c.grow(n) {
		return true
	}
	t.refused.Add(1)
	return false
}

// Free implements guest.MemoryBudget.
func (t *Ticket) Free(n int64) { t.c.free(n) }

type ticketKey struct{}

// Context returns ctx carrying the ticket: the sandboxes started under it
// charge their growth to the budget, and Explain finds it.
func (t *Ticket) Context(ctx context.Context) context.Context {
	return guest.WithMemoryBudget(context.WithValue(ctx, ticketKey{}, t), t)
}

// FromContext returns the ticket in ctx, nil when there is none.
func FromContext(ctx context.Context) *Ticket {
	t, _ := ctx.Value(ticketKey{}).(*Ticket)
	return t
}

// Explain returns the error an execution that ended with e should report
// instead, or nil to keep e: a sandbox that ran out of memory because the
// server's budget refused its growth (not its own limit) is the server's
// UNAVAILABLE, retryable, not the script's LIMIT_EXCEEDED.
func Explain(ctx context.Context, e *fault.Error) *fault.Error {
	t := FromContext(ctx)
	if t == nil || e == nil || t.refused.Load() == 0 || e.Code != fault.LimitExceeded || e.Limit != fault.LimitMemory {
		return nil
	}
	c := t.c
	out := fault.New(fault.Unavailable, "the sandbox ran out of memory because the server's memory budget (%s, pml serve --max-memory) is held by other executions, not at its own limit: retry after %d s",
		size(c.cfg.Memory), c.RetryAfterSeconds())
	out.Limit = fault.LimitServerMemory
	out.Retryable = true
	out.Details = map[string]any{"retry_after_s": c.RetryAfterSeconds()}
	return out
}

func size(n int64) string { return humanize.IBytes(uint64(max(n, 0))) }
