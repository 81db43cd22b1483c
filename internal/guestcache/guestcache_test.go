package guestcache

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
)

func TestWazeroVersion(t *testing.T) {
	// wazero names its cache directory after the version it reads from the
	// build information: ours must read the same. (A test binary records
	// no dependencies, so both say "dev" here; the functions' binaries do,
	// and integration's artifact check reads the real version.)
	dir := t.TempDir()
	if _, err := wazero.NewCompilationCacheWithDir(dir); err != nil {
		t.Fatal(err)
	}
	want := "wazero-" + WazeroVersion() + "-" + runtime.GOARCH + "-" + runtime.GOOS
	if _, err := os.Stat(filepath.Join(dir, want)); err != nil {
		got, _ := os.ReadDir(dir)
		t.Fatalf("wazero's cache directory is not %s: %v (it made %v)", want, err, got)
	}
}

func TestMismatch(t *testing.T) {
	base := Manifest{Wazero: "v1.12.0", GOOS: "linux", GOARCH: "arm64", CPUFeatures: []string{FeatureArm64Atomics}, Guest: "abc"}
	tests := []struct {
		name   string
		change func(*Manifest)
		want   string // substring of the reason; "" for a match
	}{
		{"same", func(*Manifest) {}, ""},
		{"entries are not compared", func(m *Manifest) { m.Entries = []string{"x"} }, ""},
		{"feature order is not compared", func(m *Manifest) { m.CPUFeatures = []string{"b", "a"} }, `cpu features "arm64.atomics", running "a,b"`},
		{"wazero", func(m *Manifest) { m.Wazero = "v1.13.0" }, `wazero "v1.12.0", running "v1.13.0"`},
		{"goarch", func(m *Manifest) { m.GOARCH = "amd64" }, `goarch "arm64", running "amd64"`},
		{"goos", func(m *Manifest) { m.GOOS = "darwin" }, `goos "linux", running "darwin"`},
		{"no LSE atomics", func(m *Manifest) { m.CPUFeatures = nil }, `cpu features "arm64.atomics", running ""`},
		{"guest", func(m *Manifest) { m.Guest = "def" }, `guest "abc", running "def"`},
		{"two differences", func(m *Manifest) { m.Guest, m.Wazero = "def", "v2" }, `wazero "v1.12.0", running "v2"; guest`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			running := base
			running.CPUFeatures = slices.Clone(base.CPUFeatures)
			tt.change(&running)
			err := Mismatch(base, running)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("mismatch: %v", err)
			case tt.want != "" && err == nil:
				t.Fatal("no mismatch")
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Fatalf("reason %q lacks %q", err, tt.want)
			}
		})
	}
	if err := Mismatch(base, Manifest{Wazero: "v1.12.0", GOOS: "linux", GOARCH: "arm64", CPUFeatures: []string{FeatureArm64Atomics, "x"}, Guest: "abc"}); err == nil {
		t.Error("an extra running feature matched")
	}
}

