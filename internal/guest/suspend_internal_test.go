package guest

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkSuspend4MiB measures suspending a run that holds ~4 MiB of live
// heap: finding the pages it changed and compressing them (the run up to
// the suspension is not timed).
func BenchmarkSuspend4MiB(b *testing.B) {
	ctx := context.Background()
	e, err := New(ctx, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close(ctx)
	const code = `const keep = []
for (let i = 0; i < 4096; i++) keep.push("k" + i + "-".repeat(1000))
await mcp.demo.add({a: keep.length, b: 0})
return keep.length`
	var size int
	for b.Loop() {
		b.StopTimer()
		req := Request{Code: code, Tools: DemoTools(), Host: DemoHost{}, Park: ParkAll(func(c Call) bool { return c.Tool == "add" })}
		limits := e.defaults
		cfg, _ := encodeConfig(req, limits)
		in, err := e.instance(ctx)
		if err != nil {
			b.Fatal(err)
		}
		x := newExecution(ctx, e, req, limits, &Result{ExecutionID: "ex_bench"}, time.Now())
		if _, ferr := x.run(in, cfg, rand.Int64()); ferr != errSuspend {
			b.Fatalf("did not suspend: %v", ferr)
		}
		b.StartTimer()
		s, ferr := x.suspension(in)
		b.StopTimer()
		if ferr != nil {
			b.Fatal(ferr)
		}
		size = len(s.Memory)
		x.shutdown()
		e.release(in, true)
		b.StartTimer()
	}
	b.ReportMetric(float64(size), "bytes/suspension")
}
