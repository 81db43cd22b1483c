package executor_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/learn"
	"github.com/pml-sandbox/pml/internal/trace"
)

// TestPatternsInTheTrace: a root execution that succeeds and calls tools
// records its pattern (the template once per process); anything else
// records none, and a service without a learner records none at all.
func TestPatternsInTheTrace(t *testing.T) {
	ctx := context.Background()
	sink := &memSink{}
	svc := executor.New(engine, executor.Options{Policy: local, Sources: []execution.ToolSource{demoserver.Source{}}, Sink: sink, Learner: learn.NewLearner(nil)})
	const prog = `// count the words
const r = await mcp.demo.word_count({text: %q});
await mcp.demo.echo({n: r.words, secret: %q});
return r.words`
	for _, tc := range []struct {
		name    string
		code    string
		parent  *execution.Parent
		learned bool
	}{
		{"first run", fmt.Sprintf(prog, "a b c", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"), nil, true},
		{"second run", fmt.Sprintf(prog, "d e", "sk_live_9fD20KqMziXEbskuU2aeq8ed"), nil, true},
		{"TypeScript", fmt.Sprintf("const n: number = 1;\n"+prog, "x", "y"), nil, true},
		{"a failure", `await mcp.demo.echo({}); throw new Error("no")`, nil, false},
		{"no tool", `return 1 + 1`, nil, false},
		{"only a built-in", `return (await tools.search("echo")).length`, nil, false},
		{"a capability's run", `return await mcp.demo.echo({a: 1})`, &execution.Parent{Capability: "x:y", Sandboxes: 1, Lineage: execution.Lineage{ExecutionID: "ex_parent", CallID: 1}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(sink.execs)
			resp := svc.Execute(ctx, execution.Request{Code: tc.code, Parent: tc.parent})
			if tc.learned && !resp.OK {
				t.Fatalf("run failed: %+v", resp.Error)
			}
			ex := sink.execs[before]
			if (ex.Pattern != nil) != tc.learned {
				t.Fatalf("pattern %+v, want one: %v", ex.Pattern, tc.learned)
			}
		})
	}
	first, second, ts := sink.execs[0].Pattern, sink.execs[1].Pattern, sink.execs[2].Pattern
	if first.Fingerprint != second.Fingerprint || first.Fingerprint == ts.Fingerprint {
		t.Errorf("fingerprints %s %s %s", first.Fingerprint, second.Fingerprint, ts.Fingerprint)
	}
	if strings.Join(first.Tools, ",") != "demo:word_count,demo:echo" {
		t.Errorf("tools %v", first.Tools)
	}
	if first.Template == nil || second.Template != nil {
		t.Errorf("the template travelled %v then %v: want once", first.Template != nil, second.Template != nil)
	}
	if first.Literals[0].Value != "a b c" || first.Literals[1].Withheld != trace.WithheldSecret || first.Literals[1].Value != "" {
		t.Errorf("literals %+v", first.Literals)
	}
	if ts.Template == nil || strings.Contains(ts.Template.Code, ": number") {
		t.Errorf("TypeScript's template is not the JavaScript that ran: %+v", ts.Template)
	}

	off := &memSink{}
	plain := executor.New(engine, executor.Options{Policy: local, Sources: []execution.ToolSource{demoserver.Source{}}, Sink: off})
	if resp := plain.Execute(ctx, execution.Request{Code: fmt.Sprintf(prog, "a", "b")}); !resp.OK || off.execs[0].Pattern != nil {
		t.Errorf("learning off: ok %v, pattern %+v", resp.OK, off.execs[0].Pattern)
	}
}
