package guest_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/trace"
)

// TestProgressHooks: every console line reaches OnLog and every call
// reaches OnCallStart before its OnCall, in the order the script made
// them; the truncation marker is a line like any other.
func TestProgressHooks(t *testing.T) {
	var (
		mu     sync.Mutex
		events []string
	)
	add := func(s string) { mu.Lock(); events = append(events, s); mu.Unlock() }
	r := run(t, "console.log('one'); await mcp.demo.echo({x: 1}); console.warn('two'); await mcp.demo.add({a: 1, b: 2}); for (let i = 0; i < 5; i++) console.log('x'); return 1",
		func(r *guest.Request) {
			r.Limits.LogEntries = 4
			r.OnLog = func(e trace.LogEntry) { add(e.Level + " " + e.Message) }
			r.OnCallStart = func(c trace.Call) { add(fmt.Sprintf("start %d %s", c.CallID, c.Tool)) }
			r.OnCall = func(c trace.Call) { add(fmt.Sprintf("end %d %s %v", c.CallID, c.Tool, c.OK)) }
		})
	mustOK(t, r)
	want := []string{"log one", "start 1 echo", "end 1 echo true", "warn two", "start 2 add", "end 2 add true", "log x", "log x",
		"warn [pml] console output reached the log_entries limit of 4 lines; the rest was dropped"}
	if fmt.Sprint(events) != fmt.Sprint(want) {
		t.Errorf("events:\n got %q\nwant %q", events, want)
	}
	if len(r.Logs) != 5 {
		t.Errorf("logs = %+v, want the 4 kept and the marker", r.Logs)
	}
}
