package app

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/guestcache"
)

// precompiled is one shipped cache for the whole test binary (compiling
// takes about half a second); tests change copies of it.
var precompiled = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "pml-app-shipped")
	if err != nil {
		return "", err
	}
	_, err = Precompile(context.Background(), filepath.Join(dir, ShippedCacheName), slog.New(slog.DiscardHandler))
	return filepath.Join(dir, ShippedCacheName), err
})

// shippedCopy returns a copy of the precompiled shipped cache.
func shippedCopy(t *testing.T) string {
	t.Helper()
	src, err := precompiled()
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), ShippedCacheName)
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	return dst
}

// editManifest rewrites the manifest of the shipped cache in dir.
func editManifest(t *testing.T, dir string, edit func(*guestcache.Manifest)) {
	t.Helper()
	m, err := guestcache.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	edit(&m)
	b, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(dir, guestcache.ManifestFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// wazeroEntry is the shipped cache's one entry of wazero's (the other is
// the guest's post-init image).
func wazeroEntry(t *testing.T, m guestcache.Manifest) string {
	t.Helper()
	for _, e := range m.Entries {
		if strings.HasPrefix(e, "wazero-") {
			return e
		}
	}
	t.Fatalf("no wazero entry in %v", m.Entries)
	return ""
}

// compiledEntries are the regular files (not links to a shipped cache) in
// a cache directory, but for post-init images: what wazero compiled there.
func compiledEntries(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := guestcache.Entries(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e, guest.ImageDir+"/") {
			continue
		}
		if st, err := os.Lstat(filepath.Join(dir, e)); err == nil && st.Mode().IsRegular() {
			out = append(out, e)
		}
	}
	return out
}

func TestOpenEngineGuestCache(t *testing.T) {
	tests := []struct {
		name string
		// setup returns the Config's CacheDir and ShippedCacheDir.
		setup func(t *testing.T) (cacheDir, shipped string)
		hit   bool
		from  string // on a hit
		// reason is a substring of the miss reason (or, on a hit from the
		// cache directory, of shipped_miss).
		reason string
	}{
		{
			name:  "shipped cache, empty cache directory",
			setup: func(t *testing.T) (string, string) { return t.TempDir(), shippedCopy(t) },
			hit:   true, from: fromShipped,
		},
		{
			name:   "no shipped cache configured",
			setup:  func(t *testing.T) (string, string) { return t.TempDir(), "" },
			reason: "no shipped cache configured",
		},
		{
			name:   "no compilation cache directory",
			setup:  func(t *testing.T) (string, string) { return "", shippedCopy(t) },
			reason: "no compilation cache directory",
		},
		{
			name:   "shipped cache missing (built with PML_SHIP_CACHE=0)",
			setup:  func(t *testing.T) (string, string) { return t.TempDir(), filepath.Join(t.TempDir(), ShippedCacheName) },
			reason: "no usable shipped cache",
		},
		{
			name: "built from another guest",
			setup: func(t *testing.T) (string, string) {
				d := shippedCopy(t)
				editManifest(t, d, func(m *guestcache.Manifest) { m.Guest = "0000" })
				return t.TempDir(), d
			},
			reason: `guest "0000", running "` + guest.EmbeddedHash() + `"`,
		},
		{
			name: "built on a CPU without the features",
			setup: func(t *testing.T) (string, string) {
				d := shippedCopy(t)
				editManifest(t, d, func(m *guestcache.Manifest) { m.CPUFeatures = nil })
				return t.TempDir(), d
			},
			reason: "cpu features",
		},
		{
			name: "built by another wazero",
			setup: func(t *testing.T) (string, string) {
				d := shippedCopy(t)
				editManifest(t, d, func(m *guestcache.Manifest) { m.Wazero = "v0.0.1" })
				return t.TempDir(), d
			},
			reason: `wazero "v0.0.1"`,
		},
		{
			name: "corrupt entry",
			setup: func(t *testing.T) (string, string) {
				d := shippedCopy(t)
				m, _ := guestcache.ReadManifest(d)
				p := filepath.Join(d, wazeroEntry(t, m))
				b, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				// Past the header: wazero's checksum catches it.
				b[len(b)/2] ^= 0xff
				if err := os.WriteFile(p, b, 0o644); err != nil {
					t.Fatal(err)
				}
				return t.TempDir(), d
			},
			reason: "the shipped cache did not load",
		},
		{
			name: "manifest matches but wazero's key does not",
			setup: func(t *testing.T) (string, string) {
				d := shippedCopy(t)
				m, _ := guestcache.ReadManifest(d)
				old := wazeroEntry(t, m)
				renamed := filepath.Join(filepath.Dir(old), strings.Repeat("0", 64))
				if err := os.Rename(filepath.Join(d, old), filepath.Join(d, renamed)); err != nil {
					t.Fatal(err)
				}
				editManifest(t, d, func(m *guestcache.Manifest) { m.Entries = []string{filepath.ToSlash(renamed)} })
				return t.TempDir(), d
			},
			reason: "the shipped cache's manifest matched, but wazero compiled anyway",
		},
		{
			name: "an earlier process compiled into the cache directory",
			setup: func(t *testing.T) (string, string) {
				cache := t.TempDir()
				eng, _, err := openEngine(context.Background(), Config{CacheDir: cache, prepared: -1}, slog.New(slog.DiscardHandler))
				if err != nil {
					t.Fatal(err)
				}
				_ = eng.Close(context.Background())
				return cache, filepath.Join(t.TempDir(), "none")
			},
			hit: true, from: fromCacheDir, reason: "no usable shipped cache",
		},
		{
			name: "an earlier process compiled, without keeping the post-init image",
			setup: func(t *testing.T) (string, string) {
				cache := t.TempDir()
				eng, _, err := openEngine(context.Background(), Config{CacheDir: cache, prepared: -1}, slog.New(slog.DiscardHandler))
				if err != nil {
					t.Fatal(err)
				}
				_ = eng.Close(context.Background())
				// As a cache written before images were kept: making one
				// now is no compile.
				if err := os.RemoveAll(filepath.Join(cache, guest.ImageDir)); err != nil {
					t.Fatal(err)
				}
				return cache, ""
			},
			hit: true, from: fromCacheDir, reason: "no shipped cache configured",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cacheDir, shipped := tt.setup(t)
			var buf bytes.Buffer
			log := slog.New(slog.NewJSONHandler(&buf, nil))
			ctx := context.Background()
			eng, out, err := openEngine(ctx, Config{CacheDir: cacheDir, ShippedCacheDir: shipped, prepared: -1}, log)
			if err != nil {
				t.Fatal(err)
			}
			defer eng.Close(ctx)
			if res := eng.Run(ctx, guest.Request{Code: "return 1 + 1"}); !res.OK || string(res.Value) != "2" {
				t.Fatalf("the engine does not run: %+v", res)
			}
			buf.Reset()
			out.log(log)
			var line map[string]any
			if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
				t.Fatalf("not one JSON line: %q", buf.String())
			}
			if line["msg"] != "guest_cache" || line["hit"] != tt.hit {
				t.Fatalf("logged %s, want hit=%v", buf.Bytes(), tt.hit)
			}
			if tt.hit {
				if line["from"] != tt.from || line["load_ms"] == nil {
					t.Errorf("logged %s, want from=%s and load_ms", buf.Bytes(), tt.from)
				}
				if tt.from == fromShipped && len(compiledEntries(t, cacheDir)) != 0 {
					t.Errorf("a hit from the shipped cache wrote %v", compiledEntries(t, cacheDir))
				}
				if tt.reason != "" && !strings.Contains(line["shipped_miss"].(string), tt.reason) {
					t.Errorf("shipped_miss in %s lacks %q", buf.Bytes(), tt.reason)
				}
				return
			}
			wantLevel := "WARN"
			if tt.reason == "no shipped cache configured" || tt.reason == "no compilation cache directory" {
				wantLevel = "INFO" // the pml command: nothing to warn about
			}
			if line["level"] != wantLevel {
				t.Errorf("a miss logged at %v, want %s", line["level"], wantLevel)
			}
			if reason, _ := line["reason"].(string); !strings.Contains(reason, tt.reason) {
				t.Errorf("reason in %s lacks %q", buf.Bytes(), tt.reason)
			}
			if ms, _ := line["compile_ms"].(float64); ms <= 0 || line["compile_workers"] != float64(1) {
				t.Errorf("no compile time or workers in %s", buf.Bytes())
			}
			if cacheDir != "" && len(compiledEntries(t, cacheDir)) != 1 {
				t.Errorf("a miss left %v compiled in the cache directory, want one entry", compiledEntries(t, cacheDir))
			}
		})
	}
}

