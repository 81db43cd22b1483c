package capability_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/lambda"

	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/lambdaevents"
	"github.com/pml-sandbox/pml/internal/trace"
	"github.com/pml-sandbox/pml/internal/tracedb"
)

// handlerLambda is the Lambda service in front of the capability
// function's handler: every invocation crosses as JSON, as it does
// deployed.
type handlerLambda struct{ w *world }

func (h handlerLambda) Invoke(ctx context.Context, in *lambda.InvokeInput, _ ...func(*lambda.Options)) (*lambda.InvokeOutput, error) {
	resp, err := lambdaevents.CapabilityHandler(h.w.runner, h.w.svc, nil)(ctx, in.Payload)
	if err != nil {
		return nil, err
	}
	out, err := json.Marshal(resp)
	return &lambda.InvokeOutput{Payload: out}, err
}

// pinnedWorld saves math:sum twice (version 1 answers 1, version 2
// answers 2), a capability that calls it, and one whose own pins hold
// it at version 1; its capability calls cross the capability function's
// payload when overLambda is set. Traces go to the memory store it
// returns.
func pinnedWorld(t *testing.T, overLambda bool) (*world, *tracedb.Memory) {
	t.Helper()
	ctx := context.Background()
	reg := capability.NewFileRegistry(filepath.Join(t.TempDir(), "caps.json"))
	w := &world{reg: reg}
	traces := tracedb.NewMemory(0)
	var wrap func(capability.Invoker) capability.Invoker
	if overLambda {
		wrap = func(capability.Invoker) capability.Invoker {
			return capability.LambdaInvoker{Client: handlerLambda{w}, Function: "capability"}
		}
	}
	w.svc, w.runner = inProcess(reg, executor.Options{Policy: local, Sources: []execution.ToolSource{demoserver.Source{}}, Sink: traces,
		Logger: slog.New(slog.DiscardHandler)}, wrap)
	for _, c := range []capability.Capability{
		{Name: "math:sum", Code: "return 1", Provenance: []string{"ex_aaaa"}},
		{Name: "math:sum", Code: "return 2", Provenance: []string{"ex_bbbb", "ex_cccc"}},
		{Name: "app:total", Code: "return await mcp.math.sum({})"},
		{Name: "app:held", Code: "return await mcp.math.sum({})", Pins: map[string]int{"math:sum": 1}},
		{Name: "app:outer", Code: "return [await mcp.app.total({}), await mcp.app.held({})]"},
	} {
		if _, err := reg.Save(ctx, c, nil); err != nil {
			t.Fatal(err)
		}
	}
	return w, traces
}

func (w *world) runPinned(code string, pins map[string]int) *execution.Response {
	return w.svc.Execute(context.Background(), execution.Request{Code: code, Capabilities: pins, TimeoutMS: 20000})
}

