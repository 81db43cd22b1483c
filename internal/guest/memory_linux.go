//go:build linux

package guest

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"unsafe"

	"github.com/tetratelabs/wazero/experimental"
	"golang.org/x/sys/unix"
)

// Linear memory lives in its own anonymous mapping, reserved at the
// instance's maximum size up front. Growing is then just a longer slice of
// the same mapping: no copy of the whole memory on every memory.grow (which
// Go-slice-backed memory pays, and QuickJS grows often), untouched pages
// cost nothing, and multi-megabyte buffers stay out of the Go heap so they
// do not drive garbage collection. munmap returns everything on Close.
//
// Where the post-init image is available (an image), its first pages are
// instead a private, copy-on-write mapping of that image: a new instance
// starts in the post-init state without a byte being copied, pages are
// copied only when the run writes them, and madvise(MADV_DONTNEED) turns a
// used instance back into the image (see reset).

// MemoryCharged reports whether runs charge their linear memory's growth
// to the MemoryBudget in their context. Here they do: the engine maps the
// memory itself and sees every memory.grow (Reallocate).
const MemoryCharged = true

// mappedMemory implements experimental.LinearMemory over one mapping.
type mappedMemory struct {
	mapping []byte
	image   int // bytes at the start that map the image (0: none)
	// size is the length Reallocate last returned. Growth past it is
	// charged to budget, the run's (bind); charged is what budget granted
	// and gets back when the mapping goes.
	size    uint64
	budget  MemoryBudget
	charged int64
	// Buffers dirtyPages reuses: it runs on every reset, and a fresh
	// pagemap buffer each time was most of a run's garbage.
	entries []byte
	dirty   []int
	// table reads the page table's entries (pagemap's format); nil reads
	// the process's own, /proc/self/pagemap. Tests put a reader here that
	// reports pages swapped out, which this machine may have no swap to do.
	table io.ReaderAt
}

// allocator returns the memory allocator for new instances: mapped memory,
// over img when it is not nil. Each memory it makes is also handed to made,
// so the engine can reset it later.
func allocator(img *image, made func(*mappedMemory)) experimental.MemoryAllocator {
	return experimental.MemoryAllocatorFunc(func(_, max uint64) experimental.LinearMemory {
		m := allocateMapped(img, max)
		if made != nil {
			made(m)
		}
		return m
	})
}

// withMemoryAllocator puts the allocator in ctx for InstantiateModule.
func withMemoryAllocator(ctx context.Context, a experimental.MemoryAllocator) context.Context {
	return experimental.WithMemoryAllocator(ctx, a)
}

func allocateMapped(img *image, max uint64) *mappedMemory {
	if max == 0 {
		max = 1 << 16
	}
	b, err := unix.Mmap(-1, 0, int(max), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON|unix.MAP_NORESERVE)
	if err != nil {
		return &mappedMemory{}
	}
	m := &mappedMemory{mapping: b}
	if img != nil && uint64(img.size) <= max {
		// The image replaces the start of the reservation in place.
		if _, err := mmapFixed(b, img.fd, img.size); err == nil {
			m.image = img.size
		}
	}
	return m
}

// mmapFixed maps fd privately over the first n bytes of dst.
func mmapFixed(dst []byte, fd, n int) ([]byte, error) {
	addr := uintptr(unsafe.Pointer(&dst[0]))
	r, _, errno := unix.Syscall6(unix.SYS_MMAP, addr, uintptr(n), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_FIXED, uintptr(fd), 0)
	if errno != 0 {
		return nil, errno
	}
	if r != addr {
		return nil, fmt.Errorf("mmap moved the image to %#x", r)
	}
	return dst[:n], nil
}

// Reallocate implements experimental.LinearMemory. Growth is charged to
// the run's budget first; a refusal fails the memory.grow, which the guest
// meets as it meets its own limit.
func (m *mappedMemory) Reallocate(size uint64) []byte {
	if size > uint64(len(m.mapping)) {
		return nil
	}
	if size > m.size && m.budget != nil {
		n := int64(size - m.size)
		if !m.budget.Grow(n) {
			return nil
		}
		m.charged += n
	}
	m.size = max(m.size, size)
	return m.mapping[:size:size]
}

