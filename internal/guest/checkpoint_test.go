package guest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
)

// effectAdd makes demo:add the effect of these tests.
func effectAdd(c guest.Call) bool { return c.Tool == "add" }

// logHost is the demo host that logs what it serves, and can hold one
// call (by call id) until released or cancelled.
type logHost struct {
	demo   guest.DemoHost // not embedded: an ImmediateHost would skip CallTool
	mu     sync.Mutex
	events []string
	block  int
	hold   chan struct{}
}

func (h *logHost) log(e string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, e)
}

func (h *logHost) Events() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.Join(h.events, " ")
}

func (h *logHost) CallTool(ctx context.Context, c guest.Call) (json.RawMessage, error) {
	h.log(fmt.Sprintf("%s#%d", c.Tool, c.ID))
	if c.ID == h.block && h.hold != nil {
		select {
		case <-h.hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return h.demo.CallTool(ctx, c)
}

// checkpoints collects a run's checkpoints as a store would keep them.
type checkpoints struct {
	t    *testing.T
	host *logHost
	mu   sync.Mutex
	all  []*guest.Suspension
	fail error
}

func (k *checkpoints) hook(_ context.Context, s *guest.Suspension) error {
	if k.host != nil {
		k.host.log("ckpt")
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.fail != nil {
		return k.fail
	}
	k.all = append(k.all, roundTrip(k.t, s))
	return nil
}

func (k *checkpoints) last() *guest.Suspension {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.all) == 0 {
		k.t.Fatal("no checkpoint")
	}
	return k.all[len(k.all)-1]
}

func checkpointed(k *checkpoints, h guest.ToolHost) func(*guest.Request) {
	return func(r *guest.Request) {
		r.Host, r.Checkpoint, r.IsEffect = h, k.hook, effectAdd
		r.CheckpointEvery = time.Hour
	}
}

// An effect is sent only after a checkpoint that has it in flight: one
// started while the script computes (a check-in, where reads start) waits,
// invisibly, for the script's next wait point.
func TestEffectWaitsForItsCheckpoint(t *testing.T) {
	h := &logHost{}
	k := &checkpoints{t: t, host: h}
	r := run(t, `const a = await mcp.demo.echo({n: 1})
const b = await mcp.demo.add({a: 1, b: 2})
const c = mcp.demo.add({a: 3, b: 4})
const d = mcp.demo.echo({n: 2})
let s = 0
for (let i = 0; i < 300000; i++) s += i % 7
return [a.n, b, await c, (await d).n, s > 0]`, checkpointed(k, h))
	mustOK(t, r)
	jsonEq(t, r.Value, `[1, 3, 7, 2, true]`)
	// The read started at a check-in (echo#4) before the loop ended; the
	// effect started before it (add#3) waited for the checkpoint.
	if got, want := h.Events(), "echo#1 ckpt add#2 echo#4 ckpt add#3"; got != want {
		t.Fatalf("served %q, want %q", got, want)
	}
	if r.Checkpoints() != 2 || len(k.all) != 2 {
		t.Fatalf("%d checkpoints kept", r.Checkpoints())
	}
	// In flight at the second: the effect about to be sent, and the read
	// (running, or answered and not yet collected).
	second := k.all[1]
	if !second.Live || len(second.InFlight) != 2 || second.InFlight[0].CallID != 3 || !second.InFlight[0].Sending ||
		second.InFlight[1].CallID != 4 || second.InFlight[1].Sending {
		t.Fatalf("the second checkpoint's calls in flight: %+v", second.InFlight)
	}
}

// A checkpoint that is not kept stops its effect: it fails with the
// hook's error (UNAVAILABLE when it is no fault), and is never sent.
func TestEffectNotSentWithoutItsCheckpoint(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		code fault.Code
	}{
		{"plain error", errors.New("disk full"), fault.Unavailable},
		{"fault", fault.Limitf("checkpoint_bytes", "too big"), fault.LimitExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &logHost{}
			k := &checkpoints{t: t, host: h, fail: tc.err}
			r := run(t, `const a = await mcp.demo.echo({n: 1})
try { await mcp.demo.add({a: 1, b: 2}); return "sent" } catch (e) { return [a.n, e.code, e.tool] }`, checkpointed(k, h))
			mustOK(t, r)
			jsonEq(t, r.Value, fmt.Sprintf(`[1, %q, "demo:add"]`, tc.code))
			if got := h.Events(); got != "echo#1 ckpt" {
				t.Fatalf("served %q: the effect was sent", got)
			}
		})
	}
}

