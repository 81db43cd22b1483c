package integration

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/testutil/lambdaemu"
)

// BenchmarkColdStart measures a new execute-function container: process
// start, init (guest compile or cache load, clients) and the first request
// answered, through the Lambda emulator. "warm cache" shares a compilation
// cache directory that an earlier container filled, as a shipped or
// pre-warmed cache would; "no cache" starts each container with an empty
// one.
func BenchmarkColdStart(b *testing.B) {
	warm := b.TempDir()
	// Fill the shared cache once, as an earlier container (or the build) would.
	if emu, err := lambdaemu.Start(lambdaemu.Function{Name: "execute", Binary: bins.execute, Stderr: os.Stderr,
		Env: []string{app.EnvCompileCache + "=" + warm, app.EnvLogLevel + "=error", app.EnvCapFile + "=" + b.TempDir() + "/caps.json"}}); err == nil {
		_, _, _ = emu.Invoke(context.Background(), "execute", []byte(`{"code": "return 1"}`))
		emu.Close()
	}
	for _, bc := range []struct {
		name  string
		cache func() string
	}{
		{"warm cache", func() string { return warm }},
		{"no cache", func() string { d, _ := os.MkdirTemp(b.TempDir(), "c"); return d }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var total time.Duration
			n := 0
			for b.Loop() {
				emu, err := lambdaemu.Start(lambdaemu.Function{Name: "execute", Binary: bins.execute, Stderr: os.Stderr,
					Env: []string{app.EnvCompileCache + "=" + bc.cache(), app.EnvDemoTools + "=on", app.EnvLogLevel + "=error",
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
