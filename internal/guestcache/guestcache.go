// Package guestcache ships the guest's compiled machine code inside a
// Lambda artifact, so that a new container with an empty /tmp starts
// without compiling the guest (about half a second).
//
// The shipped cache is a wazero compilation cache directory, produced at
// build time by the function binary itself (its precompile mode, see
// internal/app.Precompile) and therefore by exactly the wazero and guest
// that will read it, plus a Manifest. wazero keys its cache entries by the
// guest, its own version, GOARCH and the CPU features its code generator
// uses, but a miss is silent: it just compiles. The manifest records the
// same inputs so that init can say why the shipped code was not used.
//
// At init, Overlay compares the manifest with the running process and, when
// they agree, links the shipped entries into the writable cache directory
// wazero is given (the package directory is read-only on Lambda, and wazero
// fails a compile whose cache write fails). Entries reports what a cache
// directory holds, so the caller can tell afterwards whether wazero
// compiled anyway.
package guestcache

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"

	"golang.org/x/sys/cpu"
)

// ManifestFile is the manifest's name inside a shipped cache directory.
const ManifestFile = "manifest.json"

// wazeroModule is the module path whose version wazero puts in its cache
// directory's name and in every entry's header.
const wazeroModule = "github.com/tetratelabs/wazero"

// Manifest describes a compilation cache: what wazero's cache key is made
// of, and the entries the cache holds.
type Manifest struct {
	// Wazero is the wazero module version, as wazero itself reads it from
	// the build information.
	Wazero string `json:"wazero"`
	GOOS   string `json:"goos"`
	GOARCH string `json:"goarch"`
	// CPUFeatures are the features wazero's code generator keys its cache
	// on (internal/platform.CpuFeatures), named as in CPUFeatures.
	CPUFeatures []string `json:"cpu_features"`
	// Guest is the sha256 (hex) of the guest binary that was compiled.
	Guest string `json:"guest"`
	// Entries are the cache's files, relative to its directory, with
	// forward slashes. Running only: omitted when comparing.
	Entries []string `json:"entries,omitempty"`
}

// Running returns the manifest a cache made by this process would have
// (without entries), for a guest whose hash is guest.
func Running(guest string) Manifest {
	return Manifest{Wazero: WazeroVersion(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, CPUFeatures: CPUFeatures(), Guest: guest}
}

// WazeroVersion is the version of wazero linked into this binary, read as
// wazero reads it (internal/version): the first dependency whose path
// contains wazero's, "dev" when there is none (a binary that does not
// link wazero).
func WazeroVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if strings.Contains(dep.Path, wazeroModule) && dep.Version != "" && dep.Version != "(devel)" {
				return dep.Version
			}
		}
	}
	return "dev"
}

// CPUFeatures lists the CPU features wazero v1.12's cache key includes on
// this machine, read from the same source (golang.org/x/sys/cpu) and by the
// same rules as its internal/platform: on arm64 only the LSE atomics; on
// amd64 SSE4.1, BMI1 and "ABM" (BMI1, BMI2 and POPCNT together). A wazero
// upgrade must re-check this list; a difference shows up as a logged miss
// ("wazero compiled despite a matching manifest"), never as bad code,
// because wazero checks its own key.
func CPUFeatures() []string {
	return featuresOf(runtime.GOARCH, cpuFlags{
		arm64Atomics: cpu.ARM64.HasATOMICS,
		sse41:        cpu.X86.HasSSE41,
		bmi1:         cpu.X86.HasBMI1,
		bmi2:         cpu.X86.HasBMI2,
		popcnt:       cpu.X86.HasPOPCNT,
	})
}

// cpuFlags are the raw flags CPUFeatures reads, separated so tests can
// give any combination.
type cpuFlags struct{ arm64Atomics, sse41, bmi1, bmi2, popcnt bool }

// Feature names, as they appear in manifests.
const (
	FeatureArm64Atomics = "arm64.atomics"
	FeatureAmd64SSE41   = "amd64.sse4.1"
	FeatureAmd64BMI1    = "amd64.bmi1"
	FeatureAmd64ABM     = "amd64.abm"
)

func featuresOf(goarch string, f cpuFlags) []string {
	out := []string{}
	switch goarch {
	case "arm64":
		if f.arm64Atomics {
			out = append(out, FeatureArm64Atomics)
		}
	case "amd64":
		if f.sse41 {
			out = append(out, FeatureAmd64SSE41)
		}
		if f.bmi1 {
			out = append(out, FeatureAmd64BMI1)
		}
		if f.bmi1 && f.bmi2 && f.popcnt {
			out = append(out, FeatureAmd64ABM)
		}
	}
	return out
}

// LambdaFeatures are the features every CPU Lambda runs GOARCH on has, as
// wazero names them: Graviton2 (Neoverse N1), Graviton3 (V1) and Graviton4
// (V2) all have the LSE atomics. A cache precompiled without them never
// hits on Lambda. Nil for an architecture without such a guarantee here.
func LambdaFeatures(goarch string) []string {
	if goarch == "arm64" {
		return []string{FeatureArm64Atomics}
	}
	return nil
}

