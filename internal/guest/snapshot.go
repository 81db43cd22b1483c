package guest

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// chunkSize is the granularity of the snapshot diff. Small enough that the
// mostly-empty stack and heap are skipped, large enough to keep the chunk
// list short.
const chunkSize = 1 << 10

// snapshot is linear memory right after pml_init. Where copy-on-write
// mapping is available it is an image every instance maps (memory_linux.go);
// elsewhere it is the chunks that differ from a freshly instantiated
// module, written into each new instance.
type snapshot struct {
	pages  uint32
	chunks []chunk
	bytes  int    // the image's size, or the chunks' total
	img    *image // nil: restore by writing chunks
	base   []byte // post-init memory, kept only without an image (to diff against)
	// stackPointer is __stack_pointer's value after pml_init (and after
	// every run that returned): a reset instance must hold it.
	stackPointer uint64
	// inbox is the address of the guest's static inbox (pml_inbox(0)), the
	// same in every instance: the host writes answers shorter than
	// inboxSize there without a call.
	inbox uint32
}

// inboxSize is the size of the guest's static inbox (glue.c's
// inbox_small): answers shorter than it are written there directly.
const inboxSize = 4096

type chunk struct {
	off  uint32
	data []byte
}

// instance is one guest module instance and what the engine keeps with it.
type instance struct {
	mod api.Module
	mem *mappedMemory // nil without copy-on-write memory
	// fns are the exports a run calls (fn), each made on first use and
	// kept, so that a reused instance keeps their call stacks, until a run
	// waits long (releaseStacks).
	fns [numExports]api.Function
	// Globals the build exports (loopcheck.awk) so a used instance can be
	// checked and reset.
	budget       api.MutableGlobal
	stackPointer api.Global
	runs         int // executions this instance has served
}

func (in *instance) close(ctx context.Context) { _ = in.mod.Close(ctx) }

// export names one of the guest's exported functions an instance calls.
type export int

const (
	exRun export = iota
	exResume
	exInbox
	exAlloc
	exFree
	// exParse compiles a script without running it (Engine.Parse); a
	// guest may be built without it.
	exParse
	numExports
)

var exportNames = [numExports]string{"pml_run", "pml_resume", "pml_inbox", "pml_alloc", "pml_free", "pml_parse"}

// requiredExports are the exports every guest must have (checkExports).
const requiredExports = numExports - 1

// checkExports reports the first export the engine needs that the
// compiled guest lacks: checked once per engine, so that instances make
// each function only when a run first calls it.
func checkExports(compiled wazero.CompiledModule) error {
	defs := compiled.ExportedFunctions()
	for _, name := range exportNames[:requiredExports] {
		if defs[name] == nil {
			return fmt.Errorf("guest: the guest lacks the export %s the engine needs", name)
		}
	}
	return nil
}

// fn returns the instance's function for e, made on first use (nil for
// an export the guest lacks: only exParse may be missing).
//
// Each is a wazero call engine with a call stack of its own, 10 KiB at
// first and grown as deep as the runs that used it went (pml_run's
// compiling goes ~80 KiB deep): kept with the instance, a reused instance
// does not grow them again.
func (in *instance) fn(e export) api.Function {
	f := in.fns[e]
	if f == nil {
		f = in.mod.ExportedFunction(exportNames[e])
		in.fns[e] = f
	}
	return f
}

// releaseStacks lets the instance's call engines, and their grown stacks
// (~130 KiB in all), go to the collector: a run that waits long for its
// calls holds none of them while it waits. Between steps the guest's wasm
// stack is empty, so nothing is lost; the next step makes what it calls
// anew.
func (in *instance) releaseStacks() { in.fns = [numExports]api.Function{} }

// takeSnapshot runs the guest's initialisation once and records the memory
// it leaves behind.
func takeSnapshot(ctx context.Context, rt wazero.Runtime, compiled wazero.CompiledModule) (*snapshot, error) {
	// Over a mapped reservation (where there is one), memory.grow during
	// initialisation extends in place instead of copying and clearing a
	// new Go slice each time: a cold start's worth of page faults.
	init, err := rt.InstantiateModule(withMemoryAllocator(ctx, allocator(nil, nil)), compiled,
		wazero.NewModuleConfig().WithName("").WithStartFunctions("_initialize"))
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
	sp := init.ExportedGlobal("pml_stack_pointer")
	if sp == nil || init.ExportedGlobal("pml_budget") == nil {
		return nil, errors.New("guest: the guest does not export its globals (built without loopcheck.awk?)")
	}

	inbox, err := init.ExportedFunction("pml_inbox").Call(ctx, 0)
	if err != nil || inbox[0] == 0 {
		return nil, fmt.Errorf("guest: the guest has no inbox: %v", err)
	}
	mem := init.Memory()
	s := &snapshot{pages: mem.Size() / 65536, stackPointer: sp.Get(), inbox: uint32(inbox[0])}
	after, _ := mem.Read(0, mem.Size())
	// Where it can, the whole post-init memory becomes the image instances
	// map, and nothing else is needed.
	if img, err := newImage(after); err == nil {
		s.img = img
		s.bytes = len(after)
		return s, nil
	}
	// Elsewhere, instances are restored by writing chunks.
	s.base = append([]byte(nil), after...)
	if err := s.diff(ctx, rt, compiled, after); err != nil {
		return nil, err
	}
	return s, nil
}