// bind makes the run about to use this memory charge its growth to the
// budget in ctx (none when ctx has none). A reused instance's memory has
// not grown (snapshot.reset), so nothing is carried from the run before;
// whatever was charged is given back all the same.
func (m *mappedMemory) bind(ctx context.Context) {
	if m == nil {
		return
	}
	m.uncharge()
	m.budget = memoryBudgetFrom(ctx)
}

func (m *mappedMemory) uncharge() {
	if m.budget != nil && m.charged > 0 {
		m.budget.Free(m.charged)
	}
	m.charged = 0
}

// Free implements experimental.LinearMemory: the budget gets back what it
// granted once the pages are unmapped, not when the run ends, so that what
// it counts is never less than what is mapped.
func (m *mappedMemory) Free() {
	defer m.uncharge()
	if m.mapping != nil {
		_ = unix.Munmap(m.mapping)
		m.mapping = nil
	}
}

// reset makes the memory read as the image again, in place. Every page the
// runs wrote gets the image's bytes back (zeros past its end), copied over
// the private copy rather than dropped: a page fault costs more than a 4 KiB
// copy (tens of microseconds in a microVM), and the next run will likely
// write the same pages. Pages only read are still the image's own. Where
// the kernel will not say which pages were written, every private copy is
// dropped instead (madvise). It reports false when the memory has no image
// under it and cannot be reset.
func (m *mappedMemory) reset(size int, img *image) bool {
	if m.image == 0 || m.mapping == nil || size > m.image {
		return false
	}
	pages, ok := m.dirtyPages(size)
	if !ok {
		return unix.Madvise(m.mapping[:m.image], unix.MADV_DONTNEED) == nil
	}
	for _, p := range pages {
		off := p * pageSize
		dst := m.mapping[off : off+pageSize]
		if off+pageSize <= len(img.view) {
			copy(dst, img.view[off:off+pageSize])
		} else {
			clear(dst)
		}
	}
	return true
}

// forgetWrites makes every page of the image read as the image's own
// again, dropping whatever was written over them: at instantiation wazero
// writes the guest's data segments over the mapping (the same bytes the
// image holds there), which would otherwise leave those pages private
// copies in every instance, found written, and copied back, by every reset.
func (m *mappedMemory) forgetWrites() {
	if m.image > 0 && m.mapping != nil {
		_ = unix.Madvise(m.mapping[:m.image], unix.MADV_DONTNEED)
	}
}

// populate faults in the pages of b for writing, in one call rather than a
// fault per page (MADV_POPULATE_WRITE, Linux 5.14); where the kernel cannot,
// the pages fault in as they are written.
func populate(b []byte) {
	if len(b) > 0 {
		_ = unix.Madvise(b, unix.MADV_POPULATE_WRITE)
	}
}

// image is the guest's linear memory right after pml_init, in a sealed
// memfd that instances map copy-on-write.
type image struct {
	fd   int
	size int
	view []byte // the image, mapped read-only
}

// bytes returns the image's contents: the page cache's pages, mapped
// read-only, not a copy.
func (img *image) bytes() []byte { return img.view }

// newImage copies mem into a new sealed memfd. Only non-zero pages are
// written, so the file is as sparse as the memory.
func newImage(mem []byte) (*image, error) {
	return makeImage(len(mem), func(fd int) error {
		for off := 0; off < len(mem); off += pageSize {
			p := mem[off:min(off+pageSize, len(mem))]
			if isZero(p) {
				continue
			}
			if _, err := unix.Pwrite(fd, p, int64(off)); err != nil {
				return err
			}
		}
		return nil
	})
}

