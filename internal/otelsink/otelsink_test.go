package otelsink_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	oteltrace "go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/otelsink"
	"github.com/pml-sandbox/pml/internal/testutil/otlpreceiver"
	"github.com/pml-sandbox/pml/internal/trace"
	"github.com/pml-sandbox/pml/internal/tracectx"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan  = "00f067aa0ba902b7"
	callerTP    = "00-" + callerTrace + "-" + callerSpan + "-01"
)

func newSink(t *testing.T) (*otelsink.Sink, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	s, err := otelsink.New(context.Background(), otelsink.Options{Exporter: exp, Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s, exp
}

func byName(spans tracetest.SpanStubs) map[string]tracetest.SpanStub {
	m := map[string]tracetest.SpanStub{}
	for _, s := range spans {
		m[s.Name] = s
	}
	return m
}

func attr(s tracetest.SpanStub, key string) attribute.Value {
	for _, a := range s.Attributes {
		if string(a.Key) == key {
			return a.Value
		}
	}
	return attribute.Value{}
}

// TestLiveSpans: an execution under a caller's traceparent and its calls
// are one tree in the caller's trace; what a call reaches carries the
// call's span; the records give the spans their attributes.
func TestLiveSpans(t *testing.T) {
	s, exp := newSink(t)
	start := time.Now()
	ctx := tracectx.Extract(context.Background(), callerTP, "")
	ectx := s.StartExecution(ctx, trace.Execution{ID: "ex_1", StartedAt: start, Source: "http"})
	cctx := s.StartCall(ectx, trace.Call{ExecutionID: "ex_1", CallID: 1, Server: "kv", Tool: "get", Kind: trace.KindMCP})
	out, _ := tracectx.Inject(cctx)
	callSpan := oteltrace.SpanContextFromContext(cctx).SpanID().String()
	if out != "00-"+callerTrace+"-"+callSpan+"-01" {
		t.Fatalf("the call carries %q", out)
	}
	c1 := trace.Call{ExecutionID: "ex_1", CallID: 1, Server: "kv", Tool: "get", Kind: trace.KindMCP, StartedAt: start, DurationMS: 3, OK: true, ArgsBytes: 10, ResultBytes: 20}
	s.RecordCall(ectx, c1)
	// A call refused before it left: no live span, one from its record.
	c2 := trace.Call{ExecutionID: "ex_1", CallID: 2, Server: "kv", Tool: "drop", Kind: trace.KindMCP, StartedAt: start, ErrorCode: fault.Forbidden}
	s.RecordCall(ectx, c2)
	// A call whose record never comes alone: the execution's record ends it.
	s.StartCall(ectx, trace.Call{ExecutionID: "ex_1", CallID: 3, Server: "kv", Tool: "slow"})
	c3 := trace.Call{ExecutionID: "ex_1", CallID: 3, Server: "kv", Tool: "slow", StartedAt: start, DurationMS: 1, OK: true}
	s.Record(ectx, trace.Execution{ID: "ex_1", Status: trace.StatusError, ErrorCode: fault.LimitExceeded, Limit: fault.LimitMemory,
		StartedAt: start, DurationMS: 9, CPUMS: 4, Calls: 3, Source: "http", CodeBytes: 42}, []trace.Call{c1, c2, c3})

	spans := byName(exp.GetSpans())
	ex, get, drop, slow := spans["execution"], spans["kv:get"], spans["kv:drop"], spans["kv:slow"]
	if len(exp.GetSpans()) != 4 {
		t.Fatalf("spans %v", exp.GetSpans())
	}
	if ex.SpanContext.TraceID().String() != callerTrace || ex.Parent.SpanID().String() != callerSpan || ex.SpanKind != oteltrace.SpanKindServer {
		t.Fatalf("execution span %+v", ex)
	}
	for _, c := range []tracetest.SpanStub{get, drop, slow} {
		if c.Parent.SpanID() != ex.SpanContext.SpanID() || c.SpanContext.TraceID() != ex.SpanContext.TraceID() {
			t.Fatalf("%s is not a child of the execution", c.Name)
		}
	}
	if get.SpanContext.SpanID().String() != callSpan || get.SpanKind != oteltrace.SpanKindClient || attr(get, "pml.result_bytes").AsInt64() != 20 || !attr(get, "pml.ok").AsBool() {
		t.Fatalf("call span %+v", get)
	}
	if drop.Status.Code != codes.Error || attr(drop, "pml.error_code").AsString() != "FORBIDDEN" || !drop.StartTime.Equal(start) {
		t.Fatalf("refused call span %+v", drop)
	}
	if slow.EndTime.Sub(slow.StartTime) > time.Minute || attr(slow, "pml.ok").AsBool() != true {
		t.Fatalf("unfinished call span %+v", slow)
	}
	if ex.Status.Code != codes.Error || attr(ex, "pml.limit").AsString() != "memory" || attr(ex, "pml.cpu_ms").AsFloat64() != 4 ||
		attr(ex, "pml.execution_id").AsString() != "ex_1" || attr(ex, "pml.code_bytes").AsInt64() != 42 {
		t.Fatalf("execution span %+v", ex)
	}
}

// TestParents: without a traceparent the X-Ray header is the parent; with
// neither the execution starts a trace; a capability run nests under the
// call that started it; an unsampled caller's trace is carried on but
// nothing is exported.
func TestParents(t *testing.T) {
	const xray = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
	s, exp := newSink(t)
	ctx := s.StartExecution(context.Background(), trace.Execution{ID: "ex_x", TraceHeader: xray, StartedAt: time.Now()})
	cctx := s.StartCall(ctx, trace.Call{ExecutionID: "ex_x", CallID: 1, Server: "m", Tool: "cap", Kind: trace.KindCapability})
	child := s.StartExecution(cctx, trace.Execution{ID: "ex_child", ParentExecutionID: "ex_x", ParentCallID: 1, Capability: "m:cap", TraceHeader: xray, StartedAt: time.Now()})
	s.Record(child, trace.Execution{ID: "ex_child", Status: trace.StatusOK, ParentExecutionID: "ex_x", ParentCallID: 1, Capability: "m:cap"}, nil)
	s.RecordCall(ctx, trace.Call{ExecutionID: "ex_x", CallID: 1, Server: "m", Tool: "cap", Kind: trace.KindCapability, OK: true, ChildExecutionID: "ex_child"})
	s.Record(ctx, trace.Execution{ID: "ex_x", Status: trace.StatusOK, TraceHeader: xray}, nil)
	spans := byName(exp.GetSpans())
	root, call, run := spans["execution"], spans["m:cap"], spans["capability m:cap"]
	if root.SpanContext.TraceID().String() != "5759e988bd862e3fe1be46a994272793" || root.Parent.SpanID().String() != "53995c3f42cd8ad8" {
		t.Fatalf("execution under X-Ray %+v", root)
	}
	if run.Parent.SpanID() != call.SpanContext.SpanID() || run.SpanKind != oteltrace.SpanKindInternal || attr(call, "pml.child_execution_id").AsString() != "ex_child" {
		t.Fatalf("capability run %+v under call %+v", run, call)
	}

	exp.Reset()
	ctx = s.StartExecution(context.Background(), trace.Execution{ID: "ex_new", StartedAt: time.Now()})
	s.Record(ctx, trace.Execution{ID: "ex_new", Status: trace.StatusOK}, nil)
	if got := exp.GetSpans(); len(got) != 1 || got[0].Parent.IsValid() || !got[0].SpanContext.IsSampled() {
		t.Fatalf("a new trace: %+v", got)
	}

	exp.Reset()
	ctx = tracectx.Extract(context.Background(), "00-"+callerTrace+"-"+callerSpan+"-00", "")
	ctx = s.StartExecution(ctx, trace.Execution{ID: "ex_unsampled", StartedAt: time.Now()})
	cctx = s.StartCall(ctx, trace.Call{ExecutionID: "ex_unsampled", CallID: 1, Server: "kv", Tool: "get"})
	if tp, _ := tracectx.Inject(cctx); tp == "" || tp[3:35] != callerTrace || tp[53:] != "00" {
		t.Fatalf("an unsampled trace is carried on as %q", tp)
	}
	s.RecordCall(ctx, trace.Call{ExecutionID: "ex_unsampled", CallID: 1, Server: "kv", Tool: "get", OK: true})
	s.Record(ctx, trace.Execution{ID: "ex_unsampled", Status: trace.StatusOK}, nil)
	if got := exp.GetSpans(); len(got) != 0 {
		t.Fatalf("unsampled spans exported: %+v", got)
	}
}

// TestRecordWithoutStart: a record whose execution was never opened live
// (another service's, a resumed run recorded elsewhere) still becomes a
// span with the record's times, and a suspension is an event on it.
func TestRecordWithoutStart(t *testing.T) {
	s, exp := newSink(t)
	start := time.Now().Add(-time.Second)
	s.Record(context.Background(), trace.Execution{ID: "ex_s", Status: trace.StatusSuspended, StartedAt: start, DurationMS: 250,
		Events: []trace.Event{{Type: trace.EventSuspend, At: start.Add(250 * time.Millisecond), Pending: []int{2}}}}, nil)
	got := exp.GetSpans()
	if len(got) != 1 || !got[0].StartTime.Equal(start) || got[0].EndTime.Sub(start) != 250*time.Millisecond ||
		len(got[0].Events) != 1 || got[0].Events[0].Name != "suspend" || attr(got[0], "pml.status").AsString() != "suspended" {
		t.Fatalf("%+v", got)
	}
}

// TestOpenSpansAreBounded: spans opened and never recorded do not grow
// the sink without end; records still become spans past the bound.
func TestOpenSpansAreBounded(t *testing.T) {
	exp := tracetest.NewNoopExporter()
	s, err := otelsink.New(context.Background(), otelsink.Options{Exporter: exp})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	ctx := context.Background()
	for i := range 70000 {
		ctx := s.StartExecution(ctx, trace.Execution{ID: "ex", StartedAt: time.Now()})
		s.StartCall(ctx, trace.Call{ExecutionID: "ex", CallID: i + 1, Server: "kv", Tool: "get"})
	}
	if n := s.Open(); n > 1<<16 {
		t.Fatalf("%d spans open", n)
	}
	s.Record(ctx, trace.Execution{ID: "ex", Status: trace.StatusOK}, nil)
	if n := s.Open(); n != 0 {
		t.Fatalf("%d spans left open after the record", n)
	}
}

// TestExportsOverOTLP: spans reach an OTLP/HTTP receiver at the endpoint
// the standard environment variable names, with the service's resource,
// by Flush.
func TestExportsOverOTLP(t *testing.T) {
	r := otlpreceiver.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", r.Endpoint())
	t.Setenv("OTEL_SERVICE_NAME", "")
	t.Setenv("AWS_LAMBDA_FUNCTION_NAME", "stack-execute")
	s, err := otelsink.New(context.Background(), otelsink.Options{Service: "pml-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	ctx := s.StartExecution(context.Background(), trace.Execution{ID: "ex_otlp", StartedAt: time.Now()})
	s.Record(ctx, trace.Execution{ID: "ex_otlp", Status: trace.StatusOK}, nil)
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := r.Spans()
	if len(got) != 1 || got[0].Name != "execution" || got[0].Attributes["pml.execution_id"] != "ex_otlp" ||
		got[0].Resource["service.name"] != "pml-test" || got[0].Resource["faas.name"] != "stack-execute" {
		t.Fatalf("received %+v", got)
	}
}

var _ sdktrace.SpanExporter = tracetest.NewNoopExporter()

// TestConcurrentExecutions: executions and calls started and recorded from
// many goroutines at once each get their span, and nothing stays open.
func TestConcurrentExecutions(t *testing.T) {
	s, exp := newSink(t)
	var wg sync.WaitGroup
	for e := range 50 {
		wg.Go(func() {
			id := fmt.Sprintf("ex_%d", e)
			ctx := s.StartExecution(context.Background(), trace.Execution{ID: id, StartedAt: time.Now()})
			var calls sync.WaitGroup
			for c := range 10 {
				calls.Go(func() {
					call := trace.Call{ExecutionID: id, CallID: c + 1, Server: "kv", Tool: "get", StartedAt: time.Now(), OK: true}
					s.StartCall(ctx, call)
					s.RecordCall(ctx, call)
				})
			}
			calls.Wait()
			s.Record(ctx, trace.Execution{ID: id, Status: trace.StatusOK}, nil)
		})
	}
	wg.Wait()
	if n := len(exp.GetSpans()); n != 50*11 {
		t.Fatalf("%d spans; want %d", n, 50*11)
	}
	if n := s.Open(); n != 0 {
		t.Fatalf("%d spans left open", n)
	}
}