// shippedCache writes a shipped cache with one entry and the given
// manifest, as the precompile step would.
func shippedCache(t *testing.T, m Manifest) string {
	t.Helper()
	dir := t.TempDir()
	entry := filepath.Join(dir, "wazero-v1.12.0-arm64-linux", "0123abcd")
	if err := os.MkdirAll(filepath.Dir(entry), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(entry, []byte("machine code"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A half-written entry from wazero must not be shipped.
	if err := os.WriteFile(entry+".123.tmp", []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteManifest(dir, m); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestWriteManifest(t *testing.T) {
	running := Running("abc")
	dir := shippedCache(t, running)
	got, err := ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"wazero-v1.12.0-arm64-linux/0123abcd"}; !slices.Equal(got.Entries, want) {
		t.Errorf("entries %v, want %v", got.Entries, want)
	}
	if err := Mismatch(got, running); err != nil {
		t.Error(err)
	}
	for _, p := range []string{dir, filepath.Join(dir, "wazero-v1.12.0-arm64-linux"), filepath.Join(dir, "wazero-v1.12.0-arm64-linux", "0123abcd"), filepath.Join(dir, ManifestFile)} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if want := fs.FileMode(0o444); st.IsDir() {
			if st.Mode().Perm()&0o555 != 0o555 {
				t.Errorf("%s is %v: Lambda's user cannot read it", p, st.Mode())
			}
		} else if st.Mode().Perm()&want != want {
			t.Errorf("%s is %v: Lambda's user cannot read it", p, st.Mode())
		}
	}
	if err := WriteManifest(t.TempDir(), running); err == nil {
		t.Error("wrote a manifest for an empty cache")
	}
}

func TestOverlay(t *testing.T) {
	running := Running("abc")
	const entry = "wazero-v1.12.0-arm64-linux/0123abcd"
	tests := []struct {
		name    string
		shipped func(t *testing.T) string
		cache   func(t *testing.T) string // the writable cache directory
		want    string                    // substring of the miss reason; "" for a hit
		content string                    // what the entry reads through cacheDir on a hit
	}{
		{
			name:    "match",
			shipped: func(t *testing.T) string { return shippedCache(t, running) },
			content: "machine code",
		},
		{
			name:    "cache directory not yet created",
			shipped: func(t *testing.T) string { return shippedCache(t, running) },
			cache:   func(t *testing.T) string { return filepath.Join(t.TempDir(), "a", "b") },
			content: "machine code",
		},
		{
			name:    "an earlier process's entry is kept",
			shipped: func(t *testing.T) string { return shippedCache(t, running) },
			cache: func(t *testing.T) string {
				d := t.TempDir()
				p := filepath.Join(d, filepath.FromSlash(entry))
				if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte("compiled here"), 0o600); err != nil {
					t.Fatal(err)
				}
				return d
			},
			content: "compiled here",
		},
		{
			name:    "no shipped cache",
			shipped: func(t *testing.T) string { return filepath.Join(t.TempDir(), "none") },
			want:    "no usable shipped cache",
		},
		{
			name: "corrupt manifest",
			shipped: func(t *testing.T) string {
				d := shippedCache(t, running)
				if err := os.WriteFile(filepath.Join(d, ManifestFile), []byte("{"), 0o644); err != nil {
					t.Fatal(err)
				}
				return d
			},
			want: "manifest",
		},
		{
			name: "other CPU",
			shipped: func(t *testing.T) string {
				m := running
				m.CPUFeatures = []string{"arm64.sve9"}
				return shippedCache(t, m)
			},
			want: "cpu features",
		},
		{
			name: "other guest",
			shipped: func(t *testing.T) string {
				m := running
				m.Guest = "def"
				return shippedCache(t, m)
			},
			want: `guest "def", running "abc"`,
		},
		{
			name: "entry missing",
			shipped: func(t *testing.T) string {
				d := shippedCache(t, running)
				if err := os.Remove(filepath.Join(d, filepath.FromSlash(entry))); err != nil {
					t.Fatal(err)
				}
				return d
			},
			want: "shipped cache entry",
		},
		{
			name: "entry outside the cache",
			shipped: func(t *testing.T) string {
				d := t.TempDir()
				m := running
				m.Entries = []string{"../../etc/passwd"}
				b, _ := json.Marshal(m)
				if err := os.WriteFile(filepath.Join(d, ManifestFile), b, 0o644); err != nil {
					t.Fatal(err)
				}
				return d
			},
			want: "bad entry",
		},
		{
			name: "no entries",
			shipped: func(t *testing.T) string {
				d := t.TempDir()
				b, _ := json.Marshal(running)
				if err := os.WriteFile(filepath.Join(d, ManifestFile), b, 0o644); err != nil {
					t.Fatal(err)
				}
				return d
			},
			want: "no entries",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			shipped := tt.shipped(t)
			cacheDir := t.TempDir()
			if tt.cache != nil {
				cacheDir = tt.cache(t)
			}
			err := Overlay(shipped, cacheDir, running)
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("miss reason %v, want %q", err, tt.want)
				}
				if entries, _ := Entries(cacheDir); len(entries) != 0 {
					t.Fatalf("a miss left entries in the cache directory: %v", entries)
				}
				return
			}
			if err != nil {
				t.Fatalf("miss: %v", err)
			}
			b, err := os.ReadFile(filepath.Join(cacheDir, filepath.FromSlash(entry)))
			if err != nil || string(b) != tt.content {
				t.Fatalf("entry through the cache directory: %q %v, want %q", b, err, tt.content)
			}
			// Overlaying twice (a second process in the same container)
			// is harmless.
			if err := Overlay(shipped, cacheDir, running); err != nil {
				t.Fatalf("second overlay: %v", err)
			}
		})
	}
}

func TestEntries(t *testing.T) {
	if e, err := Entries(filepath.Join(t.TempDir(), "missing")); err != nil || len(e) != 0 {
		t.Fatalf("missing dir: %v %v", e, err)
	}
	d := shippedCache(t, Running("abc"))
	e, err := Entries(d)
	if err != nil || !slices.Equal(e, []string{"wazero-v1.12.0-arm64-linux/0123abcd"}) {
		t.Fatalf("%v %v", e, err)
	}
}
