//go:build !linux

package guest

import (
	"context"
	"errors"
	"os"

	"github.com/tetratelabs/wazero/experimental"
)

// Without Linux's memfd and mmap, instances keep wazero's default Go-slice
// memory and are restored by writing the snapshot's chunks (see
// snapshot.restore); nothing is mapped copy-on-write and used instances
// are never reset.

// MemoryCharged reports whether runs charge their linear memory's growth
// to the MemoryBudget in their context. Here they do not: wazero's own
// memory grows out of the engine's sight, so a server budget must reserve
// each run's worst case instead (see internal/admission).
const MemoryCharged = false

// mappedMemory is never made here (allocator returns none); image is the
// field snapshot.restore reads.
type mappedMemory struct{ image int }

func (*mappedMemory) reset(int, *image) bool { return false }

func (*mappedMemory) forgetWrites() {}

func (*mappedMemory) bind(context.Context) {}

func populate([]byte) {}

func (*mappedMemory) dirtyPages(int) ([]int, bool) { return nil, false }

type image struct{}

func (*image) close() {}

func (*image) bytes() []byte { return nil }

func newImage([]byte) (*image, error) { return nil, errors.New("copy-on-write images need Linux") }

// ImageDir is where a Linux process keeps the post-init image in a
// compilation cache directory; elsewhere every process initialises the
// guest itself.
const ImageDir = "pml-image-v2"

func imagePath(string, [32]byte) string { return "" }

func loadImageFile(string, [32]byte, uint32) (*snapshot, error) { return nil, os.ErrNotExist }

func saveImageFile(string, *snapshot, [32]byte) error { return nil }

func allocator(*image, func(*mappedMemory)) experimental.MemoryAllocator { return nil }

func withMemoryAllocator(ctx context.Context, a experimental.MemoryAllocator) context.Context {
	if a == nil {
		return ctx
	}
	return experimental.WithMemoryAllocator(ctx, a)
}
