package integration

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestServeBoundsTheGuest runs the guest's bounds through a real `pml
// serve`: scripts looping over tens of megabytes of bulk memory (one
// memory.fill or memory.copy each, which used to run seconds past the
// deadline between two check-ins) end at their deadline while trivial
// scripts are answered, and each limit reaches the HTTP caller under its
// own name, never as the host's SANDBOX_ERROR.
func TestServeBoundsTheGuest(t *testing.T) {
	sigURL, started := signalServer(t)
	srv := startServe(t, nil, "--mcp", "sig="+sigURL)
	base := srv.base

	t.Run("bulk memory loops end at their deadline", func(t *testing.T) {
		hostile := []string{
			"const a = new Uint8Array(6e7); for (;;) a.copyWithin(0, 1)",
			"for (;;) new ArrayBuffer(6e7)",
		}
		const deadline = 3 * time.Second
		wait := startHostile(t, base, started, hostile, deadline)
		var slowest time.Duration
		answers := 0
		for until := time.Now().Add(deadline - time.Second); time.Now().Before(until); answers++ {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			start := time.Now()
			r, err := execute(ctx, base, "return 1 + 1", 5000)
			cancel()
			if err != nil || r["result"] != float64(2) {
				t.Errorf("a trivial script while bulk memory loops ran: %v %v", r, err)
				break
			}
			slowest = max(slowest, time.Since(start))
		}
		t.Logf("%d trivial scripts answered while %d bulk memory loops ran, slowest %v", answers, len(hostile), slowest)
		if slowest > 2*time.Second {
			t.Errorf("a trivial script took %v; want < 2s", slowest)
		}
		wait()
	})

	deep := "let o = null; for (let i = 0; i < 10500; i++) o = [o]\n"
	limits := []struct{ name, code, limit string }{
		{"out of memory, caught in a loop", "let a = []; for (;;) { try { a.push(new Array(1e6).fill(1)) } catch (e) { a = [] } }", "memory"},
		{"out of memory in a built-in", "const a = []; try { for (;;) a.push({}) } catch (e) { return typeof e }", "memory"},
		{"the timer cap", "for (;;) await new Promise((r) => setTimeout(r, 0))", "timers"},
		{"a result nested past the host's decoder", deep + "return o", "json_depth"},
		{"tool arguments nested past the host's decoder", deep + "return await mcp.sig.started({o})", "json_depth"},
	}
	for _, tt := range limits {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			r, err := execute(ctx, base, tt.code, 30000)
			if err != nil {
				t.Fatal(err)
			}
			e, _ := r["error"].(map[string]any)
			if e["code"] != "LIMIT_EXCEEDED" || e["limit"] != tt.limit {
				t.Fatalf("want LIMIT_EXCEEDED (%s), got %v", tt.limit, r)
			}
			if msg, _ := e["message"].(string); strings.Contains(msg, "sandbox") {
				t.Errorf("the message blames the sandbox: %q", msg)
			}
		})
	}
}
