package guest_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/trace"
)

// parkAdd parks every call to demo:add.
func parkAdd(c guest.Call) guest.Gate { return guest.Gate{Park: c.Tool == "add"} }

// roundTrip stores and loads a suspension the way the stores do (JSON), so
// nothing reaches Resume that would not survive a process boundary.
func roundTrip(t *testing.T, s *guest.Suspension) *guest.Suspension {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var out guest.Suspension
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

func suspendRun(t *testing.T, code string, mods ...func(*guest.Request)) *guest.Result {
	t.Helper()
	r := run(t, code, append([]func(*guest.Request){func(r *guest.Request) { r.Park = parkAdd }}, mods...)...)
	if r.Suspended == nil {
		t.Fatalf("the run did not suspend: ok=%v err=%+v value=%s", r.OK, r.Err, r.Value)
	}
	return r
}

func resume(t *testing.T, e *guest.Engine, s *guest.Suspension, d map[int]guest.Decision) *guest.Result {
	t.Helper()
	return e.Resume(context.Background(), roundTrip(t, s), guest.Request{Host: guest.DemoHost{}, Park: parkAdd}, d)
}

const approvalScript = `let v = 41
const e = await mcp.demo.echo({k: 1})
try {
  const s = await mcp.demo.add({a: v, b: 1})
  return ["approved", s, e.k]
} catch (err) {
  return ["caught", err.code, err.message, v]
}`

func TestSuspendAndResume(t *testing.T) {
	r := suspendRun(t, approvalScript)
	s := r.Suspended
	if r.OK || r.Err != nil || len(s.Parked) != 1 {
		t.Fatalf("suspended result: ok=%v err=%+v parked=%+v", r.OK, r.Err, s.Parked)
	}
	p := s.Parked[0]
	if p.CallID != 2 || p.Server != "demo" || p.Tool != "add" || string(p.Args) != `{"a":41,"b":1}` {
		t.Fatalf("parked call = %+v", p)
	}
	if len(r.Calls) != 2 || !r.Calls[0].OK || r.Calls[1].Status != trace.StatusParked {
		t.Fatalf("calls at suspension: %+v", r.Calls)
	}

	t.Run("approve, in another engine", func(t *testing.T) {
		other, err := guest.New(context.Background(), guest.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close(context.Background())
		a := resume(t, other, s, map[int]guest.Decision{2: {Approve: true}})
		mustOK(t, a)
		jsonEq(t, a.Value, `["approved", 42, 1]`)
		if len(a.Calls) != 2 || !a.Calls[1].OK || a.Calls[1].Status != "" {
			t.Fatalf("calls after approval: %+v", a.Calls)
		}
	})
	t.Run("reject", func(t *testing.T) {
		rj := resume(t, engine, s, map[int]guest.Decision{2: {Approve: false, Reason: "not today"}})
		mustOK(t, rj)
		jsonEq(t, rj.Value, `["caught", "REJECTED", "the call was rejected: not today", 41]`)
		if rj.Calls[1].ErrorCode != fault.Rejected {
			t.Fatalf("rejected call record: %+v", rj.Calls[1])
		}
	})
	t.Run("a rejection rethrown keeps its code", func(t *testing.T) {
		r := suspendRun(t, "await mcp.demo.add({a: 1, b: 2})")
		rj := resume(t, engine, r.Suspended, map[int]guest.Decision{1: {}})
		if rj.OK || rj.Err == nil || rj.Err.Code != fault.Rejected {
			t.Fatalf("want REJECTED, got %+v", rj.Err)
		}
	})
	t.Run("no decision: suspends again", func(t *testing.T) {
		again := resume(t, engine, s, nil)
		if again.Suspended == nil || again.Suspended.Suspends != 2 || len(again.Suspended.Parked) != 1 {
			t.Fatalf("want a second suspension, got ok=%v err=%+v", again.OK, again.Err)
		}
	})
	t.Run("another guest build", func(t *testing.T) {
		bad := roundTrip(t, s)
		bad.GuestHash = "0000000000000000"
		r := engine.Resume(context.Background(), bad, guest.Request{Host: guest.DemoHost{}}, nil)
		if r.OK || r.Err == nil || r.Err.Code != fault.ResumeIncompatible {
			t.Fatalf("want RESUME_INCOMPATIBLE, got %+v", r.Err)
		}
	})
}

func TestSuspendTwice(t *testing.T) {
	r := suspendRun(t, "const a = await mcp.demo.add({a: 1, b: 2}); const b = await mcp.demo.add({a: a, b: 10}); return b")
	r2 := resume(t, engine, r.Suspended, map[int]guest.Decision{1: {Approve: true}})
	if r2.Suspended == nil || r2.Suspended.Parked[0].CallID != 2 || string(r2.Suspended.Parked[0].Args) != `{"a":3,"b":10}` {
		t.Fatalf("want the second call parked, got %+v %+v", r2.Err, r2.Suspended)
	}
	r3 := resume(t, engine, r2.Suspended, map[int]guest.Decision{2: {Approve: true}})
	mustOK(t, r3)
	jsonEq(t, r3.Value, "13")
}

func TestParkedCallsOfAFinishedScriptNeverRun(t *testing.T) {
	r := run(t, "mcp.demo.add({a: 1, b: 2}); return 'done'", func(r *guest.Request) { r.Park = parkAdd })
	mustOK(t, r)
	if r.Suspended != nil || len(r.Calls) != 1 || r.Calls[0].Status != trace.StatusNotRun {
		t.Fatalf("calls = %+v suspended=%v", r.Calls, r.Suspended != nil)
	}
}

func TestSuspendWaitsForRunningWork(t *testing.T) {
	// A timer still pending or another call in flight can settle the
	// script: no suspension until they have.
	r := run(t, `let t = false
setTimeout(() => { t = true }, 50)
const [a, s] = await Promise.all([mcp.demo.add({a: 1, b: 1}).catch(e => e.code), mcp.demo.sleep({ms: 30})])
return [a, s.slept_ms, t]`, func(r *guest.Request) { r.Park = parkAdd })
	if r.Suspended == nil {
		t.Fatalf("want a suspension, got %+v %s", r.Err, r.Value)
	}
	if len(r.Calls) != 2 || r.Calls[1].Status != "" || !r.Calls[1].OK {
		t.Fatalf("the sleep should have finished before the suspension: %+v", r.Calls)
	}
	d := resume(t, engine, r.Suspended, map[int]guest.Decision{1: {Approve: true}})
	mustOK(t, d)
	jsonEq(t, d.Value, `[2, 30, true]`)
}

func TestDeadlineCountsRunningTimeOnly(t *testing.T) {
	spin := func(ms int) string {
		return "{ const end = Date.now() + " + itoa(ms) + "; while (Date.now() < end) {} }\n"
	}
	// 600 ms of spinning under a 1.2 s deadline leaves room for a loaded
	// machine; 1.3 s of it cannot fit.
	limit := func(r *guest.Request) { r.Limits.Timeout = 1200 * time.Millisecond }
	r := suspendRun(t, spin(300)+"await mcp.demo.add({a: 1, b: 1})\n"+spin(300)+"return 'ok'", limit)
	time.Sleep(1300 * time.Millisecond) // waiting while suspended is free...
	ok := resume(t, engine, r.Suspended, map[int]guest.Decision{1: {Approve: true}})
	mustOK(t, ok)
	r = suspendRun(t, spin(300)+"await mcp.demo.add({a: 1, b: 1})\n"+spin(1000)+"return 'late'", limit)
	late := resume(t, engine, r.Suspended, map[int]guest.Decision{1: {Approve: true}})
	if late.OK || late.Err == nil || late.Err.Code != fault.Timeout { // ...running is not
		t.Fatalf("want TIMEOUT after 1.3 s of running, got %+v %s", late.Err, late.Value)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// typicalAgentScript holds a few tool results, as an agent's script does
// when it reaches the call that needs approval.
const typicalAgentScript = `const items = []
for (let i = 0; i < 5; i++) items.push(await mcp.demo.echo({id: i, title: "item " + i, body: "x".repeat(500)}))
const total = items.reduce((n, it) => n + it.body.length, 0)
await mcp.demo.add({a: total, b: 1})
return items.length`

// TestSuspendedSizeOfATypicalScript: what a store keeps for a typical agent
// script is small (the target is 64 KB).
func TestSuspendedSizeOfATypicalScript(t *testing.T) {
	r := suspendRun(t, typicalAgentScript)
	b, _ := json.Marshal(r.Suspended)
	t.Logf("memory diff %d bytes, whole suspension as JSON %d bytes", len(r.Suspended.Memory), len(b))
	if len(b) > 64<<10 {
		t.Fatalf("a typical suspension takes %d bytes; want ≤ 64 KiB", len(b))
	}
	d := resume(t, engine, r.Suspended, map[int]guest.Decision{6: {Approve: true}})
	mustOK(t, d)
	jsonEq(t, d.Value, "5")
}

// heapScript holds ~4 MiB of live heap when it suspends.
const heapScript = `const keep = []
for (let i = 0; i < 4096; i++) keep.push("k" + i + "-".repeat(1000))
await mcp.demo.add({a: keep.length, b: 0})
return keep.length`

// BenchmarkResume4MiB measures resuming a run that holds ~4 MiB of live
// heap: a fresh instance, the memory restored, the approved call run and
// the script finished. The suspension is decoded from JSON first, untimed,
// as a store would hand it over.
func BenchmarkResume4MiB(b *testing.B) {
	r := engine.Run(context.Background(), guest.Request{Code: heapScript, Tools: guest.DemoTools(), Host: guest.DemoHost{}, Park: parkAdd})
	if r.Suspended == nil {
		b.Fatal(r.Err)
	}
	raw, _ := json.Marshal(r.Suspended)
	for b.Loop() {
		b.StopTimer()
		var s guest.Suspension
		if err := json.Unmarshal(raw, &s); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		d := engine.Resume(context.Background(), &s, guest.Request{Host: guest.DemoHost{}}, map[int]guest.Decision{1: {Approve: true}})
		if !d.OK {
			b.Fatal(d.Err)
		}
	}
	b.ReportMetric(float64(len(r.Suspended.Memory)), "bytes/suspension")
}
