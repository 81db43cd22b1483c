package tracedb_test

import (
	"context"
	"testing"

	"github.com/pml-sandbox/pml/internal/demoserver"
	exec "github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/trace"
)

// BenchmarkExecution100Calls runs a script making 100 tool calls (to a
// loopback-speed tool), untraced and traced into DynamoDB Local with the
// flush a Lambda does before answering; compare the two ns/op.
func BenchmarkExecution100Calls(b *testing.B) {
	ctx := context.Background()
	eng, err := guest.New(ctx, guest.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close(ctx)
	store, _ := dynamoStore(b, nil, nil)
	code := "for (let i = 0; i < 100; i++) await mcp.demo.sleep({ms: 0.2}); return 1"
	for _, bc := range []struct {
		name string
		sink trace.Sink
	}{{"untraced", nil}, {"dynamodb", store}} {
		b.Run(bc.name, func(b *testing.B) {
			svc := executor.New(eng, executor.Options{Sources: []exec.ToolSource{demoserver.Source{}}, Sink: bc.sink})
			for b.Loop() {
				if r := svc.Execute(ctx, exec.Request{Code: code}); !r.OK {
					b.Fatal(r.Error)
				}
				if err := svc.Flush(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
