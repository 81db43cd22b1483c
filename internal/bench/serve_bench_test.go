package bench

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BenchmarkServe is the throughput figure as a Go benchmark, for profiles
// (-cpuprofile, -memprofile) and for CPU time per execution, which a
// shared machine's load moves far less than executions per second:
// ServeClients keep-alive clients against the in-process server, each
// sending its next POST /execute as soon as the last is answered. b.N
// executions in all; cpu-µs/op is the process's user + system time per
// execution (the clients' included: they share the process, as in
// pml bench).
func BenchmarkServe(b *testing.B) {
	ctx := context.Background()
	s, err := startServed(ctx, filepath.Join(os.TempDir(), "pml-bench-serve-cache"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.close()
	for _, bc := range []struct{ name, code string }{{"return", scriptReturn}, {"one_call", scriptOneCall}} {
		b.Run(bc.name, func(b *testing.B) {
			body, _ := json.Marshal(map[string]string{"code": bc.code})
			// Warm: connections open, the instance pool full.
			if _, err := s.throughput(ctx, bc.code, ServeClients, ServeWarmUp, 0); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			cpu0 := processCPU()
			b.ResetTimer()
			start := time.Now()
			var (
				wg   sync.WaitGroup
				mu   sync.Mutex
				next int
				errs error
			)
			for range ServeClients {
				wg.Go(func() {
					for {
						mu.Lock()
						if next >= b.N || errs != nil {
							mu.Unlock()
							return
						}
						next++
						mu.Unlock()
						if err := s.execute(ctx, body); err != nil {
							mu.Lock()
							errs = err
							mu.Unlock()
							return
						}
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			if errs != nil {
				b.Fatal(errs)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "exec/s")
			b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// processCPU is the process's user + system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
