package journal

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Memory is a Store in memory: the journal of a host that keeps no
// suspended executions (one per run: nothing outlives the process), and
// of tests. The zero value is not usable; NewMemory makes one.
type Memory struct {
	now func() time.Time

	mu    sync.Mutex
	execs map[string]map[int]*Entry
}

// NewMemory returns an empty journal in memory.
func NewMemory() *Memory { return &Memory{now: time.Now, execs: map[string]map[int]*Entry{}} }

// Intend implements Store.
func (m *Memory) Intend(_ context.Context, e *Entry) (*Entry, error) {
	if err := checkIntent(e); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	calls := m.execs[e.ExecutionID]
	if old := calls[e.CallID]; old != nil {
		c := clone(*old)
		return &c, nil
	}
	if calls == nil {
		calls = map[int]*Entry{}
		m.execs[e.ExecutionID] = calls
	}
	stored := pendingIntent(e, m.now())
	calls[e.CallID] = &stored
	return nil, nil
}

// Resend implements Store.
func (m *Memory) Resend(_ context.Context, executionID string, callID, attempts int) error {
	return m.update(executionID, callID, func(e *Entry) error {
		if e.Status != Pending || e.Attempts != attempts {
			return ErrConflict
		}
		e.Attempts++
		return nil
	})
}

// Settle implements Store.
func (m *Memory) Settle(_ context.Context, executionID string, callID int, o Outcome) error {
	if err := checkOutcome(o); err != nil {
		return err
	}
	at := m.now().UTC()
	return m.update(executionID, callID, func(e *Entry) error {
		if e.Status != Pending {
			return ErrConflict
		}
		e.settle(o, at)
		return nil
	})
}

// SetCompensation implements Store.
func (m *Memory) SetCompensation(_ context.Context, executionID string, callID int, from, to *Compensation) error {
	return m.update(executionID, callID, func(e *Entry) error {
		if !Claims(e.Compensation, from) {
			return ErrConflict
		}
		e.Compensation = nil
		if to != nil {
			c := *to
			e.Compensation = &c
		}
		return nil
	})
}

func (m *Memory) update(executionID string, callID int, f func(*Entry) error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.execs[executionID][callID]
	if e == nil {
		return ErrNotFound
	}
	return f(e)
}

// List implements Store.
func (m *Memory) List(_ context.Context, executionID string) ([]Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	calls := m.execs[executionID]
	out := make([]Entry, 0, len(calls))
	for _, e := range calls {
		out = append(out, clone(*e))
	}
	slices.SortFunc(out, func(a, b Entry) int { return a.CallID - b.CallID })
	return out, nil
}

// clone is e with nothing shared with the stored entry (its compensation;
// raw messages are never written in place).
func clone(e Entry) Entry {
	if e.Compensation != nil {
		c := *e.Compensation
		e.Compensation = &c
	}
	return e
}
