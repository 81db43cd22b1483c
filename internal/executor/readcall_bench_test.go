package executor_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/trace"
)

// benchSource is an in-process source of one server, "bench", whose get
// is read-only and whose put is a write: the call path without a network,
// so that what the host adds to a call is what moves.
type benchSource struct{}

func (benchSource) Tools(context.Context) ([]catalog.Tool, error) {
	yes, no := true, false
	return []catalog.Tool{
		{Server: "bench", Name: "get", Kind: trace.KindMCP, Annotations: catalog.Annotations{ReadOnly: &yes}},
		{Server: "bench", Name: "put", Kind: trace.KindMCP, Annotations: catalog.Annotations{ReadOnly: &no, Destructive: &no, Idempotent: &yes}},
	}, nil
}

func (benchSource) Call(context.Context, catalog.Tool, json.RawMessage, execution.CallOptions) (json.RawMessage, error) {
	return json.RawMessage(`{"ok":true}`), nil
}

// benchCalls runs a script of 100 calls of tool per op on svc, and
// reports µs and CPU-µs per call.
func benchCalls(b *testing.B, svc *executor.Service, tool string) {
	const n = 100
	code := "for (let i = 0; i < 100; i++) await mcp.bench." + tool + "({key: 'k' + i, value: i}); return 1"
	cpu0 := processCPU()
	for b.Loop() {
		if r := svc.Execute(context.Background(), execution.Request{Code: code, TimeoutMS: 60000}); !r.OK {
			b.Fatal(r.Error)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n/1000, "µs/call")
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N)/n, "cpu-µs/call")
}

// BenchmarkScriptCallRead: 100 read-only calls from one script, in
// process: the read path the journal of effects must leave as it was.
//
//	go test -run '^$' -bench 'ScriptCallRead$' -count 10 ./internal/executor/
func BenchmarkScriptCallRead(b *testing.B) {
	benchCalls(b, executor.New(engine, executor.Options{Sources: []execution.ToolSource{benchSource{}}}), "get")
}
