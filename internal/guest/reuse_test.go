package guest_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
)

// waitRetired waits until the engine has dealt with n used instances
// (reset for reuse, or closed), so the next run takes a reset one.
func waitRetired(t *testing.T, e *guest.Engine, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := e.Stats()
		if s.Reused+s.Closed >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the engine retired %d instances, want %d: %+v", s.Reused+s.Closed, n, s)
		}
		time.Sleep(time.Millisecond) // polling a condition, bounded above
	}
}

// reusingEngine is an engine with one prepared instance, so runs back to
// back take reset ones; the test is skipped where instances are not reused.
func reusingEngine(t *testing.T) *guest.Engine {
	t.Helper()
	e, err := guest.New(context.Background(), guest.Options{Prepared: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	if !e.CopyOnWrite() {
		t.Skip("instances are reused only over a copy-on-write image (Linux)")
	}
	return e
}

// TestReusedInstancesAreFresh runs scripts that leave every kind of trace
// (globals, prototypes, built-ins replaced, timers pending, a secret on the
// heap) each followed by one that looks for them, on an engine that resets
// and reuses its instances: nothing is ever found, and reuse did happen.
func TestReusedInstancesAreFresh(t *testing.T) {
	ctx := context.Background()
	e := reusingEngine(t)
	const polluter = `globalThis.leak = 42; Object.prototype.polluted = 1; Array.prototype.push = null;
const secret = "SECRET-" + "x".repeat(100000); globalThis.keep = () => secret;
setTimeout(() => { globalThis.fired = true }, 1);
return Math.random()`
	const checker = `return [typeof leak, ({}).polluted === undefined, typeof [].push, typeof keep, typeof fired, Math.random()]`
	seen := map[string]bool{}
	retired := int64(0)
	for i := range 20 {
		r := e.Run(ctx, guest.Request{Code: polluter})
		mustOK(t, r)
		retired++
		waitRetired(t, e, retired)
		c := e.Run(ctx, guest.Request{Code: checker})
		mustOK(t, c)
		retired++
		waitRetired(t, e, retired)
		var got []any
		jsonUnmarshal(t, c.Value, &got)
		if got[0] != "undefined" || got[1] != true || got[2] != "function" || got[3] != "undefined" || got[4] != "undefined" {
			t.Fatalf("run %d saw the previous run's traces: %v", i, got)
		}
		for _, v := range []string{string(r.Value), jsonString(t, got[5])} {
			if seen[v] {
				t.Fatalf("Math.random repeated %s across runs", v)
			}
			seen[v] = true
		}
	}
	if s := e.Stats(); s.Reused < 30 {
		t.Fatalf("only %d of 40 instances were reset and reused: %+v", s.Reused, s)
	}
}

// TestTrappedOrGrownInstancesAreNotReused: a run that hit its deadline (a
// trap), grew its memory past the snapshot, or recursed to the stack limit
// (wazero's call stack for the instance grew, and a reset would keep it)
// leaves an instance that is closed, never reset.
func TestTrappedOrGrownInstancesAreNotReused(t *testing.T) {
	ctx := context.Background()
	e := reusingEngine(t)
	for i, code := range []string{
		"while (true) {}",
		"const a = []; for (let i = 0; i < 64; i++) a.push(new ArrayBuffer(1 << 20)); return a.length",
		"function f() { return f() + 1 } return f()",
	} {
		before := e.Stats()
		e.Run(ctx, guest.Request{Code: code, Limits: guest.Limits{Timeout: 200 * time.Millisecond}})
		waitRetired(t, e, before.Reused+before.Closed+1)
		if after := e.Stats(); after.Closed != before.Closed+1 || after.Reused != before.Reused {
			t.Fatalf("case %d: the instance was reused: %+v -> %+v", i, before, after)
		}
	}
}

func jsonUnmarshal(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
}

func jsonString(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestResumedRunThatGrewItsStackIsNotReused: a resumed execution that
// recurses to the stack limit leaves its instance closed, as a run does
// (TestTrappedOrGrownInstancesAreNotReused).
func TestResumedRunThatGrewItsStackIsNotReused(t *testing.T) {
	ctx := context.Background()
	e := reusingEngine(t)
	r := e.Run(ctx, guest.Request{Code: "await mcp.demo.add({a: 1, b: 2})\nfunction f() { return f() + 1 }\nreturn f()",
		Tools: guest.DemoTools(), Host: guest.DemoHost{}, Park: parkAdd, Limits: guest.Limits{Timeout: 5 * time.Second}})
	if r.Suspended == nil {
		t.Fatalf("the run did not suspend: %+v", r.Err)
	}
	waitRetired(t, e, 1)
	before := e.Stats()
	res := resume(t, e, r.Suspended, map[int]guest.Decision{1: {Approve: true}})
	if res.Err == nil || res.Err.Limit != fault.LimitStack {
		t.Fatalf("the resumed run: %+v, want the stack limit", res.Err)
	}
	waitRetired(t, e, before.Reused+before.Closed+1)
	if after := e.Stats(); after.Closed != before.Closed+1 || after.Reused != before.Reused {
		t.Fatalf("the instance was reused: %+v -> %+v", before, after)
	}
}
