package executor_test

import (
	"context"
	"testing"

	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/fault"
)

// A capability run's tool set is what its own request narrows to,
// intersected with every narrowing inherited from the runs above it.
func TestInheritedNarrowingIntersects(t *testing.T) {
	svc := executor.New(engine, executor.Options{Sources: []execution.ToolSource{demoserver.Source{}}})
	narrowing, err := execution.ParseNarrowing([][]string{{"demo:*"}, {"demo:add", "demo:echo", "demo:sleep"}})
	if err != nil {
		t.Fatal(err)
	}
	parent := &execution.Parent{Lineage: execution.Lineage{ExecutionID: "ex_p", CallID: 1, Narrowing: narrowing}, Capability: "c:x"}
	run := func(code string, own ...string) *execution.Response {
		return svc.Execute(context.Background(), execution.Request{Code: code, Tools: own, Parent: parent, TimeoutMS: 10000})
	}
	if r := run("return await mcp.demo.add({a: 2, b: 2})", "demo:add", "demo:fail"); !r.OK || string(r.Result) != "4" {
		t.Fatalf("in every narrowing: %s %+v", r.Result, r.Error)
	}
	for _, tc := range []struct {
		code string
		own  []string
		want fault.Code
		tool string
	}{
		// Outside the inherited narrowing: the tool exists, the callers forbid it.
		{"return await mcp.demo.fail({message: 'x'})", nil, fault.Forbidden, "demo:fail"},
		{"return await mcp.demo.fail({message: 'x'})", []string{"demo:fail"}, fault.Forbidden, "demo:fail"},
		{"const t = 'fail'; return await mcp.demo[t]({message: 'x'})", nil, fault.Forbidden, "demo:fail"},
		// Outside the run's own narrowing: as for any request.
		{"return await mcp.demo.echo({message: 'x'})", []string{"demo:add"}, fault.ToolNotFound, "demo:echo"},
		// Not a tool at all.
		{"return await mcp.demo.nope({})", nil, fault.ToolNotFound, "demo:nope"},
	} {
		r := run(tc.code, tc.own...)
		if r.OK || r.Error.Code != tc.want || r.Error.Tool != tc.tool {
			t.Errorf("%s (own %v): want %s %s, got %+v", tc.code, tc.own, tc.want, tc.tool, r.Error)
		}
	}
	// tools.list shows the intersection only.
	r := run("return (await tools.list()).map(t => t.name).sort()")
	if !r.OK || string(r.Result) != `["add","echo","sleep"]` {
		t.Fatalf("%s %+v", r.Result, r.Error)
	}
}