// makeImage makes an image of size bytes, zeros but for what write puts
// into its file, then seals it.
func makeImage(size int, write func(fd int) error) (*image, error) {
	fd, err := unix.MemfdCreate("pml-guest-image", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	img := &image{fd: fd, size: size}
	fail := func(err error) (*image, error) {
		img.close()
		return nil, err
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return fail(fmt.Errorf("sizing the image: %w", err))
	}
	if err := write(fd); err != nil {
		return fail(fmt.Errorf("writing the image: %w", err))
	}
	// Sealed: nothing, this process included, can change what every
	// instance starts from.
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE|unix.F_SEAL_SEAL); err != nil {
		return fail(fmt.Errorf("sealing the image: %w", err))
	}
	if img.view, err = unix.Mmap(fd, 0, size, unix.PROT_READ, unix.MAP_SHARED); err != nil {
		return fail(fmt.Errorf("mapping the image: %w", err))
	}
	return img, nil
}

func (img *image) close() {
	if img != nil && img.view != nil {
		_ = unix.Munmap(img.view)
		img.view = nil
	}
	if img != nil && img.fd >= 0 {
		_ = unix.Close(img.fd)
		img.fd = -1
	}
}

// pagemap returns /proc/self/pagemap, opened once per process and read
// with pread (safe from any goroutine); nil where it cannot be read.
var pagemap = sync.OnceValue(func() *os.File {
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		return nil
	}
	return f
})

// dirtyPages lists the pages (of pageSize bytes) of the first size bytes of
// the memory that the runs since the last reset may have written, from the
// kernel's page table (/proc/self/pagemap): every page but those whose
// entry proves them unwritten (see pageWritten) — a page of the image only
// read is still the file's, one never touched has no entry. A written page
// the kernel swapped out has no page either, but a swap entry: it is
// listed. The second result is false when the kernel would not say
// (pagemap unreadable), and the caller must compare contents instead.
// The list is the memory's own buffer, valid until the next call.
func (m *mappedMemory) dirtyPages(size int) ([]int, bool) {
	if m.mapping == nil || m.image == 0 || size > len(m.mapping) || os.Getpagesize() != pageSize {
		return nil, false
	}
	var table io.ReaderAt = m.table
	if table == nil {
		f := pagemap()
		if f == nil {
			return nil, false
		}
		table = f
	}
	n := (size + pageSize - 1) / pageSize
	if n == 0 {
		return nil, true
	}
	if cap(m.entries) < n*8 {
		m.entries = make([]byte, n*8)
	}
	entries := m.entries[:n*8]
	base := uintptr(unsafe.Pointer(&m.mapping[0]))
	if _, err := table.ReadAt(entries, int64(base/pageSize*8)); err != nil {
		return nil, false
	}
	// The kernel writes the entries as native 64-bit words. The scan runs
	// on every reset over every page of the memory, nearly all of them
	// untouched: one pass of word tests (pageWritten's rule, split at the
	// image's end), no decoding per entry.
	words := unsafe.Slice((*uint64)(unsafe.Pointer(&entries[0])), n)
	split := min(n, (m.image+pageSize-1)/pageSize)
	out := m.dirty[:0]
	for i, e := range words[:split] {
		if pageWritten(e, true) {
			out = append(out, i)
		}
	}
	for i, e := range words[split:] {
		if pageWritten(e, false) {
			out = append(out, split+i)
		}
	}
	m.dirty = out
	return out, true
}

// Bits of a /proc/self/pagemap entry (Documentation/admin-guide/mm/pagemap.rst).
const (
	pmPresent = 1 << 63 // a page is mapped
	pmSwapped = 1 << 62 // a swap entry: swapped out, or migrating
	pmFile    = 1 << 61 // the mapped page is a file's (or shared anonymous)
)

// pageWritten reports whether a page may hold bytes other than the
// image's (zeros past it), from its page-table entry. Only two entries
// prove it does not. An empty one: the memory is a private mapping, whose
// written copies live nowhere but behind their entry, so with none the next
// access reads the (sealed) image, or zeros past it. And, in the image, a
// present page of the file: the image's own page, never copied, because
// never written. Anything else may hold a run's bytes: a present anonymous
// copy, and a swap entry, which is a page written and then swapped out (or
// migrating) — not present, yet its bytes come back on the next access.
func pageWritten(e uint64, inImage bool) bool {
	switch {
	case e&(pmPresent|pmSwapped) == 0:
		return false
	case inImage && e&pmPresent != 0 && e&pmFile != 0:
		return false
	}
	return true
}
