package guest_test

import (
	"testing"

	"github.com/pml-sandbox/pml/internal/fault"
)

// TestTimerCap: the setTimeout that would start the 10,001st timer of a
// run throws LIMIT_EXCEEDED (timers), a host error the script may catch;
// uncaught, it is what the caller sees. Before, that timer was dropped
// without a word and a script awaiting it ended DEADLOCK.
func TestTimerCap(t *testing.T) {
	tests := []struct {
		name, code string
		want       string // the result; "" when the run must fail with the limit
	}{
		{"a loop of timers", "for (let i = 0; i < 10001; i++) setTimeout(() => {}, 1e9)", ""},
		{"awaited one after another", "for (;;) await new Promise(r => setTimeout(r, 0))", ""},
		{"inside a promise the script awaits", "let n = 0; await new Promise((resolve) => { for (let i = 0; i < 10001; i++) setTimeout(() => { if (++n === 10001) resolve() }, 0) }); return n", ""},
		{"caught at the call that crosses the cap", "let i = 0; try { for (;; i++) setTimeout(() => {}, 1e9) } catch (e) { return [i, e.code, e.limit, e instanceof Error] }", `[10000, "LIMIT_EXCEEDED", "timers", true]`},
		{"the cap itself is allowed", "let n = 0; await new Promise((resolve) => { for (let i = 0; i < 10000; i++) setTimeout(() => { if (++n === 10000) resolve() }, 0) }); return n", "10000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, tt.code)
			if tt.want != "" {
				mustOK(t, r)
				jsonEq(t, r.Value, tt.want)
				return
			}
			if r.OK || r.Err.Code != fault.LimitExceeded || r.Err.Limit != fault.LimitTimers {
				t.Fatalf("want LIMIT_EXCEEDED (timers), got %+v %s", r.Err, r.Value)
			}
		})
	}
}
