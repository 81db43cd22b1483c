package guest_test

import (
	"strings"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
)

// outOfMemory meets the heap limit in every place the engine allocates:
// built-ins, error objects, the prelude (console, tool arguments and
// results), JSON in both directions, the result, promise machinery and
// async frames, and in every shape a script may try: exhausting the heap
// at once, catching the failure and inspecting it, catching it in a loop.
// Before the run ended at the first failed allocation, these gave the
// caller SCRIPT_ERROR "Uncaught null" (QuickJS throws null when it cannot
// create the error), SANDBOX_ERROR (a failed push left an array longer
// than its storage, and a later access went out of bounds), TIMEOUT, or
// let the script carry on with what a half-done built-in left.
var outOfMemory = []struct{ name, code string }{
	{"small objects", "const a = []; for (;;) a.push({})"},
	{"caught and inspected", "const a = []; try { for (;;) a.push({}) } catch (e) { return [typeof e, e === null, String(e)] }"},
	{"caught in a loop", "let a = []; for (;;) { try { a.push(new Array(1e5).fill(1)) } catch (e) { a = [] } }"},
	{"caught and retried", "let n = 0; const a = []; for (;;) { try { a.push({n}) } catch (e) { n++ } }"},
	{"an array shortened after a failed push", "const hog = []; for (const s of [1 << 20, 1 << 16, 1 << 12, 1 << 8]) { try { for (;;) hog.push(new Uint8Array(s)) } catch (e) {} }\ntry { for (;;) hog.push(null) } catch (e) {}\nhog.length = 0; return 1"},
	{"one buffer past the limit", "try { new ArrayBuffer(1 << 30) } catch (e) { return 'caught' }"},
	{"one string past the limit", "try { 'x'.repeat(1 << 29) } catch (e) { return 'caught' }"},
	{"an array's storage", "const a = []; for (let i = 0;; i++) a[i] = i"},
	{"a Map", "const m = new Map(); for (let i = 0;; i++) m.set(i, i)"},
	{"an object's properties", "const o = {}; for (let i = 0;; i++) o['k' + i] = i"},
	{"strings", "const xs = []; for (;;) xs.push('x'.repeat(1 << 16) + xs.length)"},
	{"closures", "const fs = []; for (;;) fs.push(() => fs)"},
	{"error objects", "const es = []; for (;;) es.push(new Error('x'))"},
	{"promise reactions", "for (;;) Promise.resolve().then(() => {})"},
	{"pending promises", "const p = []; for (;;) p.push(new Promise(() => {}))"},
	{"async functions", "const ps = []; for (;;) ps.push((async () => { await null })())"},
	{"Array.prototype.map results", "const keep = [], base = Array.from({length: 1000}, (_, i) => i); for (;;) keep.push(base.map((x) => x + 1))"},
	{"Object.entries results", "const o = {}; for (let i = 0; i < 1000; i++) o['k' + i] = i; const keep = []; for (;;) keep.push(Object.entries(o))"},
	{"split", "return 'x'.repeat(2e6).split('').length"},
	{"regexp matches", "return 'ab'.repeat(1e6).match(/a/g).length"},
	{"JSON.parse", "return JSON.parse('[' + '{},'.repeat(5e5) + '1]').length"},
	{"JSON.stringify", "const s = 'x'.repeat(1e6); return JSON.stringify(new Array(20).fill(s)).length"},
	{"the result's JSON", "const s = 'x'.repeat(1e6); return new Array(20).fill(s)"},
	{"console.log", "const s = 'x'.repeat(3e6); console.log([s, s, s]); return 1"},
	{"tool arguments", "const s = 'x'.repeat(3e6); await mcp.demo.echo({a: s, b: s, c: s}); return 1"},
	{"tool results", "const keep = []; for (;;) keep.push(await mcp.demo.echo({x: 'y'.repeat(1e5) + keep.length}))"},
}

// TestOutOfMemoryEndsTheRun: wherever the heap limit is met, the run ends
// there as LIMIT_EXCEEDED (memory), which no script can catch, and the
// engine goes on serving.
func TestOutOfMemoryEndsTheRun(t *testing.T) {
	const heap = 8 << 20
	for _, tt := range outOfMemory {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, tt.code, func(r *guest.Request) { r.Limits.MemoryBytes = heap; r.Limits.Timeout = 20 * time.Second })
			if r.OK || r.Err.Code != fault.LimitExceeded || r.Err.Limit != fault.LimitMemory {
				t.Fatalf("want LIMIT_EXCEEDED (memory), got %+v %s", r.Err, r.Value)
			}
			if !strings.Contains(r.Err.Message, "out of memory") {
				t.Fatalf("message %q", r.Err.Message)
			}
			mustOK(t, run(t, "return 1"))
		})
	}
}

// TestGarbageIsCollectedWithinTheLimit: with most of the heap live, cyclic
// garbage is collected before it fills the rest. QuickJS schedules its
// next collection at 1.5x the live heap, past the limit here, so before
// the guest brought it within the limit this run ended out of memory with
// megabytes of garbage collectable.
func TestGarbageIsCollectedWithinTheLimit(t *testing.T) {
	for _, live := range []string{"new Uint8Array(6e6)", "Array.from({length: 3000}, (_, i) => 'x'.repeat(2000) + i)"} {
		r := run(t, "const live = "+live+"\nfor (let i = 0; i < 3e5; i++) { const a = {}; a.self = a }\nreturn live.length", func(r *guest.Request) {
			r.Limits.MemoryBytes = 8 << 20
			r.Limits.Timeout = 20 * time.Second
		})
		mustOK(t, r)
	}
}
