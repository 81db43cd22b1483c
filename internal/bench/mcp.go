package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/serverconfig"
	"github.com/pml-sandbox/pml/internal/toolsource"
	mcpkind "github.com/pml-sandbox/pml/internal/toolsource/mcp"
)

// measureMCP compares a tool call made from a script, through the sandbox
// and the executor, with the same call made directly by a bare mcp-go client,
// both against the demo MCP server over loopback SSE: in a process of its
// own when demoCmd makes one (as a remote server is: neither side's
// collections and scheduling then land on the server's share of the
// call), else in this one.
func measureMCP(ctx context.Context, eng *guest.Engine, demoCmd func(context.Context) *exec.Cmd, progress func(string)) ([]Figure, error) {
	srv, err := startDemo(ctx, demoCmd)
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	tmp, err := os.MkdirTemp("", "pml-bench-mcp")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	a, err := app.New(ctx, app.Config{
		Engine:           eng,
		Servers:          serverconfig.Servers{mcpkind.Config{Config: toolsource.Config{Name: "demo"}, URL: srv.SSEURL(), Transport: mcpkind.TransportSSE}},
		Traces:           app.TraceConfig{Store: app.StoreMemory},
		CapabilitiesFile: filepath.Join(tmp, "capabilities.json"),
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, err
	}
	defer a.Close(context.Background())
	if _, err := a.Tools.Tools(ctx); err != nil {
		return nil, err
	}
	exec := func(code string) (time.Duration, error) {
		start := time.Now()
		r := a.Service.Execute(ctx, execution.Request{Code: code, TimeoutMS: 60000})
		if !r.OK {
			return 0, fmt.Errorf("mcp benchmark: %v", r.Error)
		}
		return time.Since(start), nil
	}

	direct, err := client.NewSSEMCPClient(srv.SSEURL())
	if err != nil {
		return nil, err
	}
	defer direct.Close()
	if err := direct.Start(ctx); err != nil {
		return nil, err
	}
	var init mcp.InitializeRequest
	init.Params.ProtocolVersion = mcpkind.ProtocolVersion
	init.Params.ClientInfo = mcp.Implementation{Name: "pml-bench", Version: "1"}
	if _, err := direct.Initialize(ctx, init); err != nil {
		return nil, err
	}
	var call mcp.CallToolRequest
	call.Params.Name = "word_count"
	call.Params.Arguments = map[string]any{"text": "one two three"}

	progress("MCP call over loopback SSE: sandbox vs direct mcp-go")
	const n = 200
	loop := fmt.Sprintf("for (let i = 0; i < %d; i++) await mcp.demo.word_count({text: 'one two three'}); return 1", n)
	// Rounds alternate the two sides, so a burst of the machine's other
	// work lands on both; the median of 11 is what a second of load
	// cannot move.
	var viaSandbox, viaDirect []time.Duration
	for range 11 {
		empty, err := exec("return 1")
		if err != nil {
			return nil, err
		}
		full, err := exec(loop)
		if err != nil {
			return nil, err
		}
		viaSandbox = append(viaSandbox, (full-empty)/n)
		start := time.Now()
		for range n {
			if _, err := direct.CallTool(ctx, call); err != nil {
				return nil, err
			}
		}
		viaDirect = append(viaDirect, time.Since(start)/n)
	}
	sb, dr := median(viaSandbox), median(viaDirect)

	progress("16 parallel 50 ms remote calls")
	var par []time.Duration
	for range 5 {
		d, err := exec("return (await Promise.all(Array.from({length: 16}, () => mcp.demo.sleep({ms: 50})))).length")
		if err != nil {
			return nil, err
		}
		par = append(par, d)
	}
	return []Figure{
		{Key: "mcp_sse_call_sandbox_us", Name: "MCP call over loopback SSE, from a script", Value: float64(sb.Microseconds()), Unit: "µs", Target: "≤ 1.2× direct"},
		{Key: "mcp_sse_call_direct_us", Name: "same call, bare mcp-go client", Value: float64(dr.Microseconds()), Unit: "µs"},
		{Key: "mcp_sse_ratio", Name: "script / direct", Value: float64(sb) / float64(dr), Unit: "×", Target: "≤ 1.2"},
		{Key: "mcp_parallel_16x50ms_ms", Name: "16 parallel 50 ms remote calls", Value: msf(median(par)), Unit: "ms", Target: "≤ 70 ms"},
	}, nil
}