func TestPrecompile(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	if _, err := precompiled(); err != nil {
		t.Fatal(err)
	}

	t.Run("manifest", func(t *testing.T) {
		d := shippedCopy(t)
		m, err := guestcache.ReadManifest(d)
		if err != nil {
			t.Fatal(err)
		}
		if err := guestcache.Mismatch(m, guestcache.Running(guest.EmbeddedHash())); err != nil {
			t.Error(err)
		}
		// wazero's code, and the guest's post-init image (sorted first).
		if len(m.Entries) != 2 || m.Entries[0] != guest.ImageDir+"/"+guest.EmbeddedHash() || !strings.HasPrefix(m.Entries[1], "wazero-"+m.Wazero+"-") {
			t.Errorf("entries %v", m.Entries)
		}
		err = filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if st, _ := os.Stat(p); err == nil && st.Mode().Perm()&0o444 != 0o444 {
				t.Errorf("%s is %v: not readable by Lambda's user", p, st.Mode())
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	})
	t.Run("replaces an earlier shipped cache", func(t *testing.T) {
		d := shippedCopy(t)
		stale := filepath.Join(d, "wazero-v0.0.1-arm64-linux", "stale")
		if err := os.MkdirAll(filepath.Dir(stale), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(stale, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		m, err := Precompile(ctx, d, log)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(stale); err == nil || len(m.Entries) != 2 {
			t.Errorf("kept a stale entry: %v", m.Entries)
		}
	})
	t.Run("refuses a directory that is not a shipped cache", func(t *testing.T) {
		d := t.TempDir()
		keep := filepath.Join(d, "precious")
		if err := os.WriteFile(keep, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Precompile(ctx, d, log); err == nil || !strings.Contains(err.Error(), "not replacing") {
			t.Fatalf("err = %v", err)
		}
		if _, err := os.Stat(keep); err != nil {
			t.Fatal("deleted a file it did not own")
		}
	})
}

func TestPrecompileMainUsage(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, args := range [][]string{{"--precompile"}, {"--help"}, {"--precompile", "--x"}, {"x", "y"}} {
		if code := PrecompileMain(args, log); code != 2 {
			t.Errorf("PrecompileMain(%q) = %d, want 2", args, code)
		}
	}
}

func TestCompileWorkers(t *testing.T) {
	tests := []struct {
		memory string
		cpus   int
		want   int
	}{
		{"", 8, 1},     // not on Lambda
		{"abc", 8, 1},  // unreadable
		{"-5", 8, 1},   // nonsense
		{"128", 2, 1},  // a fraction of a vCPU
		{"1024", 2, 1}, // the template's default: 0.58 of one
		{"1769", 2, 1}, // exactly one
		{"3537", 2, 1}, // not quite two
		{"3538", 2, 2},
		{"10240", 6, 5},
		{"10240", 2, 2}, // never more than the CPUs shown
	}
	for _, tt := range tests {
		if got := compileWorkers(tt.memory, tt.cpus); got != tt.want {
			t.Errorf("compileWorkers(%q, %d) = %d, want %d", tt.memory, tt.cpus, got, tt.want)
		}
	}
}

// TestOneExecutionPreparesOne: a process that runs one execution (pml run)
// has the guest prepare one instance, a service two.
func TestOneExecutionPreparesOne(t *testing.T) {
	cache := t.TempDir()
	for _, tc := range []struct {
		one  bool
		want int64
	}{{true, 1}, {false, 2}} {
		eng, _, err := openEngine(context.Background(), Config{CacheDir: cache, OneExecution: tc.one}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for eng.Stats().Created < tc.want && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond) // a third would come about now
		if got := eng.Stats().Created; got != tc.want {
			t.Errorf("OneExecution %v: %d instances prepared, want %d", tc.one, got, tc.want)
		}
		_ = eng.Close(context.Background())
	}
}
