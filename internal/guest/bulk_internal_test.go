package guest

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// bulkOps are built-ins that move a large block of memory in one step:
// with bulk memory on, each memset, memcpy or memmove in QuickJS is a
// single memory.fill or memory.copy, and before the build chunked them a
// loop of these ran seconds past its deadline between two check-ins. bytes
// is what one op moves (at least). The string built-ins at the end build
// their results in C loops, which were checked in already; they stay here
// so a change in QuickJS that makes them one memcpy is caught.
var bulkOps = []struct {
	name, setup, op string
	bytes           float64
}{
	{"Uint8Array fill", "const a = new Uint8Array(6e7)", "a.fill(1)", 6e7},
	{"copyWithin downwards", "const a = new Uint8Array(6e7)", "a.copyWithin(0, 1)", 6e7},
	{"copyWithin upwards", "const a = new Uint8Array(6e7)", "a.copyWithin(1, 0)", 6e7},
	{"TypedArray set", "const a = new Uint8Array(3e7), b = new Uint8Array(3e7)", "b.set(a)", 3e7},
	{"ArrayBuffer allocation", "", "new ArrayBuffer(6e7)", 6e7},
	{"TypedArray slice", "const a = new Uint8Array(3e7)", "a.slice()", 3e7},
	{"ArrayBuffer slice", "const a = new ArrayBuffer(3e7)", "a.slice(0)", 3e7},
	{"TypedArray from a TypedArray", "const a = new Uint8Array(3e7)", "new Uint8Array(a)", 3e7},
	{"Array shift of a long array", "const a = []; for (let i = 0; i < 3e6; i++) a.push(0)", "a.shift()", 2.4e7},
	{"string slice", "const s = 'x'.repeat(3e7)", "s.slice(1)", 3e7},
	{"string repeat", "", "'x'.repeat(1e7)", 1e7},
	{"padStart", "", "''.padStart(1e7, 'ab')", 1e7},
}

// TestBulkMemoryChecksIn runs each bulk operation a bounded number of
// times and counts the guest's check-ins (twice as many rounds less one
// set of rounds, so the setup and the end of the run count for nothing):
// however large one operation, the guest must check in at least once per
// 4 MiB it moves, which is what keeps a loop of them within milliseconds
// of its deadline. Counting check-ins keeps the test independent of the
// machine's speed.
func TestBulkMemoryChecksIn(t *testing.T) {
	ctx := context.Background()
	e, err := New(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	const rounds = 8
	for _, tt := range bulkOps {
		t.Run(tt.name, func(t *testing.T) {
			count := func(n int) int {
				code := fmt.Sprintf("%s\nfor (let i = 0; i < %d; i++) %s\nreturn 1", tt.setup, n, tt.op)
				checkIns, doc, ferr := runCounting(ctx, e, code)
				if ferr != nil || !doc.OK {
					t.Fatalf("failed: %v %+v", ferr, doc)
				}
				return checkIns
			}
			checkIns := count(2*rounds) - count(rounds)
			want := int(rounds * tt.bytes / (4 << 20))
			t.Logf("%d check-ins for %.0f MB", checkIns, rounds*tt.bytes/1e6)
			if checkIns < want {
				t.Fatalf("%d check-ins while moving %.0f MB; want at least %d (one per 4 MiB)", checkIns, rounds*tt.bytes/1e6, want)
			}
		})
	}
}

// runCounting runs code to its end on e and returns how many times the
// guest checked in.
func runCounting(ctx context.Context, e *Engine, code string) (int, *outputDoc, error) {
	req := Request{Code: code}
	limits := req.Limits.withDefaults(e.defaults).capped(e.max)
	cfg, ferr := encodeConfig(req, limits)
	if ferr != nil {
		return 0, nil, ferr
	}
	in, err := e.instance(ctx)
	if err != nil {
		return 0, nil, err
	}
	x := newExecution(ctx, e, req, limits, &Result{ExecutionID: "ex_count"}, time.Now())
	doc, ferr := x.run(in, cfg, 1)
	x.shutdown()
	e.release(in, !x.stopping && !x.trapped)
	if ferr != nil {
		return x.checkIns, doc, ferr
	}
	return x.checkIns, doc, nil
}
