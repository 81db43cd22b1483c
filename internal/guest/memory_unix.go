//go:build unix

package guest

import (
	"context"

	"github.com/tetratelabs/wazero/experimental"
	"golang.org/x/sys/unix"
)

// Linear memory lives in its own anonymous mapping, reserved at the
// instance's maximum size up front. Growing is then just a longer slice of
// the same mapping: no copy of the whole memory on every memory.grow (which
// Go-slice-backed memory pays, and QuickJS grows often), untouched pages
// cost nothing, and multi-megabyte buffers stay out of the Go heap so they
// do not drive garbage collection. munmap returns everything on Close.
func withMemoryAllocator(ctx context.Context) context.Context {
	return experimental.WithMemoryAllocator(ctx, experimental.MemoryAllocatorFunc(allocateMapped))
}

type mappedMemory struct {
	mapping []byte
}

func allocateMapped(_, max uint64) experimental.LinearMemory {
	if max == 0 {
		max = 1 << 16
	}
	b, err := unix.Mmap(-1, 0, int(max), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON|unix.MAP_NORESERVE)
	if err != nil {
		return &mappedMemory{}
	}
	return &mappedMemory{mapping: b}
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
