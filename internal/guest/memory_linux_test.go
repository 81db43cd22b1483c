package guest

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// TestResetRestoresTheImage: after runs that write all over memory, a reset
// instance's memory is byte for byte the post-init image, whichever way the
// kernel let reset find the written pages.
// imageEngine is an engine without a pool over a copy-on-write image (the
// test is skipped where there is none).
func imageEngine(t *testing.T) *Engine {
	t.Helper()
	e, err := New(context.Background(), Options{Prepared: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	if e.snap.img == nil {
		t.Skip("no copy-on-write image")
	}
	return e
}

func TestResetRestoresTheImage(t *testing.T) {
	ctx := context.Background()
	e := imageEngine(t)
	in, err := e.newInstance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer in.close(ctx)
	for i, code := range []string{
		"globalThis.x = 'secret-' + 'y'.repeat(200000); return 1",
		"const a = []; for (let i = 0; i < 2000; i++) a.push({i, s: 'z' + i}); return a.length",
		"return 1",
	} {
		x := newExecution(ctx, e, Request{Code: code}, e.defaults, &Result{}, time.Now())
		cfg, _ := encodeConfig(Request{Code: code}, e.defaults)
		if _, ferr := x.run(in, cfg, int64(i+1)); ferr != nil {
			t.Fatal(ferr)
		}
		x.shutdown()
		if dirty, ok := in.mem.dirtyPages(int(in.mod.Memory().Size())); ok && len(dirty) == 0 {
			t.Fatalf("run %d left no written page to find", i)
		}
		if !e.snap.reset(in) {
			t.Fatalf("run %d: the instance could not be reset", i)
		}
		got, _ := in.mod.Memory().Read(0, in.mod.Memory().Size())
		if !bytes.Equal(got, e.snap.img.view) {
			for off := 0; off < len(got); off += pageSize {
				if !bytes.Equal(got[off:off+pageSize], e.snap.img.view[off:off+pageSize]) {
					t.Fatalf("run %d: after reset, page %d differs from the image", i, off/pageSize)
				}
			}
		}
	}
}

// TestChunksRestoreTheImage: the way without an image (written chunks)
// restores the same memory as mapping the image.
func TestChunksRestoreTheImage(t *testing.T) {
	ctx := context.Background()
	e := imageEngine(t)
	chunked := &snapshot{pages: e.snap.pages, stackPointer: e.snap.stackPointer}
	if err := chunked.diff(ctx, e.runtime, e.compiled, e.snap.img.view); err != nil {
		t.Fatal(err)
	}
	if len(chunked.chunks) == 0 || chunked.bytes >= len(e.snap.img.view) {
		t.Fatalf("%d chunks of %d bytes for a %d-byte image", len(chunked.chunks), chunked.bytes, len(e.snap.img.view))
	}
	in, err := chunked.restore(ctx, e.runtime, e.compiled)
	if err != nil {
		t.Fatal(err)
	}
	defer in.close(ctx)
	if in.mem != nil {
		t.Fatal("an instance restored from chunks claims an image under its memory")
	}
	got, _ := in.mod.Memory().Read(0, in.mod.Memory().Size())
	if !bytes.Equal(got, e.snap.img.view) {
		t.Fatal("memory restored from chunks differs from the image")
	}
}