// diff records the chunks of the post-init memory after that differ from
// a freshly instantiated module's (its data segments): what restore writes
// into an instance without an image under its memory.
func (s *snapshot) diff(ctx context.Context, rt wazero.Runtime, compiled wazero.CompiledModule, after []byte) error {
	fresh, err := rt.InstantiateModule(ctx, compiled, wazero.NewModuleConfig().WithName("").WithStartFunctions())
	if err != nil {
		return fmt.Errorf("guest: instantiate: %w", err)
	}
	defer fresh.Close(ctx)
	before, _ := fresh.Memory().Read(0, fresh.Memory().Size())
	s.chunks, s.bytes = nil, 0
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
	return nil
}

// isZero reports whether b is all zeros, a page at a time (bytes.Equal is
// vectorised; a byte loop over the ~10 MB post-init memory cost a cold
// start milliseconds).
func isZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), len(zeroPage))
		if !bytes.Equal(b[:n], zeroPage[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

var zeroPage [pageSize]byte

// noEntropy is an instance's WASI random source: the guest imports no
// random_get (Math.random is QuickJS's own generator, seeded per run), so
// nothing reads it. Without it wazero gives every instance a seeded
// math/rand source of its own, 5 KiB of heap per held execution. It holds
// no state: nothing passes between the instances that share it.
type noEntropy struct{}

func (noEntropy) Read([]byte) (int, error) { return 0, errors.New("guest: no entropy source") }

// restore returns a new instance in the post-init state.
func (s *snapshot) restore(ctx context.Context, rt wazero.Runtime, compiled wazero.CompiledModule) (*instance, error) {
	in := &instance{}
	alloc := allocator(s.img, func(m *mappedMemory) { in.mem = m })
	cfg := wazero.NewModuleConfig().WithName("").WithStartFunctions().WithRandSource(noEntropy{})
	m, err := rt.InstantiateModule(withMemoryAllocator(ctx, alloc), compiled, cfg)
	if err != nil {
		return nil, fmt.Errorf("guest: instantiate: %w", err)
	}
	in.mod = m
	mem := m.Memory()
	if cur := mem.Size() / 65536; cur < s.pages {
		if _, ok := mem.Grow(s.pages - cur); !ok {
			_ = m.Close(ctx)
			return nil, fmt.Errorf("guest: cannot grow memory to %d pages", s.pages)
		}
	}
	if in.mem != nil && in.mem.image != 0 {
		in.mem.forgetWrites()
	} else {
		// No image under this memory: write the snapshot into it (the
		// whole image, in the rare case that mapping it failed here).
		in.mem = nil
		if s.img != nil && !mem.Write(0, s.img.bytes()) {
			_ = m.Close(ctx)
			return nil, errors.New("guest: the snapshot does not fit the instance's memory")
		}
		for _, c := range s.chunks {
			if !mem.Write(c.off, c.data) {
				_ = m.Close(ctx)
				return nil, fmt.Errorf("guest: snapshot chunk at %d out of range", c.off)
			}
		}
	}
	in.budget, _ = m.ExportedGlobal("pml_budget").(api.MutableGlobal)
	in.stackPointer = m.ExportedGlobal("pml_stack_pointer")
	if in.budget == nil || in.stackPointer == nil {
		_ = m.Close(ctx)
		return nil, errors.New("guest: the guest lacks an export the engine needs")
	}
	return in, nil
}

// reset turns a used instance back into the post-init state, in place, and
// reports whether it could: only an instance over the image whose run
// returned normally, left its memory at the snapshot's size and its stack
// pointer where it found it. Anything else is closed instead: a reused
// instance never carries a grown memory or a trapped state.
func (s *snapshot) reset(in *instance) bool {
	if in.mem == nil || in.mod.Memory().Size() != s.pages*65536 || in.stackPointer.Get() != s.stackPointer {
		return false
	}
	if !in.mem.reset(int(in.mod.Memory().Size()), s.img) {
		return false
	}
	in.budget.Set(1)
	return true
}

// baseMemory is the post-init memory, to diff a run's memory against.
func (s *snapshot) baseMemory() []byte {
	if s.img != nil {
		return s.img.bytes()
	}
	return s.base
}

// close releases the image.
func (s *snapshot) close() { s.img.close() }
