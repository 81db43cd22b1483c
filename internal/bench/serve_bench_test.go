package bench

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime/pprof"
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

// BenchmarkHeldExecution is pml bench's memory figure as a Go benchmark:
// each op starts the server afresh, runs the two throughput scripts
// briefly (as pml bench does before its memory figure: the instance pool
// as it leaves it), then holds HeldExecutions executions at once, each
// awaiting a long tool call on the demo MCP server in a process of its own
// (this test binary again, as pml bench runs `pml demo-server`), and reads
// the process's memory (proportional, resident, private) and live Go heap
// over idle, per held execution, and logs where the private memory is. PML_HELD_HEAPPROFILE=path writes the heap profile (and
// path.goroutines) while the executions are held.
func BenchmarkHeldExecution(b *testing.B) {
	ctx := context.Background()
	cache := filepath.Join(os.TempDir(), "pml-bench-serve-cache")
	var pss, rss, private, heap float64
	for b.Loop() {
		s, err := startServedWith(ctx, cache, nil, testDemoCommand)
		if err != nil {
			b.Fatal(err)
		}
		for _, code := range []string{scriptReturn, scriptOneCall} {
			if _, err := s.throughput(ctx, code, ServeClients, 0, 100*time.Millisecond); err != nil {
				b.Fatal(err)
			}
		}
		var idle memSplit
		s.onIdle = func() { idle = readMemSplit() }
		s.onHeld = func() {
			b.Log(readMemSplit().per(idle, HeldExecutions))
			if path := os.Getenv("PML_HELD_HEAPPROFILE"); path != "" {
				writeHeapProfile(b, path)
			}
		}
		m, err := s.memoryPerExecution(ctx, HeldExecutions)
		s.close()
		if err != nil {
			b.Fatal(err)
		}
		pss += m.PSS
		rss += m.RSS
		private += m.Private
		heap += m.Heap
	}
	b.ReportMetric(pss/float64(b.N), "pss-KiB/held")
	b.ReportMetric(rss/float64(b.N), "rss-KiB/held")
	b.ReportMetric(private/float64(b.N), "private-KiB/held")
	b.ReportMetric(heap/float64(b.N), "heap-KiB/held")
}

// writeHeapProfile writes the heap's in-use profile to path and the
// goroutines to path.goroutines.
func writeHeapProfile(b *testing.B, path string) {
	for _, p := range []struct {
		name, file string
		debug      int
	}{{"heap", path, 0}, {"goroutine", path + ".goroutines", 1}} {
		f, err := os.Create(p.file)
		if err != nil {
			b.Fatal(err)
		}
		err = pprof.Lookup(p.name).WriteTo(f, p.debug)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}
