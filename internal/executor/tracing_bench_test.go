//go:build unix

package executor_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/metrics"
	"github.com/pml-sandbox/pml/internal/metrics/prom"
	"github.com/pml-sandbox/pml/internal/otelsink"
	"github.com/pml-sandbox/pml/internal/testutil/cputime"
	"github.com/pml-sandbox/pml/internal/trace"
	"github.com/pml-sandbox/pml/internal/tracedb"
	"github.com/pml-sandbox/pml/internal/xraysink"
)

// BenchmarkScriptCallTraced is BenchmarkScriptCallSSE (100 word_count
// calls over loopback SSE from one script) with each way of tracing, in
// turn within each round so load drift weighs on all alike: the in-memory
// store alone (off), plus X-Ray (UDP to a socket that drops it), plus
// OpenTelemetry (batches over OTLP/HTTP to a loopback endpoint that drops
// them; each call also carries traceparent out), plus Prometheus metrics.
// Each op ends with the flush a Lambda does before it answers.
func BenchmarkScriptCallTraced(b *testing.B) {
	pool, stop := benchPool(b)
	defer stop()
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer udp.Close()
	go func() {
		buf := make([]byte, 65536)
		for {
			if _, _, err := udp.ReadFrom(buf); err != nil {
				return
			}
		}
	}()
	b.Setenv("AWS_XRAY_DAEMON_ADDRESS", udp.LocalAddr().String())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	otlp := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf") // an empty ExportTraceServiceResponse
	})}
	go func() { _ = otlp.Serve(ln) }()
	defer otlp.Close()
	b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+ln.Addr().String())

	xs, err := xraysink.New("bench")
	if err != nil {
		b.Fatal(err)
	}
	ots, err := otelsink.New(context.Background(), otelsink.Options{Service: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer ots.Close(context.Background())
	for _, mode := range []struct {
		name string
		sink func() trace.Sink
	}{
		{"off", func() trace.Sink { return tracedb.NewMemory(0) }},
		{"xray", func() trace.Sink { return xraysink.Multi{tracedb.NewMemory(0), xs} }},
		{"otel", func() trace.Sink { return xraysink.Multi{tracedb.NewMemory(0), ots} }},
		{"metrics", func() trace.Sink {
			return xraysink.Multi{tracedb.NewMemory(0), metrics.Sink{R: prom.New()}}
		}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			svc := executor.New(engine, executor.Options{Sources: []execution.ToolSource{pool}, Sink: mode.sink()})
			const n = 100
			code := "for (let i = 0; i < 100; i++) await mcp.demo.word_count({text: 'one two three'}); return 1"
			cpu0 := cputime.Process()
			for b.Loop() {
				if r := svc.Execute(context.Background(), execution.Request{Code: code, TimeoutMS: 60000}); !r.OK {
					b.Fatal(r.Error)
				}
				if err := svc.Flush(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n/1000, "µs/call")
			// CPU time moves less than wall time on a loaded machine. It is
			// the process's: the loopback demo server and the endpoints
			// that drop X-Ray's and OTLP's sends included.
			b.ReportMetric(float64((cputime.Process()-cpu0).Nanoseconds())/float64(b.N)/n/1000, "cpu-µs/call")
		})
	}
}
