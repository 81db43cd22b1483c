package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tetratelabs/wazero/experimental"

	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/guestcache"
)

// ShippedCacheName is the shipped compilation cache's directory in a Lambda
// artifact, beside the bootstrap binary (`make build` puts it there).
const ShippedCacheName = "guest-cache"

// DefaultShippedCacheDir is ShippedCacheName beside the running
// executable: /var/task/guest-cache on Lambda. "" when the executable's
// path is unknown.
func DefaultShippedCacheDir() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	return filepath.Join(filepath.Dir(exe), ShippedCacheName)
}

// lambdaVCPUMB is the memory that buys one full vCPU on Lambda.
const lambdaVCPUMB = 1769

// compileWorkers is how many goroutines should compile the guest when the
// caches miss, for a Lambda function of memoryMB (as
// AWS_LAMBDA_FUNCTION_MEMORY_SIZE gives it) on a machine showing cpus
// CPUs: one per full vCPU the memory buys, at most cpus. The CPUs a
// function sees are not what it may use (below 1,769 MB it gets a share
// of one, whatever runtime.NumCPU says); measured here (docs/BENCHMARKS.md),
// two workers on one core compile 11 % slower than one, on two cores 38 %
// faster. Unknown memory (not on Lambda): one,
// wazero's default.
func compileWorkers(memoryMB string, cpus int) int {
	mb, err := strconv.Atoi(memoryMB)
	if err != nil || mb <= 0 {
		return 1
	}
	return max(1, min(cpus, mb/lambdaVCPUMB))
}

// cacheOutcome is how the engine's compiled code was obtained; log writes
// it as the one guest_cache line of an init.
type cacheOutcome struct {
	hit      bool          // wazero loaded the code without compiling
	shipped  error         // why the shipped cache was not used; nil when it was
	duration time.Duration // guest.New: compile or load, then the snapshot
	workers  int           // compilation workers, had it to compile
}

// What a hit was served from.
const (
	fromShipped  = "shipped"   // the artifact's cache
	fromCacheDir = "cache_dir" // an earlier process's compile in the same cache directory
)

func (o cacheOutcome) log(log *slog.Logger) {
	ms := float64(o.duration.Microseconds()) / 1000
	switch {
	case o.hit && o.shipped == nil:
		log.Info("guest_cache", "hit", true, "from", fromShipped, "load_ms", ms)
	case o.hit:
		log.Info("guest_cache", "hit", true, "from", fromCacheDir, "shipped_miss", o.shipped.Error(), "load_ms", ms)
	case o.shipped == nil:
		// wazero's key covers something the manifest does not: a wazero
		// upgrade changed it, or CPUFeatures needs updating.
		log.Warn("guest_cache", "hit", false, "reason", "the shipped cache's manifest matched, but wazero compiled anyway", "compile_ms", ms, "compile_workers", o.workers)
	case errors.Is(o.shipped, errNoShipped) || errors.Is(o.shipped, errNoCacheDir):
		// Not configured (the pml command): nothing went wrong.
		log.Info("guest_cache", "hit", false, "reason", o.shipped.Error(), "compile_ms", ms, "compile_workers", o.workers)
	default:
		log.Warn("guest_cache", "hit", false, "reason", o.shipped.Error(), "compile_ms", ms, "compile_workers", o.workers)
	}
}

// Errors that are reasons for not using a shipped cache.
var (
	errNoCacheDir = errors.New("no compilation cache directory")
	errNoShipped  = errors.New("no shipped cache configured")
)

// openingEngine is an engine being opened on a goroutine of its own
// (openEngineAsync).
type openingEngine struct {
	done   chan struct{}
	eng    *guest.Engine
	cached cacheOutcome
	err    error
}

// openEngineAsync begins openEngine on a goroutine of its own; join waits
// for it. The caller must join it (and close what it opened).
func openEngineAsync(ctx context.Context, cfg Config, log *slog.Logger) *openingEngine {
	o := &openingEngine{done: make(chan struct{})}
	go func() {
		defer close(o.done)
		o.eng, o.cached, o.err = openEngine(ctx, cfg, log)
	}()
	return o
}

// join waits for the engine and returns what openEngine did.
func (o *openingEngine) join() (*guest.Engine, cacheOutcome, error) {
	<-o.done
	return o.eng, o.cached, o.err
}

