package openapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/testutil/syncbuf"
	"github.com/pml-sandbox/pml/internal/toolsource"
)

// shopDoc is the shop document as a Set's server reads it: its bytes, its
// location, the base URL configured.
func shopDoc(t testing.TB) ([]byte, *url.URL, string) {
	t.Helper()
	data, err := os.ReadFile("testdata/shop.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return data, &url.URL{Scheme: "file", Path: "testdata/shop.yaml"}, "http://shop.test/api"
}

// sameDocument reports whether two documents are the same tools making the
// same requests: their binary forms and every tool's annotations agree.
func sameDocument(a, b *Document) bool {
	if !bytes.Equal(encodeDocument(nil, a), encodeDocument(nil, b)) || len(a.Operations) != len(b.Operations) {
		return false
	}
	for i := range a.Operations {
		if !reflect.DeepEqual(a.Operations[i].Tool, b.Operations[i].Tool) {
			return false
		}
	}
	return true
}

func TestCodecRoundTrip(t *testing.T) {
	for _, name := range []string{"shop.yaml", "trains31.json"} {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", name))
			if err != nil {
				t.Fatal(err)
			}
			doc, err := Parse(data, nil, "http://x.test/v1")
			if err != nil {
				t.Fatal(err)
			}
			back, err := decodeDocument(encodeDocument(nil, doc))
			if err != nil {
				t.Fatal(err)
			}
			if !sameDocument(doc, back) {
				t.Fatal("the decoded document differs from the parsed one")
			}
			if err := checkDecoded(back, nil, "http://x.test/v1"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestCacheEntries: what get makes of the entry in the directory. Every
// case but the hit must fall back (an error), never hand back a document
// the configuration would not have made.
func TestCacheEntries(t *testing.T) {
	data, loc, base := shopDoc(t)
	parsed, err := Parse(data, loc, base)
	if err != nil {
		t.Fatal(err)
	}
	in := inputsOf(data, loc, base)
	// rewrite edits the entry file's bytes.
	rewrite := func(f func([]byte) []byte) func(t *testing.T, c *cache) {
		return func(t *testing.T, c *cache) {
			path := filepath.Join(c.dir, c.name(in))
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, f(b), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	// hostile writes an entry with a correct frame and checksum of a
	// document edited by f: what someone who can write the directory
	// could leave there.
	hostile := func(f func(d *Document)) func(t *testing.T, c *cache) {
		return func(t *testing.T, c *cache) {
			d, err := Parse(data, loc, base)
			if err != nil {
				t.Fatal(err)
			}
			f(d)
			if err := c.put(in, d); err != nil {
				t.Fatal(err)
			}
		}
	}
	evil, _ := url.Parse("http://evil.test/api")
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, c *cache)
		// get is asked for these inputs (in when zero) by a cache of
		// this build ("" for c's own).
		in    inputs
		build string
		want  error // nil: a hit equal to the parsed document
	}{
		{name: "hit", setup: func(t *testing.T, c *cache) {}},
		{name: "miss: empty directory", setup: func(t *testing.T, c *cache) { _ = os.Remove(filepath.Join(c.dir, c.name(in))) }, want: errCacheMiss},
		{name: "miss: other document", in: inputsOf(append(data, '\n'), loc, base), want: errCacheMiss},
		{name: "miss: other base URL", in: inputsOf(data, loc, "http://other.test/api"), want: errCacheMiss},
		{name: "miss: other build", build: "another build", want: errCacheMiss},
		{name: "corrupted: a byte flipped", setup: rewrite(func(b []byte) []byte { b[len(b)/2] ^= 0x20; return b }), want: errBadEntry},
		{name: "corrupted: truncated", setup: rewrite(func(b []byte) []byte { return b[:len(b)-100] }), want: errBadEntry},
		{name: "corrupted: empty", setup: rewrite(func([]byte) []byte { return nil }), want: errBadEntry},
		{name: "corrupted: not an entry", setup: rewrite(func(b []byte) []byte { return bytes.Repeat([]byte("x"), len(b)) }), want: errBadEntry},
		{name: "hostile: base on another host", setup: hostile(func(d *Document) { d.Base = evil }), want: errBadEntry},
		{name: "hostile: operation on another host", setup: hostile(func(d *Document) { d.Operations[0].Server = evil }), want: errBadEntry},
		{name: "hostile: method unknown", setup: hostile(func(d *Document) { d.Operations[0].Method = "BREW" }), want: errBadEntry},
		{name: "hostile: Authorization as an argument", setup: hostile(func(d *Document) {
			d.Operations[0].params = append(d.Operations[0].params, param{name: "Authorization", in: inHeader, key: "auth"})
		}), want: errBadEntry},
		{name: "hostile: schemas past the bound", setup: hostile(func(d *Document) {
			d.Operations[0].Tool.InputSchema = bytes.Repeat([]byte(" "), MaxSchemaBytes+1)
		}), want: errBadEntry},
		{name: "hostile: invalid tool name", setup: hostile(func(d *Document) { d.Operations[0].Tool.Name = "a:b" }), want: errBadEntry},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCache(t.TempDir(), "")
			if err := c.put(in, parsed); err != nil {
				t.Fatal(err)
			}
			if tc.setup != nil {
				tc.setup(t, c)
			}
			if tc.build != "" {
				c = &cache{dir: c.dir, build: tc.build}
			}
			ask := in
			if tc.in != (inputs{}) {
				ask = tc.in
			}
			got, err := c.get(ask, loc)
			switch {
			case tc.want == nil && err != nil:
				t.Fatalf("want a hit, got %v", err)
			case tc.want == nil && !sameDocument(got, parsed):
				t.Fatal("the hit differs from the parsed document")
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Fatalf("want %v, got %v (document %v)", tc.want, err, got != nil)
			}
		})
	}
}

// TestCacheDecodeBounded: no prefix or bit flip of an entry's body makes
// decoding panic, and every count is checked before it allocates.
func TestCacheDecodeBounded(t *testing.T) {
	data, loc, base := shopDoc(t)
	doc, err := Parse(data, loc, base)
	if err != nil {
		t.Fatal(err)
	}
	body := encodeDocument(nil, doc)
	for i := range body {
		_, _ = decodeDocument(body[:i])
		flipped := bytes.Clone(body)
		flipped[i] ^= 0xff
		_, _ = decodeDocument(flipped)
	}
	// A count of a billion operations in a few bytes is refused, not
	// allocated for.
	e := &encoder{}
	e.string("t")
	e.string("v")
	e.string("http://x.test")
	e.uint(1 << 30)
	if _, err := decodeDocument(e.b); !errors.Is(err, errBadEntry) {
		t.Fatalf("want a bad entry, got %v", err)
	}
}

// TestCacheUnsafeDirectory: a directory others may write is neither read
// nor written.
func TestCacheUnsafeDirectory(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("permission bits")
	}
	data, loc, base := shopDoc(t)
	doc, err := Parse(data, loc, base)
	if err != nil {
		t.Fatal(err)
	}
	in := inputsOf(data, loc, base)
	c := newCache(t.TempDir(), "")
	if err := c.put(in, doc); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(c.dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := c.get(in, loc); !errors.Is(err, errCacheUnsafe) {
		t.Fatalf("get: want %v, got %v", errCacheUnsafe, err)
	}
	if err := c.put(in, doc); !errors.Is(err, errCacheUnsafe) {
		t.Fatalf("put: want %v, got %v", errCacheUnsafe, err)
	}
}

// TestCacheConcurrentWriters: processes writing the same entry at once
// (goroutines here: each put is its own temporary file and rename) leave
// a whole entry, and a reader meanwhile sees a whole entry or none.
func TestCacheConcurrentWriters(t *testing.T) {
	data, loc, base := shopDoc(t)
	doc, err := Parse(data, loc, base)
	if err != nil {
		t.Fatal(err)
	}
	in := inputsOf(data, loc, base)
	dir := t.TempDir()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 8 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for range 5 {
				if err := newCache(dir, "").put(in, doc); err != nil {
					errs <- err
				}
			}
		}()
		go func() {
			defer wg.Done()
			for range 20 {
				got, err := newCache(dir, "").get(in, loc)
				switch {
				case errors.Is(err, errCacheMiss):
				case err != nil:
					errs <- err
				case !sameDocument(got, doc):
					errs <- errors.New("a reader saw another document")
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	got, err := newCache(dir, "").get(in, loc)
	if err != nil || !sameDocument(got, doc) {
		t.Fatalf("after the writers: %v", err)
	}
	des, _ := os.ReadDir(dir)
	for _, de := range des {
		if strings.HasPrefix(de.Name(), ".tmp-") {
			t.Errorf("temporary file left: %s", de.Name())
		}
	}
}

// TestCachePrune: the directory keeps the newest maxEntries entries.
func TestCachePrune(t *testing.T) {
	data, loc, base := shopDoc(t)
	doc, err := Parse(data, loc, base)
	if err != nil {
		t.Fatal(err)
	}
	c := newCache(t.TempDir(), "")
	for i := range maxEntries + 5 {
		if err := c.put(inputsOf(append(bytes.Clone(data), bytes.Repeat([]byte("\n"), i)...), loc, base), doc); err != nil {
			t.Fatal(err)
		}
	}
	des, _ := os.ReadDir(c.dir)
	if len(des) != maxEntries {
		t.Fatalf("%d entries, want %d", len(des), maxEntries)
	}
}

// loadOutcomes opens a Set of the shop document with the cache in dir
// and returns what its load logged of the cache, and its tools' names.
func loadOutcome(t *testing.T, dir string) (string, []string) {
	t.Helper()
	_, loc, _ := shopDoc(t)
	return loadOutcomeOf(t, Kind{CacheDir: dir}, loc.Path)
}

// loadOutcomeOf is loadOutcome of the shop document at spec through k.
func loadOutcomeOf(t *testing.T, k Kind, spec string) (string, []string) {
	t.Helper()
	var logs syncbuf.Buffer
	env := toolsource.Env{Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	_, _, base := shopDoc(t)
	cfg := Config{Config: toolsource.Config{Name: "shop", Type: Type}, Spec: spec, BaseURL: base}
	specs := []toolsource.Spec{cfg}
	set, err := toolsource.New(context.Background(), toolsource.NewRegistry(k), specs, env)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	tools, err := set.Tools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools {
		names = append(names, tool.Name+" "+tool.Endpoint.String())
	}
	i := strings.Index(logs.String(), `"cache":"`)
	if i < 0 {
		t.Fatalf("no cache outcome logged: %s", logs.String())
	}
	outcome, _, _ := strings.Cut(logs.String()[i+len(`"cache":"`):], `"`)
	return outcome, names
}

// TestLoadThroughCache: the first process parses and writes, the next
// reads back the same tools without parsing; a directory that cannot be
// written costs only the parse.
func TestLoadThroughCache(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pml-cache-openapi")
	first, want := loadOutcome(t, dir)
	second, got := loadOutcome(t, dir)
	if first != cacheMiss || second != cacheHit {
		t.Fatalf("outcomes %q then %q, want %q then %q", first, second, cacheMiss, cacheHit)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("tools read back differ:\n%v\n%v", got, want)
	}
	if off, _ := loadOutcome(t, ""); off != cacheOff {
		t.Fatalf("no directory: outcome %q", off)
	}
	if runtime.GOOS != "windows" && os.Geteuid() != 0 {
		ro := filepath.Join(t.TempDir(), "ro")
		if err := os.Mkdir(ro, 0o500); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if got, _ := loadOutcome(t, filepath.Join(ro, "cache")); got != cacheMiss {
				t.Fatalf("read-only: outcome %q", got)
			}
		}
	}
	// A file where the directory should be (an unwritable place, even
	// for root): parsed each time, never an error.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if got, _ := loadOutcome(t, filepath.Join(file, "cache")); got != cacheMiss {
			t.Fatalf("unwritable: outcome %q", got)
		}
	}
}

// TestCacheFileDigest: a file's digest is read back from its stat record
// while the file is unchanged, taken again once it changes, and not
// recorded while the file is too fresh for its times to tell.
func TestCacheFileDigest(t *testing.T) {
	if _, ok := fingerprintOf(mustStat(t, "testdata/shop.yaml")); !ok {
		t.Skip("no fingerprints on this system: every digest is taken by reading")
	}
	data, _, _ := shopDoc(t)
	digest := inputsOf(data, nil, "").digest
	for _, tc := range []struct {
		name string
		racy time.Duration
		// change edits the file after the first digest; record whether
		// a record was expected to be written.
		change func(t *testing.T, path string)
		record bool
	}{
		{name: "unchanged: read back", record: true},
		{name: "fresh file: not recorded", racy: time.Hour},
		{name: "rewritten, same size: taken again", record: true, change: func(t *testing.T, path string) {
			b := bytes.Clone(data)
			b[len(b)-2] ^= 0x20
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			// Within one tick of the kernel's clock the times could stay
			// as they were (the racy case racyWindow is for): set apart.
			later := time.Now().Add(time.Hour)
			if err := os.Chtimes(path, later, later); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "doc.yaml")
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			c := newCache(t.TempDir(), "")
			c.racy = tc.racy
			got, err := c.fileDigest(path)
			if err != nil || got != digest {
				t.Fatalf("first digest: %x, %v", got, err)
			}
			record := filepath.Join(c.dir, c.statName(path))
			if _, err := os.Stat(record); (err == nil) != tc.record {
				t.Fatalf("record written: %v, want %v", err == nil, tc.record)
			}
			if !tc.record {
				return
			}
			// A record that says another digest for this very file is
			// believed: proof that the file is not read again.
			planted := sha256.Sum256([]byte("planted"))
			fp, _ := fingerprintOf(mustStat(t, path))
			if err := c.writeStat(record, fp, planted); err != nil {
				t.Fatal(err)
			}
			want := planted
			if tc.change != nil {
				tc.change(t, path)
				b, _ := os.ReadFile(path)
				want = sha256.Sum256(b)
			}
			if got, err := c.fileDigest(path); err != nil || got != want {
				t.Fatalf("second digest: %x, %v; want %x", got, err, want)
			}
		})
	}
}

// TestCacheFileDigestBounded: a document over the size bound is refused
// before any record is read, as Fetch refuses it.
func TestCacheFileDigestBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.json")
	if err := os.WriteFile(path, bytes.Repeat([]byte(" "), MaxDocumentBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newCache(t.TempDir(), "")
	if fp, ok := fingerprintOf(mustStat(t, path)); ok {
		if err := c.writeStat(filepath.Join(c.dir, c.statName(path)), fp, sha256.Sum256(nil)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.fileDigest(path); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("want %v, got %v", ErrTooLarge, err)
	}
}

func mustStat(t *testing.T, path string) os.FileInfo {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi
}

// TestLoadShippedAndMoved: an entry a build made (its own copy of the
// document elsewhere, CacheDir of its own) serves the deployment from the
// read-only shipped directory, which is never written; an entry serves
// any copy of the same document file.
func TestLoadShippedAndMoved(t *testing.T) {
	data, _, _ := shopDoc(t)
	staged := filepath.Join(t.TempDir(), "staging", "shop.yaml")
	deployed := filepath.Join(t.TempDir(), "task", "shop.yaml")
	for _, p := range []string{staged, deployed} {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	shipped := filepath.Join(t.TempDir(), "guest-cache-openapi")
	if got, _ := loadOutcomeOf(t, Kind{CacheDir: shipped}, staged); got != cacheMiss {
		t.Fatalf("build: outcome %q", got)
	}
	before, _ := os.ReadDir(shipped)
	own := filepath.Join(t.TempDir(), "pml-cache-openapi")
	if got, _ := loadOutcomeOf(t, Kind{CacheDir: own, ShippedCacheDir: shipped}, deployed); got != cacheHit {
		t.Fatalf("deployed, from the shipped entry: outcome %q", got)
	}
	if after, _ := os.ReadDir(shipped); len(after) != len(before) {
		t.Fatalf("the shipped directory was written: %v then %v", before, after)
	}
	if got, _ := loadOutcomeOf(t, Kind{CacheDir: shipped}, deployed); got != cacheHit {
		t.Fatalf("a copy elsewhere: outcome %q", got)
	}
}

// FuzzCacheEntry: whatever bytes stand in an entry's place, reading them
// back gives a document the configuration would have made or an error,
// without panicking or allocating past their size.
func FuzzCacheEntry(f *testing.F) {
	data, loc, base := shopDoc(f)
	doc, err := Parse(data, loc, base)
	if err != nil {
		f.Fatal(err)
	}
	in := inputsOf(data, loc, base)
	seed := newCache(f.TempDir(), "")
	if err := seed.put(in, doc); err != nil {
		f.Fatal(err)
	}
	entry, err := os.ReadFile(filepath.Join(seed.dir, seed.name(in)))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(entry)
	f.Add(entry[:len(entry)/2])
	f.Add([]byte("PMLOAPI1"))
	f.Add(encodeDocument(nil, doc))
	f.Fuzz(func(t *testing.T, b []byte) {
		// The body alone, as if its frame and checksum held: what
		// someone who can write the directory could leave.
		if got, err := decodeDocument(b); err == nil {
			_ = checkDecoded(got, loc, base)
		}
		got, err := seed.decodeEntry(b, in, loc)
		if err == nil && checkDecoded(got, loc, base) != nil {
			t.Fatal("an entry read back is one the checks refuse")
		}
	})
}

// TestCacheShippedBehindUnusable: the shipped entry serves when the
// process's own directory cannot hold one (a file in its place) or holds
// a damaged one.
func TestCacheShippedBehindUnusable(t *testing.T) {
	data, loc, base := shopDoc(t)
	doc, err := Parse(data, loc, base)
	if err != nil {
		t.Fatal(err)
	}
	in := inputsOf(data, loc, base)
	shipped := newCache(filepath.Join(t.TempDir(), "shipped"), "")
	if err := shipped.put(in, doc); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	damaged := newCache(t.TempDir(), "")
	if err := damaged.put(in, doc); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(damaged.dir, damaged.name(in)), []byte("PMLOAPI1xxxxxxxx"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, own := range []string{file, damaged.dir, filepath.Join(t.TempDir(), "absent")} {
		c := newCache(own, shipped.dir)
		if got, err := c.get(in, loc); err != nil || !sameDocument(got, doc) {
			t.Errorf("own directory %s: %v", own, err)
		}
		if _, err := newCache(own, "").get(in, loc); err == nil {
			t.Errorf("own directory %s without the shipped one: a hit", own)
		}
	}
}
