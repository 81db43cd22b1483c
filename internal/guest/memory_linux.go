//go:build linux

package guest

import (
	"context"
	"fmt"
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

// mappedMemory implements experimental.LinearMemory over one mapping.
type mappedMemory struct {
	mapping []byte
	image   int // bytes at the start that map the image (0: none)
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

// Reallocate implements experimental.LinearMemory.
func (m *mappedMemory) Reallocate(size uint64) []byte {
	if size > uint64(len(m.mapping)) {
		return nil
	}
	return m.mapping[:size:size]
}

// Free implements experimental.LinearMemory.
func (m *mappedMemory) Free() {
	if m.mapping != nil {
		_ = unix.Munmap(m.mapping)
		m.mapping = nil
	}
}

// reset drops every page the last run wrote, so the memory reads as the
// image again: private copies of image pages are discarded (the image shows
// through) and anonymous pages read as zero. It reports false when the
// memory has no image under it and cannot be reset.
func (m *mappedMemory) reset(size int) bool {
	if m.image == 0 || m.mapping == nil || size > m.image {
		return false
	}
	return unix.Madvise(m.mapping[:m.image], unix.MADV_DONTNEED) == nil
}

// image is the guest's linear memory right after pml_init, in a sealed
// memfd that instances map copy-on-write.
type image struct {
	fd   int
	size int
}

// newImage copies mem into a new sealed memfd. Only non-zero pages are
// written, so the file is as sparse as the memory.
func newImage(mem []byte) (*image, error) {
	fd, err := unix.MemfdCreate("pml-guest-image", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	img := &image{fd: fd, size: len(mem)}
	fail := func(err error) (*image, error) {
		img.close()
		return nil, err
	}
	if err := unix.Ftruncate(fd, int64(len(mem))); err != nil {
		return fail(fmt.Errorf("sizing the image: %w", err))
	}
	const page = 4096
	for off := 0; off < len(mem); off += page {
		p := mem[off:min(off+page, len(mem))]
		if isZero(p) {
			continue
		}
		if _, err := unix.Pwrite(fd, p, int64(off)); err != nil {
			return fail(fmt.Errorf("writing the image: %w", err))
		}
	}
	// Sealed: nothing, this process included, can change what every
	// instance starts from.
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE|unix.F_SEAL_SEAL); err != nil {
		return fail(fmt.Errorf("sealing the image: %w", err))
	}
	return img, nil
}

func (img *image) close() {
	if img != nil && img.fd >= 0 {
		_ = unix.Close(img.fd)
		img.fd = -1
	}
}