// Mismatch says why a cache described by shipped cannot serve a process
// described by running, or returns nil when it can. Entries are not
// compared.
func Mismatch(shipped, running Manifest) error {
	var diffs []string
	diff := func(what, s, r string) {
		if s != r {
			diffs = append(diffs, fmt.Sprintf("%s %q, running %q", what, s, r))
		}
	}
	diff("wazero", shipped.Wazero, running.Wazero)
	diff("goos", shipped.GOOS, running.GOOS)
	diff("goarch", shipped.GOARCH, running.GOARCH)
	diff("cpu features", strings.Join(sorted(shipped.CPUFeatures), ","), strings.Join(sorted(running.CPUFeatures), ","))
	diff("guest", shipped.Guest, running.Guest)
	if len(diffs) == 0 {
		return nil
	}
	return fmt.Errorf("shipped cache was built for another process: %s", strings.Join(diffs, "; "))
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// Entries lists the files of the cache directory dir, relative to it with
// forward slashes, sorted; wazero's temporary files and the manifest are
// left out. A missing dir has no entries.
func Entries(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == dir && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll
			}
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		// wazero writes an entry as NAME.*.tmp and renames it into place.
		if rel == ManifestFile || strings.HasSuffix(rel, ".tmp") {
			return nil
		}
		out = append(out, rel)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing cache %s: %w", dir, err)
	}
	slices.Sort(out)
	return out, nil
}

// WriteManifest lists dir's entries into m.Entries, writes m as dir's
// manifest and makes the whole cache readable by every user: wazero writes
// it 0700/0600, and Lambda runs the function as another user than the one
// who built the package (it asks for 0444 files and 0555 directories).
func WriteManifest(dir string, m Manifest) error {
	entries, err := Entries(dir)
	if err != nil {
		return err
	}
	if len(entries) == 0 {
		return fmt.Errorf("cache %s has no entries: nothing was compiled into it", dir)
	}
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		mode := fs.FileMode(0o644)
		if d.IsDir() {
			mode = 0o755
		}
		return os.Chmod(path, mode)
	})
	if err != nil {
		return fmt.Errorf("making the cache readable: %w", err)
	}
	m.Entries = entries
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, ManifestFile), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing the manifest: %w", err)
	}
	return nil
}

// ReadManifest reads the manifest of the shipped cache in dir.
func ReadManifest(dir string) (Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return Manifest{}, fmt.Errorf("no usable shipped cache: %w", err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, fmt.Errorf("shipped cache manifest %s: %w", filepath.Join(dir, ManifestFile), err)
	}
	return m, nil
}

// Overlay makes the shipped cache in dir usable through the writable cache
// directory cacheDir, when its manifest matches running: each shipped entry
// gets a symbolic link in cacheDir (no copy: wazero only opens an entry to
// read it, and writes new ones beside it by create-and-rename). An entry
// cacheDir already has, from an earlier process in the same container, is
// left alone. A non-nil error is the reason the shipped cache is not used;
// the caller compiles as if there were none.
func Overlay(dir, cacheDir string, running Manifest) error {
	shipped, err := ReadManifest(dir)
	if err != nil {
		return err
	}
	if err := Mismatch(shipped, running); err != nil {
		return err
	}
	if len(shipped.Entries) == 0 {
		return errors.New("shipped cache manifest lists no entries")
	}
	for _, e := range shipped.Entries {
		if !fs.ValidPath(e) || e == ManifestFile {
			return fmt.Errorf("shipped cache manifest lists a bad entry %q", e)
		}
		src := filepath.Join(dir, filepath.FromSlash(e))
		if _, err := os.Stat(src); err != nil {
			return fmt.Errorf("shipped cache entry: %w", err)
		}
		dst := filepath.Join(cacheDir, filepath.FromSlash(e))
		if _, err := os.Lstat(dst); err == nil {
			continue
		}
		// wazero creates its directories 0700 too.
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			return fmt.Errorf("cache directory: %w", err)
		}
		abs, err := filepath.Abs(src)
		if err != nil {
			return err
		}
		if err := os.Symlink(abs, dst); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("linking the shipped cache: %w", err)
		}
	}
	return nil
}

// RemoveOverlay removes the links Overlay made in cacheDir to the shipped
// cache in dir, for a shipped entry that wazero refused to load (a corrupt
// file fails the compile instead of missing): the next compile then writes
// its own entry in their place.
func RemoveOverlay(dir, cacheDir string) error {
	shipped, err := ReadManifest(dir)
	if err != nil {
		return err
	}
	for _, e := range shipped.Entries {
		if !fs.ValidPath(e) {
			continue
		}
		dst := filepath.Join(cacheDir, filepath.FromSlash(e))
		if st, err := os.Lstat(dst); err == nil && st.Mode()&fs.ModeSymlink != 0 {
			if err := os.Remove(dst); err != nil {
				return fmt.Errorf("removing the shipped cache's link: %w", err)
			}
		}
	}
	return nil
}
