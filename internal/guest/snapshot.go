package guest

import (
	"bytes"
	"context"
	"fmt"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// chunkSize is the granularity of the snapshot diff. Small enough that the
// mostly-empty stack and heap are skipped, large enough to keep the chunk
// list short.
const chunkSize = 1 << 10

// snapshot is linear memory right after pml_init, stored as the chunks that
// differ from a freshly instantiated module. Restoring writes only those,
// since a new instance already holds the data segments and zeroes.
type snapshot struct {
	pages  uint32
	chunks []chunk
	bytes  int
}

type chunk struct {
	off  uint32
	data []byte
}

// takeSnapshot runs the guest's initialisation once and records the memory
// it leaves behind.
func takeSnapshot(ctx context.Context, rt wazero.Runtime, compiled wazero.CompiledModule) (*snapshot, error) {
	base, err := rt.InstantiateModule(ctx, compiled, wazero.NewModuleConfig().WithName("").WithStartFunctions())
	if err != nil {
		return nil, fmt.Errorf("guest: instantiate: %w", err)
	}
	defer base.Close(ctx)
	init, err := rt.InstantiateModule(ctx, compiled, wazero.NewModuleConfig().WithName("").WithStartFunctions("_initialize"))
	if err != nil {
		return nil, fmt.Errorf("guest: instantiate and initialise: %w", err)
	}
	defer init.Close(ctx)
	ret, err := init.ExportedFunction("pml_init").Call(ctx)
	if err != nil {
		return nil, fmt.Errorf("guest: pml_init: %w", err)
	}
	if ret[0] != 0 {
		return nil, fmt.Errorf("guest: pml_init failed with status %d", ret[0])
	}
	// The guest's only mutable global is __stack_pointer (not exported),
	// which pml_init leaves at its initial value: a restored instance needs
	// memory only. The build's wasm-objdump check guards this.

	mem := init.Memory()
	baseMem := base.Memory()
	s := &snapshot{pages: mem.Size() / 65536}
	after, _ := mem.Read(0, mem.Size())
	before, _ := baseMem.Read(0, baseMem.Size())
	for off := 0; off < len(after); off += chunkSize {
		end := min(off+chunkSize, len(after))
		a := after[off:end]
		var b []byte
		if off < len(before) {
			b = before[off:min(end, len(before))]
		}
		if bytes.Equal(a, b) || (b == nil && isZero(a)) {
			continue
		}
		// Merge with the previous chunk when adjacent: fewer, larger writes.
		if n := len(s.chunks); n > 0 && int(s.chunks[n-1].off)+len(s.chunks[n-1].data) == off {
			s.chunks[n-1].data = append(s.chunks[n-1].data, a...)
		} else {
			s.chunks = append(s.chunks, chunk{off: uint32(off), data: append([]byte(nil), a...)})
		}
		s.bytes += len(a)
	}
	return s, nil
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// restore returns a new instance in the post-init state.
func (s *snapshot) restore(ctx context.Context, rt wazero.Runtime, compiled wazero.CompiledModule) (api.Module, error) {
	m, err := rt.InstantiateModule(withMemoryAllocator(ctx), compiled, wazero.NewModuleConfig().WithName("").WithStartFunctions())
	if err != nil {
		return nil, fmt.Errorf("guest: instantiate: %w", err)
	}
	mem := m.Memory()
	if cur := mem.Size() / 65536; cur < s.pages {
		if _, ok := mem.Grow(s.pages - cur); !ok {
			_ = m.Close(ctx)
			return nil, fmt.Errorf("guest: cannot grow memory to %d pages", s.pages)
		}
	}
	for _, c := range s.chunks {
		if !mem.Write(c.off, c.data) {
			_ = m.Close(ctx)
			return nil, fmt.Errorf("guest: snapshot chunk at %d out of range", c.off)
		}
	}
	return m, nil
}
