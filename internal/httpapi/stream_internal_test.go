package httpapi

import (
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/trace"
)

func logEvent(n int) execution.Event {
	return execution.Event{Type: execution.EventLog, Log: trace.LogEntry{Level: "log", Message: strings.Repeat("x", n)}}
}

// TestEventQueueBound: a queue nobody takes from holds at most its limit,
// counts what it dropped, and once taken starts afresh; an event bigger
// than the limit gets through only alone; a closed queue keeps nothing.
func TestEventQueueBound(t *testing.T) {
	tests := []struct {
		name        string
		limit       int
		sizes       []int
		kept        int
		dropped     int
		closeBefore bool
	}{
		{"under the limit", 10_000, []int{100, 100, 100}, 3, 0, false},
		{"flood", 10_000, repeat(1000, 100), 7, 93, false},
		{"a small one after a drop is dropped too", 3000, []int{2000, 2000, 10}, 1, 2, false},
		{"oversized alone", 1000, []int{5000}, 1, 0, false},
		{"oversized behind another", 1000, []int{10, 5000}, 1, 1, false},
		{"closed", 10_000, []int{1, 2, 3}, 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := newEventQueue(tt.limit)
			if tt.closeBefore {
				q.close()
			}
			for _, n := range tt.sizes {
				q.push(logEvent(n))
			}
			if q.bytes > tt.limit && len(q.events) > 1 {
				t.Errorf("the queue holds %d bytes over its limit of %d", q.bytes, tt.limit)
			}
			events, dropped := q.take()
			if len(events) != tt.kept || dropped != tt.dropped {
				t.Errorf("kept %d, dropped %d; want %d and %d", len(events), dropped, tt.kept, tt.dropped)
			}
			if ev, d := q.take(); len(ev) != 0 || d != 0 || q.bytes != 0 {
				t.Errorf("a taken queue is not empty: %d events, %d dropped, %d bytes", len(ev), d, q.bytes)
			}
			if !tt.closeBefore {
				q.push(logEvent(1))
				if ev, _ := q.take(); len(ev) != 1 {
					t.Error("a taken queue refused the next event")
				}
			}
		})
	}
}

func repeat(n, times int) []int {
	out := make([]int, times)
	for i := range out {
		out[i] = n
	}
	return out
}
