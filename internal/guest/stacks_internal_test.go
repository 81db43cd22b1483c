package guest

import (
	"context"
	"testing"
	"time"
)

// TestStackRelease: a wait longer than stacksReleasedAfter
// lets the instance's call engines go; a short one keeps them; either way
// the release is over once the wait's end is reported.
func TestStackRelease(t *testing.T) {
	ctx := context.Background()
	e, err := New(ctx, Options{Prepared: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	in, err := e.instance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer e.release(in, false)
	made := func() int {
		n := 0
		for _, f := range in.fns {
			if f != nil {
				n++
			}
		}
		return n
	}
	for ex := range numExports {
		in.fn(ex)
	}
	if n := made(); n != int(numExports) {
		t.Fatalf("%d of %d exports made", n, numExports)
	}
	// One timer serves every wait: short, long, then the same again.
	var r stackRelease
	for round := range 2 {
		for ex := range numExports {
			in.fn(ex)
		}
		r.begin(in)
		r.end()
		if n := made(); n != int(numExports) {
			t.Errorf("round %d: a short wait released the stacks (%d of %d left)", round, n, numExports)
		}
		r.begin(in)
		time.Sleep(3 * stacksReleasedAfter)
		r.end()
		if n := made(); n != 0 {
			t.Errorf("round %d: a long wait kept %d call engines", round, n)
		}
	}
	var none stackRelease
	none.begin(nil) // a run not at a wait: nothing to release
	none.end()
}

// TestRunsAcrossLongWaits: a run whose calls outlast stacksReleasedAfter,
// one at a time (the call runs on the run's goroutine) and several at once
// (each on its own), carries on in call engines made anew, to the right
// result, step after step.
func TestRunsAcrossLongWaits(t *testing.T) {
	ctx := context.Background()
	e, err := New(ctx, Options{Prepared: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	code := `let n = 0
for (let i = 0; i < 3; i++) n += (await mcp.demo.sleep({ms: 25})).slept_ms > 0 ? 1 : 0
const [a, b] = await Promise.all([mcp.demo.sleep({ms: 25}), mcp.demo.echo({x: 7})])
return [n, a.slept_ms > 0, b.x]`
	if 25*time.Millisecond <= stacksReleasedAfter {
		t.Fatalf("the script's calls (25 ms) must outlast stacksReleasedAfter (%v)", stacksReleasedAfter)
	}
	for range 3 { // the instance comes back reset, its stacks made anew
		r := e.Run(ctx, Request{Code: code, Tools: DemoTools(), Host: DemoHost{}})
		if !r.OK {
			t.Fatalf("run failed: %v", r.Err)
		}
		if string(r.Value) != `[3,true,7]` {
			t.Fatalf("result %s, want [3,true,7]", r.Value)
		}
	}
}

// TestRestoredInstanceHoldsNoPrivatePages: a new instance over the image
// starts with no page of its own. Instantiating writes the module's data
// segments into memory; before the image was mapped after that, each new
// instance held its whole data section (~28 pages) as private copies.
func TestRestoredInstanceHoldsNoPrivatePages(t *testing.T) {
	ctx := context.Background()
	e, err := New(ctx, Options{Prepared: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	in, err := e.instance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer e.release(in, false)
	if in.mem == nil || in.mem.image == 0 {
		t.Skip("no copy-on-write image here")
	}
	pages, ok := in.mem.dirtyPages(int(in.mod.Memory().Size()))
	if !ok {
		t.Skip("the kernel does not say which pages were written")
	}
	if len(pages) != 0 {
		t.Errorf("a new instance holds %d private pages (%v), want none", len(pages), pages)
	}
}
