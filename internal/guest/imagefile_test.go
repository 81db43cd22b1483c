//go:build linux

package guest

import (
	"bytes"
	"context"
	"encoding/binary"
	"hash/crc32"
	"os"
	"testing"
)

// TestImageFileRoundTrip: the first engine over a cache directory runs
// the guest's initialisation and keeps its image there; the next one loads
// it instead, byte for byte the same state, and runs scripts from it.
func TestImageFileRoundTrip(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	first, err := New(ctx, Options{CacheDir: dir, Prepared: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close(ctx)
	if first.ImageLoaded() {
		t.Fatal("an empty cache directory gave an image")
	}
	if first.snap.img == nil {
		t.Skip("no copy-on-write image")
	}
	path := imagePath(dir, embeddedSum())
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the image was not kept: %v", err)
	}

	second, err := New(ctx, Options{CacheDir: dir, Prepared: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close(ctx)
	if !second.ImageLoaded() {
		t.Fatal("the kept image was not loaded")
	}
	a, b := first.snap, second.snap
	if a.pages != b.pages || a.stackPointer != b.stackPointer || a.bytes != b.bytes || a.inbox != b.inbox {
		t.Fatalf("loaded snapshot differs: pages %d/%d, stack pointer %d/%d, bytes %d/%d, inbox %d/%d",
			a.pages, b.pages, a.stackPointer, b.stackPointer, a.bytes, b.bytes, a.inbox, b.inbox)
	}
	if !bytes.Equal(a.img.bytes(), b.img.bytes()) {
		t.Fatal("loaded image differs from the one the initialisation made")
	}
	for _, code := range []string{"return 1+1",
		// Answers written straight into the guest's inbox, whose address
		// the image carries.
		"const a = await mcp.demo.add({a: 1, b: 2}); const e = await mcp.demo.echo({s: 'x'.repeat(5000)}); return [a, e.s.length]",
		"let s = 0; for (let i = 0; i < 1e5; i++) s += i; return s"} {
		r := second.Run(ctx, Request{Code: code, Tools: DemoTools(), Host: DemoHost{}})
		want := first.Run(ctx, Request{Code: code, Tools: DemoTools(), Host: DemoHost{}})
		if !r.OK || string(r.Value) != string(want.Value) {
			t.Fatalf("%q from the loaded image: %+v, want %s", code, r, want.Value)
		}
	}
}

// TestImageFileRejected: a kept image that is damaged, of another guest
// or larger than the memory limit is never used: the engine initialises
// the guest itself and replaces the file with a good one.
func TestImageFileRejected(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	e, err := New(ctx, Options{CacheDir: dir, Prepared: -1})
	if err != nil {
		t.Fatal(err)
	}
	e.Close(ctx)
	if e.snap.img == nil {
		t.Skip("no copy-on-write image")
	}
	sum := embeddedSum()
	path := imagePath(dir, sum)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// resum rewrites the checksum, so that the damage is what is caught.
	resum := func(b []byte) []byte {
		body := b[:len(b)-4]
		return binary.LittleEndian.AppendUint32(body, crc32.Checksum(body, castagnoli))
	}
	edit := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	count := binary.LittleEndian.Uint32(good[52:])
	cases := []struct {
		name string
		file []byte
	}{
		{"empty", nil},
		{"truncated", good[:len(good)/2]},
		{"a flipped bit", edit(func(b []byte) []byte { b[len(b)/2] ^= 1; return b })},
		{"another format", edit(func(b []byte) []byte { b[4]++; return resum(b) })},
		{"another guest", edit(func(b []byte) []byte { b[8] ^= 0xff; return resum(b) })},
		{"beyond the memory limit", edit(func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[40:], memoryPages(DefaultMaxLimits().MemoryBytes)+1)
			return resum(b)
		})},
		{"no pages", edit(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[40:], 0); return resum(b) })},
		{"a page beyond the memory", edit(func(b []byte) []byte {
			last := imageHead + 4*int(count-1)
			binary.LittleEndian.PutUint32(b[last:], binary.LittleEndian.Uint32(b[40:])*16)
			return resum(b)
		})},
		{"pages out of order", edit(func(b []byte) []byte {
			copy(b[imageHead:], b[imageHead+4:imageHead+8])
			return resum(b)
		})},
		{"no inbox", edit(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[56:], 0); return resum(b) })},
		{"an inbox beyond the memory", edit(func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[56:], binary.LittleEndian.Uint32(b[40:])*65536-100)
			return resum(b)
		})},
		{"a count beyond the file", edit(func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[52:], count+1)
			return resum(b)
		})},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := decodeImage(c.file, sum, memoryPages(DefaultMaxLimits().MemoryBytes)); err == nil {
				t.Fatal("decoded")
			}
			if err := os.WriteFile(path, c.file, 0o600); err != nil {
				t.Fatal(err)
			}
			e, err := New(ctx, Options{CacheDir: dir, Prepared: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close(ctx)
			if e.ImageLoaded() {
				t.Fatal("the bad image was loaded")
			}
			if r := e.Run(ctx, Request{Code: "return 6*7"}); !r.OK || string(r.Value) != "42" {
				t.Fatalf("run: %+v", r)
			}
			// A good one, not good itself: the initialisation's Math.random
			// state (reseeded by every run) comes from the clock.
			now, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := decodeImage(now, sum, memoryPages(DefaultMaxLimits().MemoryBytes)); err != nil {
				t.Fatalf("the bad image was not replaced by a good one: %v", err)
			}
		})
	}
}
