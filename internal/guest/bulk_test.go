package guest_test

import (
	"context"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
)

// TestBulkMemoryIsExact checks the chunked memory.fill and memory.copy of
// the build (loopcheck.awk) against loops written in JavaScript: copies
// that overlap in both directions by less than, exactly and more than one
// chunk, sizes around the chunk size, fills of ranges that start and end
// inside chunks, and memory reused by a zeroed allocation.
func TestBulkMemoryIsExact(t *testing.T) {
	const code = `const fails = []
const pattern = (n) => { const a = new Uint8Array(n); for (let i = 0; i < n; i++) a[i] = (i * 31 + 7) & 255; return a }
const differs = (a, b) => { for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return i; return -1 }
for (const n of [65535, 65537, 262147]) {
  for (const d of [1, 65536, 131075]) {
    for (const [to, from] of [[0, d], [d, 0]]) {
      const got = pattern(n + d), want = pattern(n + d)
      got.copyWithin(to, from, from + n)
      const tmp = []
      for (let i = 0; i < n; i++) tmp.push(want[from + i])
      for (let i = 0; i < n; i++) want[to + i] = tmp[i]
      const at = differs(got, want)
      if (at >= 0) fails.push("copyWithin(" + to + ", " + from + ", " + (from + n) + ") differs at " + at)
    }
  }
  const got = pattern(n + 70000), want = pattern(n + 70000)
  got.fill(9, 3, n + 3)
  for (let i = 3; i < n + 3; i++) want[i] = 9
  const at = differs(got, want)
  if (at >= 0) fails.push("fill(9, 3, " + (n + 3) + ") differs at " + at)
  const shared = pattern(n + 5), ref = pattern(n + 5)
  shared.set(shared.subarray(0, n), 5)
  for (let i = n - 1; i >= 0; i--) ref[i + 5] = ref[i]
  if (differs(shared, ref) >= 0) fails.push("set over itself, size " + n)
}
{
  let dirty = new Uint8Array((1 << 21) + 17).fill(255)
  dirty = null
  const fresh = new Uint8Array(new ArrayBuffer((1 << 21) + 17))
  for (let i = 0; i < fresh.length; i++) if (fresh[i] !== 0) { fails.push("a new ArrayBuffer is not zero at " + i); break }
}
return fails`
	r := run(t, code, func(r *guest.Request) { r.Limits.Timeout = time.Minute })
	mustOK(t, r)
	jsonEq(t, r.Value, "[]")
}

// BenchmarkBulkFillDeadline is the bound on bulk memory as a figure: a
// loop filling 60 MB, again and again, under a 1 s deadline. It reports
// how long the run took (target ≤ 1.1 s); before the build chunked
// memory.fill it took 2–5 s.
func BenchmarkBulkFillDeadline(b *testing.B) {
	var worst time.Duration
	for b.Loop() {
		start := time.Now()
		r := engine.Run(context.Background(), guest.Request{
			Code:   "const a = new Uint8Array(6e7); for (;;) a.fill(1)",
			Limits: guest.Limits{Timeout: time.Second},
		})
		if r.OK || r.Err.Code != fault.Timeout {
			b.Fatalf("want TIMEOUT, got %+v", r.Err)
		}
		worst = max(worst, time.Since(start))
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/run")
	b.ReportMetric(float64(worst.Milliseconds()), "worst-ms")
}
