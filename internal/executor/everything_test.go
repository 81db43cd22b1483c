package executor_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/testutil/everything"
	"github.com/pml-sandbox/pml/internal/toolsource"
	mcpkind "github.com/pml-sandbox/pml/internal/toolsource/mcp"
)

// TestServerEverything drives the MCP reference server (Node.js) from a
// script, over both of its HTTP transports.
func TestServerEverything(t *testing.T) {
	for _, tr := range []everything.Transport{everything.SSE, everything.Streamable} {
		t.Run(string(tr), func(t *testing.T) {
			srv := everything.Start(t, tr)
			pool, err := new(mcpkind.Kind).NewSet(context.Background(), toolsource.Env{Logger: slog.New(slog.DiscardHandler)}, mcpkind.Config{Config: toolsource.Config{Name: "ev"}, URL: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			svc := executor.New(engine, executor.Options{Sources: []execution.ToolSource{pool}})
			deadline := time.Now().Add(20 * time.Second)
			for len(svc.Catalog(context.Background())) == 0 && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			r := svc.Execute(context.Background(), execution.Request{TimeoutMS: 20000, Code: `
const [e, s] = await Promise.all([mcp.ev.echo({message: "hi"}), mcp.ev["get-sum"]({a: 2, b: 3})]);
return {e, s}`})
			if !r.OK {
				t.Fatalf("%+v (health %+v)", r.Error, pool.Health())
			}
			jsonEq(t, r.Result, `{"e":"Echo: hi","s":"The sum of 2 and 3 is 5."}`)
		})
	}
}
