package guest

import (
	"bytes"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/klauspost/compress/s2"
	"github.com/tetratelabs/wazero/api"
)

// pageSize is the granularity of memory diffs: the host's page, which is
// also what copy-on-write tracks.
const pageSize = 4096

// A memory diff is a run's linear memory as what changed from the post-init
// snapshot: its dirty pages, each XORed with the snapshot's page (zeros
// past its end), so every byte the run left alone is a zero. Encoded, it is
//
//	"PMLD" | u32 pages (64 KiB wasm pages) | u32 count | count × (u32 index | 4 KiB)
//
// compressed with S2 (Snappy's faster successor: ~2 GB/s, where zstd's
// fastest level managed a quarter of that on a 4 MiB heap), which makes the
// zeros nearly free. Only the pages
// the run wrote are looked at (see dirtyPages), so suspending a run costs in
// proportion to what it touched, not to its memory.

var diffMagic = [4]byte{'P', 'M', 'L', 'D'}

// encodeDiff compresses the given pages of mem as changes to base. The
// uncompressed diff and the compressor's output are built in scratch's
// buffers, reused from one suspension to the next: fresh multi-megabyte
// buffers cost more in page faults than the compression itself.
func encodeDiff(mem, base []byte, wasmPages uint32, pages []int, scratch *diffScratch) ([]byte, error) {
	size := 12 + len(pages)*(4+pageSize)
	if cap(scratch.raw) < size {
		scratch.raw = make([]byte, 0, size)
	}
	raw := scratch.raw[:0]
	raw = append(raw, diffMagic[:]...)
	raw = binary.LittleEndian.AppendUint32(raw, wasmPages)
	raw = binary.LittleEndian.AppendUint32(raw, uint32(len(pages)))
	for _, p := range pages {
		off := p * pageSize
		if off+pageSize > len(mem) {
			return nil, fmt.Errorf("page %d is past the memory's end", p)
		}
		raw = binary.LittleEndian.AppendUint32(raw, uint32(p))
		start := len(raw)
		raw = raw[:start+pageSize]
		dst, page := raw[start:], mem[off:off+pageSize]
		if off+pageSize <= len(base) {
			subtle.XORBytes(dst, page, base[off:off+pageSize]) // one pass, vectorised
		} else {
			copy(dst, page)
			if off < len(base) {
				xorInto(dst, base[off:])
			}
		}
	}
	scratch.raw = raw
	if n := s2.MaxEncodedLen(len(raw)); cap(scratch.enc) < n {
		scratch.enc = make([]byte, n)
	}
	return bytes.Clone(s2.Encode(scratch.enc[:cap(scratch.enc)], raw)), nil
}

// diffScratch holds encodeDiff's buffers between suspensions.
type diffScratch struct{ raw, enc []byte }

// applyDiff writes a diff into mem, which must hold the post-init snapshot,
// growing it to the diff's size first.
func applyDiff(mem api.Memory, diff []byte, scratch *diffScratch) error {
	n, err := s2.DecodedLen(diff)
	if err != nil {
		return fmt.Errorf("decompressing the memory: %w", err)
	}
	if cap(scratch.raw) < n {
		scratch.raw = make([]byte, n)
	}
	raw, err := s2.Decode(scratch.raw[:cap(scratch.raw)], diff)
	if err != nil {
		return fmt.Errorf("decompressing the memory: %w", err)
	}
	var head struct {
		Magic        [4]byte
		Pages, Count uint32
	}
	if err := binary.Read(bytes.NewReader(raw), binary.LittleEndian, &head); err != nil || head.Magic != diffMagic {
		return errors.New("not a memory diff")
	}
	if cur := mem.Size() / 65536; cur < head.Pages {
		if _, ok := mem.Grow(head.Pages - cur); !ok {
			return fmt.Errorf("cannot grow memory to %d pages", head.Pages)
		}
	}
	// Fault the pages in ahead, a run of consecutive pages per call: the
	// write below would otherwise take a page fault per page.
	if all, ok := mem.Read(0, mem.Size()); ok {
		prefault(all, raw[12:], int(head.Count))
	}
	const entry = 4 + pageSize
	entries := raw[12:]
	if uint64(len(entries)) < uint64(head.Count)*entry {
		return errors.New("reading the memory: the diff is cut short")
	}
	for i := range int(head.Count) {
		e := entries[i*entry : (i+1)*entry]
		idx := binary.LittleEndian.Uint32(e)
		// mem holds the snapshot: XOR the change back in, in place (Read
		// is a view of the memory), in one vectorised pass.
		cur, ok := mem.Read(idx*pageSize, pageSize)
		if !ok {
			return fmt.Errorf("page %d is past the memory's end", idx)
		}
		subtle.XORBytes(cur, cur, e[4:])
	}
	return nil
}

// prefault populates the pages a diff's entries name, joining consecutive
// ones.
func prefault(mem, entries []byte, count int) {
	const entry = 4 + pageSize
	runStart, runEnd := -1, -1
	flush := func() {
		if runStart >= 0 && runEnd*pageSize <= len(mem) {
			populate(mem[runStart*pageSize : runEnd*pageSize])
		}
	}
	for i := 0; i < count && (i+1)*entry <= len(entries); i++ {
		p := int(binary.LittleEndian.Uint32(entries[i*entry:]))
		if p == runEnd {
			runEnd++
			continue
		}
		flush()
		runStart, runEnd = p, p+1
	}
	flush()
}

// xorInto XORs src into dst, byte by byte, as far as both go.
func xorInto(dst, src []byte) {
	n := min(len(dst), len(src))
	i := 0
	for ; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(dst[i:], binary.LittleEndian.Uint64(dst[i:])^binary.LittleEndian.Uint64(src[i:]))
	}
	for ; i < n; i++ {
		dst[i] ^= src[i]
	}
}

// changedPages lists the pages of mem that differ from base (the post-init
// memory; pages past its end compare with zeros). It is the fallback where
// the kernel cannot tell which pages were written, and reads everything.
func changedPages(mem, base []byte) []int {
	var out []int
	var zero [pageSize]byte
	for off := 0; off < len(mem); off += pageSize {
		p := mem[off:min(off+pageSize, len(mem))]
		var b []byte
		if off < len(base) {
			b = base[off:min(off+pageSize, len(base))]
		} else {
			b = zero[:len(p)]
		}
		if !bytes.Equal(p, b) {
			out = append(out, off/pageSize)
		}
	}
	return out
}
