package guest_test

import (
	"testing"
	"time"
)

// TestCPUTime: a run's CPU time leaves out what it waited for (a tool
// call, a timer) and counts what it computed.
func TestCPUTime(t *testing.T) {
	for _, tc := range []struct {
		name, code string
		waits      time.Duration // at least this much of the duration is waiting
	}{
		{"tool call", "await mcp.demo.sleep({ms: 300}); return 1", 300 * time.Millisecond},
		{"timer", "await new Promise(r => setTimeout(r, 300)); return 1", 300 * time.Millisecond},
		{"parallel calls", "await Promise.all([mcp.demo.sleep({ms: 300}), mcp.demo.sleep({ms: 300})]); return 1", 300 * time.Millisecond},
		{"computing", "let n = 0; for (let i = 0; i < 3e6; i++) n += i; return n > 0", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, tc.code)
			mustOK(t, r)
			if r.CPUTime <= 0 || r.CPUTime > r.Duration {
				t.Fatalf("CPU time %v of a %v run", r.CPUTime, r.Duration)
			}
			if r.Duration-r.CPUTime < tc.waits {
				t.Fatalf("CPU time %v of a %v run that waited %v", r.CPUTime, r.Duration, tc.waits)
			}
		})
	}
}
