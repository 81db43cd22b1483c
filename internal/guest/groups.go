package guest

import (
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/klauspost/compress/s2"
	"github.com/tetratelabs/wazero/api"
	"github.com/zeebo/xxh3"
)

// A session's state is saved after every execution, and most executions
// change little of what the session holds (`return rows.filter(…)` over
// megabytes of rows). So its memory is encoded in groups: group k holds the
// pages k*groupPages … (k+1)*groupPages-1 that differ from the post-init
// image, each XORed with the image's page (as in a suspension's diff),
// compressed on its own:
//
//	"PMLG" | u32 wasm pages | u32 groups | groups × (u32 k | u32 pages | u32 n | n bytes of S2(pages × (u32 index | 4 KiB)))
//
// When a state is restored, each page gets a hash of the content it was
// restored to. Saving after the execution hashes the pages that differ
// from the image again: a group whose pages are the same and unchanged is
// copied from the restored state as it was, compressed; only the groups the
// execution touched are compressed anew. Saving then costs what the
// execution changed, not what the session holds.
//
// The hash is XXH3's 128-bit one, seeded per engine (zeebo/xxh3: 16 GB/s
// here with AVX2, where hash/maphash's 64 bits took 2.6 times as long, a
// millisecond of every 4 MiB session's execution): a change would go
// unnoticed only by a 128-bit collision, which no script can aim for
// without the seed (and would only lose its own session's change).

var groupMagic = [4]byte{'P', 'M', 'L', 'G'}

// groupPages is the pages of a group: 64 KiB, large enough to compress
// well, small enough that what an execution always writes (QuickJS's
// allocator, atoms and collector lists: four or five groups) re-encodes
// little. With 4 MiB kept, 16 pages saved in 1.4 ms, 32 in 1.5–1.8, 64 in
// 1.4–2.7 (BenchmarkSessionContinue4MiB, a loaded machine).
const groupPages = 32

// restored is what restoring a grouped state remembers for saving the next:
// each group as stored, and each page's hash as restored.
type restored struct {
	groups map[uint32]storedGroup
	hashes map[uint32]xxh3.Uint128
}

type storedGroup struct {
	pages int    // how many pages it holds
	data  []byte // its compressed bytes, aliasing the state
}

// isGroups reports whether a memory diff is in the grouped encoding.
func isGroups(diff []byte) bool { return len(diff) >= 4 && [4]byte(diff[:4]) == groupMagic }

// applyGroups writes a grouped state into mem, which holds the post-init
// snapshot, growing it first, and returns what saving the next state needs.
func applyGroups(mem api.Memory, state []byte, seed uint64, scratch *diffScratch) (*restored, error) {
	if !isGroups(state) || len(state) < 12 {
		return nil, errors.New("not a grouped memory state")
	}
	wasmPages, n := binary.LittleEndian.Uint32(state[4:]), binary.LittleEndian.Uint32(state[8:])
	if cur := mem.Size() / 65536; cur < wasmPages {
		if _, ok := mem.Grow(wasmPages - cur); !ok {
			return nil, fmt.Errorf("cannot grow memory to %d pages", wasmPages)
		}
	}
	type header struct {
		k     uint32
		group storedGroup
	}
	heads := make([]header, 0, min(n, 1<<16))
	r := &restored{groups: make(map[uint32]storedGroup, len(heads))}
	rest := state[12:]
	for range n {
		if len(rest) < 12 {
			return nil, errors.New("the memory state is cut short")
		}
		k, count, size := binary.LittleEndian.Uint32(rest), binary.LittleEndian.Uint32(rest[4:]), binary.LittleEndian.Uint32(rest[8:])
		if uint64(size) > uint64(len(rest)-12) || count > groupPages {
			return nil, errors.New("the memory state is cut short")
		}
		if _, dup := r.groups[k]; dup {
			return nil, fmt.Errorf("group %d twice", k)
		}
		g := storedGroup{pages: int(count), data: rest[12 : 12+size]}
		r.groups[k] = g
		heads = append(heads, header{k, g})
		rest = rest[12+size:]
	}
	if len(rest) != 0 {
		return nil, errors.New("the memory state has bytes past its groups")
	}
	all, _ := mem.Read(0, mem.Size())
	// apply restores every group, page by page: decompressed, XORed into
	// the memory, hashed while it is in the cache.
	apply := func(sc *diffScratch, hashes map[uint32]xxh3.Uint128) error {
		const entry = 4 + pageSize
		for _, h := range heads {
			raw, err := decodeInto(sc, h.group.data)
			if err != nil {
				return fmt.Errorf("decompressing the memory: %w", err)
			}
			if len(raw) != h.group.pages*entry {
				return fmt.Errorf("group %d holds %d bytes, not %d pages", h.k, len(raw), h.group.pages)
			}
			prefault(all, raw, h.group.pages)
			for j := range h.group.pages {
				e := raw[j*entry : (j+1)*entry]
				idx := binary.LittleEndian.Uint32(e)
				if idx/groupPages != h.k || uint64(idx+1)*pageSize > uint64(len(all)) {
					return fmt.Errorf("page %d does not belong in group %d", idx, h.k)
				}
				// mem holds the snapshot: XOR the change back in, in
				// place (all is a view of the memory).
				cur := all[idx*pageSize : (idx+1)*pageSize]
				subtle.XORBytes(cur, cur, e[4:])
				hashes[idx] = xxh3.Hash128Seed(cur, seed)
			}
		}
		return nil
	}
	r.hashes = make(map[uint32]xxh3.Uint128, len(heads)*groupPages)
	return r, apply(scratch, r.hashes)
}

