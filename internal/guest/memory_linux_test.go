package guest

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"os"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
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

// swappedOut reads the process's page table as it would read had the
// kernel swapped out every page a run wrote: an anonymous page that is
// present becomes a swap entry (not present, swapped, some swap offset).
// This machine has no swap to do it for real (see TestResetAfterPageout).
type swappedOut struct{ table io.ReaderAt }

func (s swappedOut) ReadAt(p []byte, off int64) (int, error) {
	n, err := s.table.ReadAt(p, off)
	for i := 0; i+8 <= n; i += 8 {
		e := binary.LittleEndian.Uint64(p[i:])
		if e&pmPresent != 0 && e&pmFile == 0 {
			e = pmSwapped | uint64(i/8+1)<<5 | 1 // swap type 1, an offset
			binary.LittleEndian.PutUint64(p[i:], e)
		}
	}
	return n, err
}

// writeAllOver runs code on in that writes many pages and checks there are
// written pages to find.
func writeAllOver(t *testing.T, e *Engine, in *instance) {
	t.Helper()
	ctx := context.Background()
	code := "globalThis.x = 'secret-' + 'y'.repeat(200000); const a = []; for (let i = 0; i < 2000; i++) a.push({i, s: 'z' + i}); return a.length"
	x := newExecution(ctx, e, Request{Code: code}, e.defaults, &Result{}, time.Now())
	cfg, _ := encodeConfig(Request{Code: code}, e.defaults)
	if _, ferr := x.run(in, cfg, 1); ferr != nil {
		t.Fatal(ferr)
	}
	x.shutdown()
}

// TestResetRestoresSwappedPages: a page the run wrote and the kernel then
// swapped out is not present, yet holds the run's bytes (they come back on
// the next access). The reset must give it the image's bytes like any
// written page: only a page the page table proves unwritten is skipped.
func TestResetRestoresSwappedPages(t *testing.T) {
	ctx := context.Background()
	e := imageEngine(t)
	in, err := e.newInstance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer in.close(ctx)
	if pagemap() == nil {
		t.Skip("no /proc/self/pagemap")
	}
	writeAllOver(t, e, in)
	size := int(in.mod.Memory().Size())
	written, _ := in.mem.dirtyPages(size)
	written = append([]int(nil), written...)
	if len(written) == 0 {
		t.Fatal("the run left no written page to find")
	}

	in.mem.table = swappedOut{pagemap()}
	defer func() { in.mem.table = nil }()
	if got, ok := in.mem.dirtyPages(size); !ok || !equalInts(got, written) {
		t.Errorf("with the written pages swapped out, %d pages are found written (known: %v); want the %d written", len(got), ok, len(written))
	}
	if !e.snap.reset(in) {
		t.Fatal("the instance could not be reset")
	}
	got, _ := in.mod.Memory().Read(0, uint32(size))
	for off := 0; off < len(got); off += pageSize {
		if !bytes.Equal(got[off:off+pageSize], e.snap.img.view[off:off+pageSize]) {
			t.Fatalf("after reset, page %d (swapped out) still holds the run's bytes", off/pageSize)
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestPageWritten: which page-table entries prove a page unwritten since
// the last reset. Inside the image, a present page of the file is the
// image's own and an entry with neither bit is unmapped (the next access
// reads the image); everything else (an anonymous copy, a swap or
// migration entry of either) may hold other bytes. Past the image only
// the empty entry proves a page unwritten.
func TestPageWritten(t *testing.T) {
	for _, c := range []struct {
		name    string
		entry   uint64
		inImage bool
		want    bool
	}{
		{"unmapped in the image", 0, true, false},
		{"the image's own page", pmPresent | pmFile, true, false},
		{"a private copy in the image", pmPresent, true, true},
		{"a private copy swapped out", pmSwapped | 1<<5, true, true},
		{"swapped, soft-dirty bit only", pmSwapped | 1<<55, true, true},
		{"a file page migrating", pmSwapped | pmFile, true, true},
		{"unmapped past the image", 0, false, false},
		{"present past the image", pmPresent, false, true},
		{"a file page past the image", pmPresent | pmFile, false, true},
		{"swapped past the image", pmSwapped, false, true},
	} {
		if got := pageWritten(c.entry, c.inImage); got != c.want {
			t.Errorf("%s (%#x): written = %v, want %v", c.name, c.entry, got, c.want)
		}
	}
}

// TestResetAfterPageout is TestResetRestoresSwappedPages for real where the
// machine has swap: a written page pushed out with MADV_PAGEOUT, then a
// reset. Skipped without swap, or when the kernel keeps the page in.
func TestResetAfterPageout(t *testing.T) {
	swaps, err := os.ReadFile("/proc/swaps")
	if err != nil || len(strings.Split(strings.TrimSpace(string(swaps)), "\n")) < 2 {
		t.Skip("no swap on this machine: TestResetRestoresSwappedPages simulates it")
	}
	ctx := context.Background()
	e := imageEngine(t)
	in, err := e.newInstance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer in.close(ctx)
	writeAllOver(t, e, in)
	size := int(in.mod.Memory().Size())
	written, ok := in.mem.dirtyPages(size)
	if !ok || len(written) == 0 {
		t.Skip("the page table does not say which pages were written")
	}
	p := written[len(written)/2]
	page := in.mem.mapping[p*pageSize : (p+1)*pageSize]
	if err := unix.Madvise(page, unix.MADV_PAGEOUT); err != nil {
		t.Skipf("MADV_PAGEOUT: %v", err)
	}
	var entry [8]byte
	addr := uintptr(unsafe.Pointer(&page[0]))
	if _, err := pagemap().ReadAt(entry[:], int64(addr/pageSize*8)); err != nil {
		t.Fatal(err)
	}
	if binary.LittleEndian.Uint64(entry[:])&pmSwapped == 0 {
		t.Skip("the kernel did not swap the page out")
	}
	if !e.snap.reset(in) {
		t.Fatal("the instance could not be reset")
	}
	if !bytes.Equal(page, e.snap.img.view[p*pageSize:(p+1)*pageSize]) {
		t.Fatalf("after reset, page %d (paged out) still holds the run's bytes", p)
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

// BenchmarkReset times snapshot.reset alone, after each of a run of
// `return 1+1` (untimed): the reset on a fresh sandbox's hot path.
func BenchmarkReset(b *testing.B) {
	ctx := context.Background()
	e, err := New(ctx, Options{Prepared: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close(ctx)
	if e.snap.img == nil {
		b.Skip("no copy-on-write image")
	}
	in, err := e.newInstance(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer in.close(ctx)
	req := Request{Code: "return 1+1"}
	cfg, _ := encodeConfig(req, e.defaults)
	var seed int64
	for b.Loop() {
		b.StopTimer()
		seed++
		x := newExecution(ctx, e, req, e.defaults, &Result{}, time.Now())
		if _, ferr := x.run(in, cfg, seed); ferr != nil {
			b.Fatal(ferr)
		}
		x.shutdown()
		b.StartTimer()
		if !e.snap.reset(in) {
			b.Fatal("the instance could not be reset")
		}
	}
}
