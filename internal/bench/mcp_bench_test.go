package bench

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/serverconfig"
	"github.com/pml-sandbox/pml/internal/toolsource"
	mcpkind "github.com/pml-sandbox/pml/internal/toolsource/mcp"
)

// BenchmarkMCPScriptCall is the script side of pml bench's MCP ratio as a
// Go benchmark, for profiles of the host's share of a call
// (-cpuprofile): the application as measureMCP builds it (policy set,
// journal, traces in memory), 100 awaited word_count calls per execution
// to the demo server over loopback SSE, in a process of its own.
// cpu-µs/call is this process's user + system time per call: the client's
// share, the demo server's not.
//
//	go test -run '^$' -bench MCPScriptCall -benchtime 20x ./internal/bench/
func BenchmarkMCPScriptCall(b *testing.B) {
	ctx := context.Background()
	eng, err := guest.New(ctx, guest.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close(ctx)
	// The demo server in a process of its own, as pml bench runs it.
	srv, err := startChildDemo(ctx, testDemoCommand(ctx))
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	a, err := app.New(ctx, app.Config{
		Engine:           eng,
		Servers:          serverconfig.Servers{mcpkind.Config{Config: toolsource.Config{Name: "demo"}, URL: srv.SSEURL(), Transport: mcpkind.TransportSSE}},
		Traces:           app.TraceConfig{Store: app.StoreMemory},
		CapabilitiesFile: filepath.Join(b.TempDir(), "capabilities.json"),
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close(context.Background())
	const n = 100
	code := "for (let i = 0; i < 100; i++) await mcp.demo.word_count({text: 'one two three'}); return 1"
	if r := a.Service.Execute(ctx, execution.Request{Code: code, TimeoutMS: 60000}); !r.OK {
		b.Fatal(r.Error)
	}
	cpu0 := processCPU()
	for b.Loop() {
		if r := a.Service.Execute(ctx, execution.Request{Code: code, TimeoutMS: 60000}); !r.OK {
			b.Fatal(r.Error)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n/1000, "µs/call")
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N)/n, "cpu-µs/call")
}
