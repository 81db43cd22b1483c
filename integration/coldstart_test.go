package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/testutil/lambdaemu"
)

// BenchmarkColdStart measures a new execute-function container: process
// start, init (guest compile or cache load, clients) and the first request
// answered, through the Lambda emulator. All cases run one artifact, built
// by the Makefile's build-ExecuteFunction for this machine's architecture
// with its shipped compiled guest:
//
//   - "warm cache": the cache directory (/tmp/pml-cache on Lambda) was
//     filled by an earlier container; the shipped cache is not consulted.
//   - "no cache": an empty cache directory and no shipped cache, as before
//     the artifact shipped one.
//   - "shipped cache": an empty cache directory (a new container's /tmp)
//     and the artifact's shipped cache, as deployed.
func BenchmarkColdStart(b *testing.B) {
	art := b.TempDir()
	cmd := exec.Command("make", "build-ExecuteFunction", "ARTIFACTS_DIR="+art,
		"LAMBDA_GOFLAGS=GOOS=linux GOARCH="+runtime.GOARCH+" CGO_ENABLED=0")
	cmd.Dir = ".."
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		b.Fatalf("building the artifact: %v", err)
	}
	bootstrap := filepath.Join(art, "bootstrap")
	warm := b.TempDir()
	noShipped := app.EnvShippedCache + "=off"
	// Fill the shared cache once, as an earlier container would.
	if emu, err := lambdaemu.Start(lambdaemu.Function{Name: "execute", Binary: bootstrap, Stderr: os.Stderr,
		Env: []string{app.EnvCompileCache + "=" + warm, noShipped, app.EnvLogLevel + "=error", app.EnvCapFile + "=" + b.TempDir() + "/caps.json"}}); err == nil {
		_, _, _ = emu.Invoke(context.Background(), "execute", []byte(`{"code": "return 1"}`))
		emu.Close()
	}
	empty := func() string { d, _ := os.MkdirTemp(b.TempDir(), "c"); return d }
	for _, bc := range []struct {
		name    string
		cache   func() string
		shipped string
	}{
		{"warm cache", func() string { return warm }, noShipped},
		{"no cache", empty, noShipped},
		{"shipped cache", empty, app.EnvShippedCache + "=" + filepath.Join(art, app.ShippedCacheName)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var total time.Duration
			n := 0
			for b.Loop() {
				emu, err := lambdaemu.Start(lambdaemu.Function{Name: "execute", Binary: bootstrap, Stderr: os.Stderr,
					Env: []string{app.EnvCompileCache + "=" + bc.cache(), bc.shipped, app.EnvDemoTools + "=on", app.EnvLogLevel + "=error",
						app.EnvCapFile + "=" + b.TempDir() + "/caps.json", "AWS_REGION=us-east-1"}})
				if err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				out, fnErr, err := emu.Invoke(context.Background(), "execute", []byte(`{"code": "return await mcp.demo.add({a: 1, b: 1})"}`))
				if err != nil || fnErr || string(out) == "" {
					b.Fatalf("%s %v %v", out, fnErr, err)
				}
				total += time.Since(start)
				n++
				emu.Close()
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(n), "ms/first-response")
		})
	}
}