// openEngine builds the guest engine over cfg.CacheDir, having first
// overlaid the shipped cache on it, and says how the code was obtained.
// Whether wazero compiled is read from the cache directory, not inferred
// from the manifest: a compile writes a new entry there.
func openEngine(ctx context.Context, cfg Config, log *slog.Logger) (*guest.Engine, cacheOutcome, error) {
	start := time.Now()
	var out cacheOutcome
	switch {
	case cfg.CacheDir == "":
		out.shipped = errNoCacheDir
	case cfg.ShippedCacheDir == "":
		out.shipped = errNoShipped
	default:
		out.shipped = guestcache.Overlay(cfg.ShippedCacheDir, cfg.CacheDir, guestcache.Running(guest.EmbeddedHash()))
	}
	var before []string
	if cfg.CacheDir != "" {
		before, _ = guestcache.Entries(cfg.CacheDir)
	}
	out.workers = max(1, cfg.CompileWorkers)
	if out.workers > 1 {
		ctx = experimental.WithCompilationWorkers(ctx, out.workers)
	}
	opts := guest.Options{CacheDir: cfg.CacheDir, Logger: log, Prepared: cfg.prepared}
	if cfg.OneExecution && opts.Prepared == 0 {
		opts.Prepared = 1
	}
	eng, err := guest.New(ctx, opts)
	if err != nil && out.shipped == nil {
		// wazero fails the compile when a cache entry it found does not
		// load (a truncated or corrupt file): drop the shipped links and
		// compile, as if nothing had been shipped.
		out.shipped = fmt.Errorf("the shipped cache did not load: %w", err)
		if rerr := guestcache.RemoveOverlay(cfg.ShippedCacheDir, cfg.CacheDir); rerr != nil {
			return nil, out, errors.Join(err, rerr)
		}
		before, _ = guestcache.Entries(cfg.CacheDir)
		eng, err = guest.New(ctx, opts)
	}
	if err != nil {
		return nil, out, err
	}
	out.duration = time.Since(start)
	if cfg.CacheDir != "" {
		after, err := guestcache.Entries(cfg.CacheDir)
		// A new post-init image (guest.ImageDir) is no compile: an older
		// cache, or a shipped one without it, gains one on first use.
		out.hit = err == nil && !slices.ContainsFunc(after, func(e string) bool {
			return !slices.Contains(before, e) && !strings.HasPrefix(e, guest.ImageDir+"/")
		})
	}
	return eng, out, nil
}

// Precompile writes the shipped cache for this binary into dir, as `make
// build` does for each function's artifact (`bootstrap --precompile DIR`,
// under qemu-user on a build host of another architecture): the guest
// compiled by this very binary, and its manifest. dir must be absent, empty
// or an earlier shipped cache, which is replaced. It then checks that the
// result loads without compiling. On an architecture whose Lambda CPUs have
// known features, a CPU without them is an error, not a cache that would
// silently never hit.
func Precompile(ctx context.Context, dir string, log *slog.Logger) (guestcache.Manifest, error) {
	start := time.Now()
	running := guestcache.Running(guest.EmbeddedHash())
	for _, f := range guestcache.LambdaFeatures(runtime.GOARCH) {
		if !slices.Contains(running.CPUFeatures, f) {
			return guestcache.Manifest{}, fmt.Errorf("this CPU lacks %s, which every Lambda %s CPU has, so a cache compiled here would never be used there "+
				"(under qemu-user, use -cpu neoverse-n1; or build without a shipped cache, PML_SHIP_CACHE=0)", f, runtime.GOARCH)
		}
	}
	if err := emptyCacheDir(dir); err != nil {
		return guestcache.Manifest{}, err
	}
	// The build may use every core; the output does not depend on it.
	eng, _, err := openEngine(ctx, Config{CacheDir: dir, CompileWorkers: runtime.NumCPU(), prepared: -1}, log)
	if err != nil {
		return guestcache.Manifest{}, fmt.Errorf("compiling the guest: %w", err)
	}
	_ = eng.Close(ctx)
	if err := guestcache.WriteManifest(dir, running); err != nil {
		return guestcache.Manifest{}, err
	}
	m, err := guestcache.ReadManifest(dir)
	if err != nil {
		return guestcache.Manifest{}, err
	}

	// Load it as a new container would, from an empty cache directory.
	check, err := os.MkdirTemp("", "pml-precompile-check")
	if err != nil {
		return m, err
	}
	defer os.RemoveAll(check)
	eng, out, err := openEngine(ctx, Config{CacheDir: check, ShippedCacheDir: dir, prepared: -1}, log)
	if err != nil {
		return m, fmt.Errorf("loading the shipped cache: %w", err)
	}
	_ = eng.Close(ctx)
	if !out.hit || out.shipped != nil {
		reason := "wazero compiled anyway"
		if out.shipped != nil {
			reason = out.shipped.Error()
		}
		return m, fmt.Errorf("the shipped cache in %s does not load without compiling: %s", dir, reason)
	}
	log.Info("precompiled", "dir", dir, "wazero", m.Wazero, "goarch", m.GOARCH, "cpu_features", m.CPUFeatures,
		"guest", m.Guest, "entries", m.Entries, "load_ms", float64(out.duration.Microseconds())/1000,
		"duration_ms", float64(time.Since(start).Microseconds())/1000)
	return m, nil
}

// emptyCacheDir makes dir an empty directory, refusing to delete anything
// that is not an earlier shipped cache.
func emptyCacheDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return os.MkdirAll(dir, 0o755)
	}
	if err != nil {
		return err
	}
	if len(entries) == 0 {
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, guestcache.ManifestFile)); err != nil {
		return fmt.Errorf("%s is not empty and holds no shipped cache (%s): not replacing it", dir, guestcache.ManifestFile)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("replacing the shipped cache: %w", err)
	}
	return os.MkdirAll(dir, 0o755)
}

// PrecompileMain is the functions' precompile mode: with the arguments
// `--precompile DIR` it runs Precompile and returns the exit status.
func PrecompileMain(args []string, log *slog.Logger) int {
	if len(args) != 2 || args[0] != "--precompile" || strings.HasPrefix(args[1], "-") {
		fmt.Fprintln(os.Stderr, "usage: bootstrap --precompile DIR  (without arguments: the Lambda function)")
		return 2
	}
	if _, err := Precompile(context.Background(), args[1], log); err != nil {
		log.Error("precompile failed", "err", err)
		return 1
	}
	return 0
}
