//go:build linux

package guest

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// The post-init image is kept in the compilation cache directory beside
// wazero's compiled code, so that a process whose code loads from the
// cache does not run pml_init either: running QuickJS's and the
// prelude's initialisation and copying its ~10 MB of memory into the
// image was half of loading the guest (12 of 25 ms). The image depends on
// the guest binary alone (pml_init reads nothing from the host but the
// clock, and every run reseeds Math.random), so one file, named by the
// guest's hash, serves every process of every architecture; it is what
// takeSnapshot would have made, but for the eight bytes of the clock-seeded
// Math.random state, which every run reseeds (glue.c) before a script can
// read it.
//
// A file is (little-endian)
//
//	"PMLI" | u32 format | [32]byte guest sha256 | u32 pages (64 KiB wasm pages) |
//	u64 stack pointer | u32 count | u32 inbox address |
//	count × u32 page index (4 KiB pages, ascending) |
//	count × 4 KiB | u32 CRC-32C of everything before it
//
// holding the image's non-zero pages (~80 of ~2,400). The directory is as
// trusted as wazero's machine code beside it; the checksum is against a
// truncated or corrupt file, which is ignored (the guest initialises as
// if there were none, and writes a good one).

// ImageDir is the directory of post-init images inside a compilation
// cache directory (internal/guestcache ships it with wazero's entries).
const ImageDir = "pml-image-v2"

var imageMagic = [4]byte{'P', 'M', 'L', 'I'}

const (
	// imageFormat 2 added the inbox's address (format 1 files, in
	// pml-image-v1, are never read: without it the host would write
	// answers to address 0).
	imageFormat = 2
	// imageHead is the fixed part before the page indexes.
	imageHead = 4 + 4 + 32 + 4 + 8 + 4 + 4
	// maxImagePages bounds a file's wasm pages: a 32-bit memory's.
	maxImagePages = 65536
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// imagePath is where the image of the guest whose sha256 is sum is kept
// in the cache directory dir.
func imagePath(dir string, sum [32]byte) string {
	return filepath.Join(dir, ImageDir, hex.EncodeToString(sum[:]))
}

// encodeImage writes the snapshot s of the guest sum in the file format.
// s must have an image.
func encodeImage(s *snapshot, sum [32]byte) []byte {
	view := s.img.bytes()
	var idx []uint32
	for off := 0; off < len(view); off += pageSize {
		if !isZero(view[off:min(off+pageSize, len(view))]) {
			idx = append(idx, uint32(off/pageSize))
		}
	}
	b := make([]byte, 0, imageHead+len(idx)*(4+pageSize)+4)
	b = append(b, imageMagic[:]...)
	b = binary.LittleEndian.AppendUint32(b, imageFormat)
	b = append(b, sum[:]...)
	b = binary.LittleEndian.AppendUint32(b, s.pages)
	b = binary.LittleEndian.AppendUint64(b, s.stackPointer)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(idx)))
	b = binary.LittleEndian.AppendUint32(b, s.inbox)
	for _, p := range idx {
		b = binary.LittleEndian.AppendUint32(b, p)
	}
	for _, p := range idx {
		off := int(p) * pageSize
		page := view[off:min(off+pageSize, len(view))]
		b = append(b, page...)
		b = append(b, zeroPage[:pageSize-len(page)]...)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// decodedImage is a file's content, checked.
type decodedImage struct {
	pages        uint32
	stackPointer uint64
	inbox        uint32   // the guest's static inbox (snapshot.inbox)
	index        []uint32 // ascending 4 KiB page numbers
	data         []byte   // their contents, one after another
}

// decodeImage checks a file for the guest sum and no more than maxPages
// wasm pages.
func decodeImage(b []byte, sum [32]byte, maxPages uint32) (decodedImage, error) {
	var d decodedImage
	if len(b) < imageHead+4 {
		return d, errors.New("too short")
	}
	body, tail := b[:len(b)-4], b[len(b)-4:]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(tail) {
		return d, errors.New("checksum mismatch")
	}
	if !bytes.Equal(b[:4], imageMagic[:]) || binary.LittleEndian.Uint32(b[4:]) != imageFormat {
		return d, errors.New("not an image of this format")
	}
	if !bytes.Equal(b[8:40], sum[:]) {
		return d, errors.New("the image of another guest")
	}
	d.pages = binary.LittleEndian.Uint32(b[40:])
	d.stackPointer = binary.LittleEndian.Uint64(b[44:])
	count := uint64(binary.LittleEndian.Uint32(b[52:]))
	d.inbox = binary.LittleEndian.Uint32(b[56:])
	if d.pages == 0 || d.pages > min(maxPages, maxImagePages) {
		return d, fmt.Errorf("%d pages, more than the memory limit's %d", d.pages, maxPages)
	}
	if d.inbox == 0 || uint64(d.inbox)+inboxSize > uint64(d.pages)*65536 {
		return d, fmt.Errorf("inbox at %d outside the image's memory", d.inbox)
	}
	if uint64(len(body)) != imageHead+count*(4+pageSize) {
		return d, errors.New("size does not match its page count")
	}
	d.index = make([]uint32, count)
	for i := range d.index {
		d.index[i] = binary.LittleEndian.Uint32(body[imageHead+4*i:])
		if i > 0 && d.index[i] <= d.index[i-1] || uint64(d.index[i]) >= uint64(d.pages)*65536/pageSize {
			return d, errors.New("page index out of order or out of range")
		}
	}
	d.data = body[imageHead+4*count:]
	return d, nil
}

// loadImageFile returns the snapshot kept at path for the guest sum, or
// an error: one wrapping os.ErrNotExist when there is none.
func loadImageFile(path string, sum [32]byte, maxPages uint32) (*snapshot, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	d, err := decodeImage(b, sum, maxPages)
	if err != nil {
		return nil, fmt.Errorf("guest: image %s: %w", path, err)
	}
	size := int(d.pages) * 65536
	img, err := makeImage(size, func(fd int) error {
		// One write per run of consecutive pages: their contents are
		// consecutive in the file too.
		for i := 0; i < len(d.index); {
			j := i + 1
			for j < len(d.index) && d.index[j] == d.index[j-1]+1 {
				j++
			}
			if _, err := unix.Pwrite(fd, d.data[i*pageSize:j*pageSize], int64(d.index[i])*pageSize); err != nil {
				return err
			}
			i = j
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &snapshot{pages: d.pages, stackPointer: d.stackPointer, inbox: d.inbox, img: img, bytes: size}, nil
}

// saveImageFile keeps s at path for the next process: written beside it
// and renamed into place (named as wazero names its temporary files, which
// guestcache.Entries skips), so a reader sees a whole file or none.
func saveImageFile(path string, s *snapshot, sum [32]byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // a no-op once renamed
	if _, err := f.Write(encodeImage(s, sum)); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
