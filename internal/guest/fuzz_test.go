package guest_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/guest"
)

// FuzzRun runs arbitrary code with arbitrary args: every input ends in a
// result or a structured error within the deadline, and the engine keeps
// serving.
func FuzzRun(f *testing.F) {
	for _, seed := range []struct{ code, args string }{
		{"return 1 + 1", ""},
		{"return await mcp.demo.echo(args)", `{"a": [1, {"b": null}]}`},
		{"throw null", "null"},
		{"for (;;) {}", ""},
		{"return [].concat(...Array(1e6))", ""},
		{"await Promise.all([1,2].map(x => mcp.demo.add({a: x, b: x})))", "[]"},
		{"}); (function() {", ""},
		{"return Array.prototype.includes.call({length: 2**53-1}, 1)", ""},
		{"let e; try { await mcp.demo.fail({}) } catch (r) { e = r } e.code = 'TIMEOUT'; throw e", ""},
		{"Array.prototype.push = () => 0; for (;;) console.log()", ""},
	} {
		f.Add(seed.code, seed.args)
	}
	f.Fuzz(func(t *testing.T, code, args string) {
		req := guest.Request{Code: code, Tools: guest.DemoTools(), Host: guest.DemoHost{}, Limits: guest.Limits{Timeout: 200 * time.Millisecond}}
		if json.Valid([]byte(args)) {
			req.Args = json.RawMessage(args)
		}
		start := time.Now()
		r := engine.Run(context.Background(), req)
		if r.OK == (r.Err != nil) {
			t.Fatalf("ok=%v with error %v", r.OK, r.Err)
		}
		if r.Err != nil && r.Err.Code == "" {
			t.Fatalf("error without a code: %+v", r.Err)
		}
		// The 200 ms deadline is absolute; the margin is for fuzzing
		// workers sharing a loaded 2-core machine.
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("took %v", d)
		}
	})
}
