package tracedb

import (
	"context"
	"fmt"
	"testing"

	"github.com/pml-sandbox/pml/internal/trace"
)

// TestMemoryHoldsBoundedCalls: however many calls executions make, the
// store holds at most maxHeldCalls call records, dropping the oldest
// executions first.
func TestMemoryHoldsBoundedCalls(t *testing.T) {
	m := NewMemory(0)
	calls := make([]trace.Call, 1000)
	for i := range 300 {
		m.Record(context.Background(), trace.Execution{ID: fmt.Sprintf("ex_%d", i)}, calls)
	}
	if m.calls > maxHeldCalls || len(m.order) != maxHeldCalls/1000 {
		t.Fatalf("holds %d calls in %d executions; want at most %d", m.calls, len(m.order), maxHeldCalls)
	}
	if _, _, err := m.GetExecution(context.Background(), "ex_299"); err != nil {
		t.Fatalf("the newest execution is gone: %v", err)
	}
	if _, _, err := m.GetExecution(context.Background(), "ex_0"); err == nil {
		t.Fatal("the oldest execution is still held")
	}
}
