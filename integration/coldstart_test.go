package integration

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/guestcache"
	"github.com/pml-sandbox/pml/internal/testutil/lambdaemu"
)

// BenchmarkColdStart measures a new execute-function container: process
// start, init (guest compile or cache load, clients) and the first request
// answered, through the Lambda emulator, as medians. All cases run one artifact, built
// by the Makefile's build-ExecuteFunction for this machine's architecture
// with its shipped compiled guest:
//
//   - "warm": the cache directory (/tmp/pml-cache on Lambda) was filled by
//     an earlier container; the shipped cache is not consulted.
//   - "nocache": an empty cache directory and no shipped cache, as before
//     the artifact shipped one.
//   - "shipped": an empty cache directory (a new container's /tmp) and the
//     artifact's shipped cache, as deployed.
func BenchmarkColdStart(b *testing.B) {
	art := b.TempDir()
	cmd := exec.Command("make", "build-ExecuteFunction", "ARTIFACTS_DIR="+art,
		"LAMBDA_GOFLAGS=GOOS=linux GOARCH="+runtime.GOARCH+" CGO_ENABLED=0")
	cmd.Dir = ".."
	// Quiet unless it fails: its lines would split the benchmark's.
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("building the artifact: %v\n%s", err, out)
	}
	bootstrap := filepath.Join(art, "bootstrap")
	warm := b.TempDir()
	noShipped := app.EnvShippedCache + "=off"
	// Fill the shared cache once, as an earlier container would.
	emu, err := lambdaemu.Start(lambdaemu.Function{Name: "execute", Binary: bootstrap, Stderr: io.Discard,
		Env: []string{app.EnvCompileCache + "=" + warm, noShipped, app.EnvLogLevel + "=error", app.EnvCapFile + "=" + b.TempDir() + "/caps.json"}})
	if err != nil {
		b.Fatal(err)
	}
	_, _, _ = emu.Invoke(context.Background(), "execute", []byte(`{"code": "return 1"}`))
	emu.Close()
	if n := compiledInto(b, warm); n != 1 {
		b.Fatalf("the warm cache holds %d compiled entries, want 1", n)
	}
	empty := func() string { d, _ := os.MkdirTemp(b.TempDir(), "c"); return d }
	cases := []struct {
		name     string
		cache    func() string
		shipped  string
		compiled int // entries the process compiles into its cache directory
	}{
		{"warm", func() string { return warm }, noShipped, 1},
		{"nocache", empty, noShipped, 1},
		{"shipped", empty, app.EnvShippedCache + "=" + filepath.Join(art, app.ShippedCacheName), 0},
	}
	// The processes' output is discarded: a process killed by Close logs
	// that its Runtime API went away, which would split the benchmark's
	// lines; a failure shows in the invocation's answer, and a compile in
	// the cache directory. The cases take turns within each iteration, so
	// that the load of a shared machine weighs on all three alike (their
	// ratio is the target).
	took := make([][]time.Duration, len(cases))
	cpu := make([][]time.Duration, len(cases))
	for b.Loop() {
		for i, bc := range cases {
			cache := bc.cache()
			emu, err := lambdaemu.Start(lambdaemu.Function{Name: "execute", Binary: bootstrap, Stderr: io.Discard,
				Env: []string{app.EnvCompileCache + "=" + cache, bc.shipped, app.EnvDemoTools + "=on", app.EnvLogLevel + "=error",
					app.EnvCapFile + "=" + b.TempDir() + "/caps.json", "AWS_REGION=us-east-1"}})
			if err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			out, fnErr, err := emu.Invoke(context.Background(), "execute", []byte(`{"code": "return await mcp.demo.add({a: 1, b: 1})"}`))
			if err != nil || fnErr || string(out) == "" {
				b.Fatalf("%s: %s %v %v", bc.name, out, fnErr, err)
			}
			took[i] = append(took[i], time.Since(start))
			emu.Close()
			cpu[i] = append(cpu[i], emu.CPUTime())
			if got := compiledInto(b, cache); got != bc.compiled {
				b.Fatalf("%s: %d entries compiled into the cache directory, want %d", bc.name, got, bc.compiled)
			}
		}
	}
	// Medians: one stalled process on a shared machine moves a mean of a
	// few runs by tens of percent. The processes' CPU time (init, the first
	// request, then idle until killed) does not depend on that load.
	for i, bc := range cases {
		b.ReportMetric(medianMS(took[i]), bc.name+"-ms/first-response")
		b.ReportMetric(medianMS(cpu[i]), bc.name+"-cpu-ms")
	}
	b.ReportMetric(medianMS(took[2])/medianMS(took[0]), "shipped/warm")
	b.ReportMetric(0, "ns/op") // an iteration is all three cases: meaningless
}

// compiledInto counts the entries wazero compiled into a cache directory:
// regular files, not the links to a shipped cache, nor the guest's
// post-init image (which a process keeps there without compiling).
func compiledInto(tb testing.TB, dir string) int {
	tb.Helper()
	entries, err := guestcache.Entries(dir)
	if err != nil {
		tb.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if strings.HasPrefix(e, guest.ImageDir+"/") {
			continue
		}
		if st, err := os.Lstat(filepath.Join(dir, e)); err == nil && st.Mode().IsRegular() {
			n++
		}
	}
	return n
}

// medianMS is the median of ds in milliseconds (sorting ds).
func medianMS(ds []time.Duration) float64 {
	slices.Sort(ds)
	return float64(ds[len(ds)/2].Microseconds()) / 1000
}
