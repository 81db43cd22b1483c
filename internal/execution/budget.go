package execution

import "sync"

// DefaultSandboxes is how many capability runs, each a sandbox of its own,
// one request may start in all: its own capability calls, theirs, and so
// on down the tree. Depth alone does not bound a tree: three levels of
// Promise.all over ten calls are 1,110 sandboxes at once.
const DefaultSandboxes = 64

// Budget is one execution's share of its request tree's sandbox budget:
// how many sandboxes its capability calls, and everything they call in
// turn, may still start. The service makes one per execution (the whole
// budget for a request, the share its caller handed down for a capability
// run); a capability source spends from it. Safe for concurrent use.
//
// Nothing is shared between executions: a capability run may be in
// another process (the capability function invokes itself), so each run
// gets a share up front, reserved from its caller's budget, and reports
// what it spent when it returns, and the caller gets the rest back.
type Budget struct {
	mu    sync.Mutex
	share int // what the execution was given
	left  int // neither spent nor reserved by calls in flight
}

// NewBudget returns a budget of n sandboxes (n < 0 counts as 0).
func NewBudget(n int) *Budget {
	n = max(n, 0)
	return &Budget{share: n, left: n}
}

// Share is what the execution was given.
func (b *Budget) Share() int { return b.share }

// Reserve takes one sandbox for a capability run plus a share for that
// run's own calls: share(rest), clamped to [0, rest], where rest is what is
// left after the run's own sandbox. It returns the sandboxes reserved, or
// false when none is left.
func (b *Budget) Reserve(share func(rest int) int) (int, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.left < 1 {
		return 0, false
	}
	rest := b.left - 1
	n := 1 + min(max(share(rest), 0), rest)
	b.left -= n
	return n, true
}

// Settle ends a reservation: used (clamped to [0, reserved]) is what the
// run spent, its own sandbox included; the rest comes back.
func (b *Budget) Settle(reserved, used int) {
	used = min(max(used, 0), reserved)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.left += reserved - used
}

// Used is what the execution's tree has spent, counting what calls still
// in flight hold as spent: it is what the execution reports to its caller,
// and a run cut short may leave calls behind that are still spending.
func (b *Budget) Used() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.share - b.left
}