// TestPinnedCallerKeepsItsVersion: a request pins versions for itself and
// every capability run below it; a capability's own pins hold its calls
// unless the request pinned the name first; a pin to a missing version
// fails before any sandbox; and traces name each call's version and each
// run's version and provenance. In process and across the capability
// function's payload.
func TestPinnedCallerKeepsItsVersion(t *testing.T) {
	for _, overLambda := range []bool{false, true} {
		name := "in process"
		if overLambda {
			name = "through the capability function"
		}
		t.Run(name, func(t *testing.T) {
			w, traces := pinnedWorld(t, overLambda)
			tests := []struct {
				name, code string
				pins       map[string]int
				want       string
			}{
				{"unpinned runs the head", "return await mcp.math.sum({})", nil, "2"},
				{"pinned keeps version 1", "return await mcp.math.sum({})", map[string]int{"math:sum": 1}, "1"},
				{"the pin reaches a nested run", "return await mcp.app.total({})", map[string]int{"math:sum": 1}, "1"},
				{"a capability's own pin", "return await mcp.app.held({})", nil, "1"},
				{"the request's pin wins over the capability's", "return await mcp.app.held({})", map[string]int{"math:sum": 2}, "2"},
				{"two levels, each as pinned", "return await mcp.app.outer({})", nil, "[2,1]"},
				{"two levels under the request's pin", "return await mcp.app.outer({})", map[string]int{"math:sum": 1}, "[1,1]"},
				{"a pin on a name the code does not call", "return 7", map[string]int{"math:sum": 2}, "7"},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					r := w.runPinned(tt.code, tt.pins)
					if !r.OK || string(r.Result) != tt.want {
						t.Fatalf("%s %+v; want %s", r.Result, r.Error, tt.want)
					}
				})
			}

			t.Run("a missing version fails before the sandbox", func(t *testing.T) {
				for _, pins := range []map[string]int{{"math:sum": 9}, {"math:nope": 1}} {
					r := w.runPinned("return await mcp.math.sum({})", pins)
					if r.OK || r.Error.Code != fault.InvalidRequest || !strings.Contains(r.Error.Message, "does not exist") || len(r.Calls) != 0 {
						t.Fatalf("%v: %+v, %d calls", pins, r.Error, len(r.Calls))
					}
				}
			})

			t.Run("traces name the versions", func(t *testing.T) {
				r := w.runPinned("return await mcp.math.sum({})", map[string]int{"math:sum": 1})
				if !r.OK || len(r.Calls) != 1 {
					t.Fatalf("%+v", r)
				}
				if c := r.Calls[0]; c.Version != 1 || c.ChildExecutionID == "" {
					t.Fatalf("the call record %+v; want version 1 and its run", c)
				}
				if err := w.svc.Flush(context.Background()); err != nil {
					t.Fatal(err)
				}
				root, calls, err := traces.GetExecution(context.Background(), r.ExecutionID)
				if err != nil || root.Pins["math:sum"] != 1 || len(calls) != 1 || calls[0].Version != 1 {
					t.Fatalf("root trace %+v %+v %v", root, calls, err)
				}
				child, _, err := traces.GetExecution(context.Background(), r.Calls[0].ChildExecutionID)
				if err != nil || child.Capability != "math:sum" || child.CapabilityVersion != 1 || strings.Join(child.Provenance, ",") != "ex_aaaa" {
					t.Fatalf("the run's trace %+v %v; want math:sum version 1 from ex_aaaa", child, err)
				}
				r = w.runPinned("return await mcp.math.sum({})", nil)
				if err := w.svc.Flush(context.Background()); err != nil {
					t.Fatal(err)
				}
				child, _, _ = traces.GetExecution(context.Background(), r.Calls[0].ChildExecutionID)
				if r.Calls[0].Version != 2 || child.CapabilityVersion != 2 || strings.Join(child.Provenance, ",") != "ex_bbbb,ex_cccc" {
					t.Fatalf("unpinned: call %+v, run %+v", r.Calls[0], child)
				}
			})
		})
	}
}

// TestPinsAreCheckedAsTheyCome: bad pins are refused where they enter:
// the request decoder, a save, the capability function's payload.
func TestPinsAreCheckedAsTheyCome(t *testing.T) {
	for _, body := range []string{
		`{"code": "return 1", "capabilities": {"math:sum": 0}}`,
		`{"code": "return 1", "capabilities": {"math:sum": -1}}`,
		`{"code": "return 1", "capabilities": {"math:sum": 1.5}}`,
		`{"code": "return 1", "capabilities": {"math:sum": "2"}}`,
		`{"code": "return 1", "capabilities": {"nocolon": 1}}`,
		`{"code": "return 1", "capabilities": {"a:__proto__": 1}}`,
		`{"code": "return 1", "capabilities": ["math:sum"]}`,
	} {
		if _, ferr := execution.Decode([]byte(body), execution.SourceHTTP); ferr == nil || ferr.Code != fault.InvalidRequest {
			t.Errorf("%s: %v", body, ferr)
		}
	}
	reg := capability.NewFileRegistry(filepath.Join(t.TempDir(), "caps.json"))
	for _, c := range []capability.Capability{
		{Name: "a:b", Code: "return 1", Pins: map[string]int{"a:b": 1}},
		{Name: "a:b", Code: "return 1", Pins: map[string]int{"x:y": 0}},
		{Name: "a:b", Code: "return 1", Pins: map[string]int{"x y:z": 1}},
		{Name: "a:b", Code: "return 1", Provenance: []string{"ex 1"}},
		{Name: "a:b", Code: "return 1", Provenance: make([]string, capability.MaxProvenance+1)},
	} {
		if _, err := reg.Save(context.Background(), c, nil); fault.CodeOf(err) != fault.InvalidRequest {
			t.Errorf("saved %+v: %v", c, err)
		}
	}
	w := newWorld(t, map[string]string{"math:one": "return 1"})
	r, err := w.handler()(context.Background(), json.RawMessage(`{"parent": {"capability": "math:one", "pins": {"math:one": 0}}}`))
	if err != nil || r.OK || r.Error.Code != fault.InvalidRequest {
		t.Fatalf("bad pins in the payload: %+v %v", r, err)
	}
}

var _ trace.Sink = (*tracedb.Memory)(nil)
