package capability

import (
	"context"
	"log/slog"
	"maps"
	"sync"
	"time"
)

// DefaultCountEvery is how often a Counter writes its batch.
const DefaultCountEvery = 10 * time.Second

// counterWriteTimeout bounds one batch's writes.
const counterWriteTimeout = 10 * time.Second

// Counter batches capability call counts in memory and writes them to the
// registry at most once per period (one AddCalls: on DynamoDB, one ADD per
// capability called in the period), instead of one write on the
// capability's item per call: a popular capability's item is written once
// per period per process (Lambda container), not once per call. A batch
// is written in the background when a call finds the period over, by Flush
// when it is over (the execute function calls it before answering, as a
// frozen container runs nothing), and by Close. Counts not yet written
// when a process dies are lost: at most one period's worth, a popularity
// figure, never a definition. Safe for concurrent use.
type Counter struct {
	reg   Registry
	every time.Duration
	log   *slog.Logger

	mu      sync.Mutex
	pending map[string]int64
	last    time.Time     // when the last batch was taken
	writing chan struct{} // closed when the background write ends; nil when none
}

// NewCounter returns a Counter writing to reg every period (0:
// DefaultCountEvery).
func NewCounter(reg Registry, every time.Duration, log *slog.Logger) *Counter {
	if every <= 0 {
		every = DefaultCountEvery
	}
	if log == nil {
		log = slog.Default()
	}
	return &Counter{reg: reg, every: every, log: log, pending: map[string]int64{}, last: time.Now()}
}

// Add counts one call of name; it never waits for the registry.
func (c *Counter) Add(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending[name]++
	if c.writing != nil || time.Since(c.last) < c.every {
		return
	}
	batch := c.take()
	done := make(chan struct{})
	c.writing = done
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), counterWriteTimeout)
		defer cancel()
		_ = c.write(ctx, batch)
		c.mu.Lock()
		c.writing = nil
		c.mu.Unlock()
	}()
}

// wait waits for the background write, if one is running.
func (c *Counter) wait(ctx context.Context) {
	c.mu.Lock()
	done := c.writing
	c.mu.Unlock()
	if done != nil {
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
}

// take returns the pending counts and starts a new batch. Callers hold mu.
func (c *Counter) take() map[string]int64 {
	batch := c.pending
	c.pending = map[string]int64{}
	c.last = time.Now()
	return batch
}

// write writes a batch; on failure the counts go back into the next one.
func (c *Counter) write(ctx context.Context, batch map[string]int64) error {
	if len(batch) == 0 {
		return nil
	}
	err := c.reg.AddCalls(ctx, batch)
	if err != nil {
		c.log.WarnContext(ctx, "capability call counts not written; kept for the next batch", "capabilities", len(batch), "err", err)
		c.mu.Lock()
		for name, n := range batch {
			c.pending[name] += n
		}
		c.mu.Unlock()
	}
	return err
}

// Flush waits for a background write, then writes the pending counts if
// the period is over.
func (c *Counter) Flush(ctx context.Context) error {
	c.wait(ctx)
	c.mu.Lock()
	if c.writing != nil || time.Since(c.last) < c.every || len(c.pending) == 0 {
		c.mu.Unlock()
		return nil
	}
	batch := c.take()
	c.mu.Unlock()
	return c.write(ctx, batch)
}

// Close waits for a batch being written, then writes what is pending.
func (c *Counter) Close(ctx context.Context) error {
	c.wait(ctx)
	c.mu.Lock()
	batch := c.take()
	c.mu.Unlock()
	return c.write(ctx, batch)
}

// Pending returns the counts not yet written (for tests and diagnostics).
func (c *Counter) Pending() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.pending)
}
