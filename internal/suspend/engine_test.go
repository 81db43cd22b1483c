package suspend_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/suspend"
)

// addHost serves demo:add.
type addHost struct{}

func (addHost) CallTool(_ context.Context, c guest.Call) (json.RawMessage, error) {
	var a struct{ A, B float64 }
	if err := json.Unmarshal(c.Args, &a); err != nil {
		return nil, err
	}
	return json.Marshal(a.A + a.B)
}

// bigHeapScript fills ~1.2 MB of the heap with random numbers (which no
// compression shrinks), waits for an approval, and checks afterwards that
// every number survived.
const bigHeapScript = `const a = new Float64Array(150000)
for (let i = 0; i < a.length; i++) a[i] = Math.random()
let before = 0
for (let i = 0; i < a.length; i++) before += a[i]
const r = await mcp.demo.add({a: 41, b: 1})
let after = 0
for (let i = 0; i < a.length; i++) after += a[i]
return [r, after === before, a.length]`

// TestRealSuspensionResumes suspends a real run, stores it, claims it
// through another store over the same storage (another process, in
// effect) and resumes it in the engine: what the store keeps is enough to
// continue the script, its heap intact.
func TestRealSuspensionResumes(t *testing.T) {
	ctx := context.Background()
	res := engine.Run(ctx, guest.Request{
		Code: bigHeapScript, Tools: tools, Host: addHost{},
		Limits: guest.Limits{Timeout: 10 * time.Second},
		Park:   guest.ParkAll(func(c guest.Call) bool { return c.Tool == "add" }),
	})
	if res.Suspended == nil {
		t.Fatalf("the run did not suspend: ok=%v err=%+v", res.OK, res.Err)
	}
	if n := len(res.Suspended.Memory); n < 1<<20 {
		t.Fatalf("memory image of %d bytes; the test wants over 1 MiB", n)
	}
	t.Logf("memory image: %d bytes", len(res.Suspended.Memory))
	forEachStore(t, func(t *testing.T, s suspend.Store, clk *clock, loc location) {
		r := &suspend.Record{ID: res.ExecutionID, Principal: "alice", Suspension: res.Suspended}
		if err := s.Save(ctx, r); err != nil {
			t.Fatal(err)
		}
		c, err := loc.open(suspend.Options{Now: clk.Now}).Claim(ctx, r.ID, r.Version, "alice")
		if err != nil {
			t.Fatal(err)
		}
		parked := c.Suspension.Pending()
		if len(parked) != 1 || parked[0].Tool != "add" {
			t.Fatalf("parked calls %+v", parked)
		}
		out := engine.Resume(ctx, c.Suspension, guest.Request{Host: addHost{}}, map[int]guest.Decision{parked[0].CallID: {Approve: true}})
		if !out.OK {
			t.Fatalf("resumed run failed: %+v", out.Err)
		}
		if string(out.Value) != `[42,true,150000]` {
			t.Fatalf("resumed run returned %s", out.Value)
		}
		if err := s.Finish(ctx, r.ID, c.Version, suspend.Done, ""); err != nil {
			t.Fatal(err)
		}
	})
}