// A run killed while its effect is in flight continues from its last
// checkpoint in a fresh engine: what it computed before is there, the
// call in flight is made again (the host decides whether that is safe),
// the timer it waited for fires with what was left of it, and an answer
// it had not collected (a refusal) is handed in.
func TestContinueFromCheckpoint(t *testing.T) {
	h := &logHost{block: 3, hold: make(chan struct{})}
	k := &checkpoints{t: t, host: h}
	code := `let kept = (await mcp.demo.echo({n: 41})).n
const late = new Promise(r => setTimeout(() => r("timer"), 150))
const refused = mcp.demo.echo({pad: "x".repeat(200)}).catch(e => e.code)
const b = await mcp.demo.add({a: kept, b: 1})
return [kept, b, await late, await refused]`
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan *guest.Result, 1)
	go func() {
		req := guest.Request{Code: code, Tools: guest.DemoTools(), Limits: guest.Limits{Timeout: 30 * time.Second, ToolArgsBytes: 100}}
		checkpointed(k, h)(&req)
		done <- engine.Run(ctx, req)
	}()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(h.Events(), "add#3"); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the effect was never sent: %q", h.Events())
		}
	}
	cancel() // the runner dies with the effect in flight
	<-done
	s := k.last()
	if len(s.InFlight) != 1 || s.InFlight[0].CallID != 3 || len(s.Timers) != 1 || len(s.Ready) != 1 || s.Ready[0].Fault == nil {
		t.Fatalf("checkpoint: in flight %+v, timers %+v, ready %+v", s.InFlight, s.Timers, s.Ready)
	}

	other, err := guest.New(context.Background(), guest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(context.Background())
	again := &logHost{}
	k2 := &checkpoints{t: t, host: again}
	req := guest.Request{}
	checkpointed(k2, again)(&req)
	r := other.Resume(context.Background(), s, req, nil)
	mustOK(t, r)
	jsonEq(t, r.Value, `[41, 42, "timer", "LIMIT_EXCEEDED"]`)
	if got := again.Events(); got != "add#3" {
		t.Fatalf("the continuation served %q", got)
	}
	if len(r.Calls) != 3 || !r.Calls[2].OK {
		t.Fatalf("calls after the continuation: %+v", r.Calls)
	}

	t.Run("answered by the decision", func(t *testing.T) {
		unknown := &fault.Error{Code: fault.OutcomeUnknown, Message: "may or may not have happened", Tool: "demo:add"}
		none := &logHost{}
		req := guest.Request{Host: none}
		d := other.Resume(context.Background(), roundTrip(t, s), req, map[int]guest.Decision{3: {Outcome: &guest.Outcome{Error: unknown}}})
		if d.OK || d.Err == nil || d.Err.Code != fault.OutcomeUnknown {
			t.Fatalf("want the script to fail OUTCOME_UNKNOWN, got ok=%v %+v", d.OK, d.Err)
		}
		if none.Events() != "" {
			t.Fatalf("the decided call was made: %q", none.Events())
		}
		ok := other.Resume(context.Background(), roundTrip(t, s), req, map[int]guest.Decision{3: {Outcome: &guest.Outcome{Result: json.RawMessage(`42`)}}})
		mustOK(t, ok)
		jsonEq(t, ok.Value, `[41, 42, "timer", "LIMIT_EXCEEDED"]`)
	})
}

// Without effects, a run is checkpointed where it waits once the interval
// has passed, and not in between.
func TestCheckpointInterval(t *testing.T) {
	k := &checkpoints{t: t}
	r := run(t, `for (let i = 0; i < 6; i++) await mcp.demo.sleep({ms: 30}); return 1`, func(r *guest.Request) {
		r.Checkpoint, r.IsEffect, r.CheckpointEvery = k.hook, effectAdd, 50*time.Millisecond
	})
	mustOK(t, r)
	if n := r.Checkpoints(); n < 1 || n > 4 {
		t.Fatalf("%d checkpoints over ~180 ms at one per 50 ms", n)
	}
	for _, s := range k.all {
		if len(s.InFlight) != 1 || s.InFlight[0].Tool != "sleep" || s.InFlight[0].Sending {
			t.Fatalf("an interval checkpoint: %+v", s.InFlight)
		}
	}
}

// An effect the script never waits for is never sent: it ended first.
func TestHeldEffectNotSentWhenTheScriptEnds(t *testing.T) {
	h := &logHost{}
	k := &checkpoints{t: t, host: h}
	r := run(t, `mcp.demo.add({a: 1, b: 2}); let s = 0; for (let i = 0; i < 100000; i++) s += i; return s > 0`, checkpointed(k, h))
	mustOK(t, r)
	if h.Events() != "" || len(r.Calls) != 1 || r.Calls[0].Status != "not_run" {
		t.Fatalf("served %q, calls %+v", h.Events(), r.Calls)
	}
}