// decodeInto decompresses data into scratch's buffer.
func decodeInto(scratch *diffScratch, data []byte) ([]byte, error) {
	n, err := s2.DecodedLen(data)
	if err != nil {
		return nil, err
	}
	if cap(scratch.raw) < n {
		scratch.raw = make([]byte, n)
	}
	return s2.Decode(scratch.raw[:cap(scratch.raw)], data)
}

// encodeGroups encodes pages (sorted, each differing from base) of mem as
// a grouped state, copying from prev (nil: none) every group whose pages
// are those prev restored, unchanged.
func encodeGroups(mem, base []byte, wasmPages uint32, pages []int, prev *restored, seed uint64, scratch *diffScratch) ([]byte, error) {
	out := make([]byte, 12, 12+len(pages)*64)
	copy(out, groupMagic[:])
	binary.LittleEndian.PutUint32(out[4:], wasmPages)
	groups := uint32(0)
	for start := 0; start < len(pages); {
		k := uint32(pages[start] / groupPages)
		end := start
		for end < len(pages) && uint32(pages[end]/groupPages) == k {
			end++
		}
		group := pages[start:end]
		start = end
		for _, p := range group {
			if (p+1)*pageSize > len(mem) {
				return nil, fmt.Errorf("page %d is past the memory's end", p)
			}
		}
		groups++
		if prev != nil {
			if g, ok := prev.groups[k]; ok && g.pages == len(group) && !slices.ContainsFunc(group, func(p int) bool {
				h, known := prev.hashes[uint32(p)]
				return !known || h != xxh3.Hash128Seed(mem[p*pageSize:(p+1)*pageSize], seed)
			}) {
				out = appendGroup(out, k, len(group), g.data)
				continue
			}
		}
		raw := scratch.raw[:0]
		for _, p := range group {
			off := p * pageSize
			raw = binary.LittleEndian.AppendUint32(raw, uint32(p))
			at := len(raw)
			raw = append(raw, mem[off:off+pageSize]...)
			if off < len(base) {
				b := base[off:min(off+pageSize, len(base))]
				subtle.XORBytes(raw[at:at+len(b)], raw[at:at+len(b)], b)
			}
		}
		scratch.raw = raw
		if n := s2.MaxEncodedLen(len(raw)); cap(scratch.enc) < n {
			scratch.enc = make([]byte, n)
		}
		out = appendGroup(out, k, len(group), s2.Encode(scratch.enc[:cap(scratch.enc)], raw))
	}
	binary.LittleEndian.PutUint32(out[8:], groups)
	return slices.Clip(out), nil
}

func appendGroup(out []byte, k uint32, pages int, data []byte) []byte {
	out = binary.LittleEndian.AppendUint32(out, k)
	out = binary.LittleEndian.AppendUint32(out, uint32(pages))
	out = binary.LittleEndian.AppendUint32(out, uint32(len(data)))
	return append(out, data...)
}
