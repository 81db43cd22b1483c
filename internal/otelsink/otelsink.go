// Package otelsink sends execution traces to OpenTelemetry: a span per
// execution (a capability run is one) with a span per tool call, carrying
// the attributes xraysink gives X-Ray's segments, exported over OTLP (to
// the ADOT collector layer, X-Ray's OTLP endpoint or any collector).
//
// Unlike X-Ray's documents, which are built from the records after the
// fact, these spans are live: the service opens an execution's span as it
// starts and a call's as the call leaves for its source (trace.Spans), so
// the context the call runs under carries that span into what it reaches —
// an MCP server gets it as traceparent, a capability run nests under it,
// in this process or in the capability function. The records end the
// spans and give them their attributes; a call that never left (a
// refusal, a built-in) gets a span from its record's own times.
package otelsink

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/pml-sandbox/pml/internal/trace"
	"github.com/pml-sandbox/pml/internal/tracectx"
)

// DefaultEndpoint is where spans go when no OTEL_EXPORTER_OTLP_ENDPOINT
// (or _TRACES_ENDPOINT) says otherwise: OTLP/HTTP's default port on this
// host, where the ADOT collector layer listens in a Lambda function.
const DefaultEndpoint = "http://localhost:4318"

// maxOpen bounds the spans held open at once (executions and calls
// running): past it new ones are not opened live (their records still
// get spans), so a host that never sees some records cannot grow without
// end.
const maxOpen = 1 << 16

// Options configure a Sink.
type Options struct {
	// Service is the resource's service.name, unless OTEL_SERVICE_NAME
	// names another.
	Service string
	// Exporter receives the spans; nil means OTLP over HTTP (protobuf),
	// configured by the OTEL_EXPORTER_OTLP_* environment variables, to
	// DefaultEndpoint when none names one.
	Exporter sdktrace.SpanExporter
	// Sync exports each span as it ends instead of in batches (tests).
	Sync bool
}

// Sink is a trace.Sink, trace.CallRecorder and trace.Spans over an
// OpenTelemetry tracer provider of its own (never the global one).
type Sink struct {
	tp     *sdktrace.TracerProvider
	tracer oteltrace.Tracer

	mu    sync.Mutex
	execs map[string]*running // by execution id
	open  int                 // spans open, over all of execs
}

// running is what is open of one execution: its span (nil when it was not
// opened live) and its calls' spans, by call id.
type running struct {
	span  oteltrace.Span
	calls map[int]oteltrace.Span
}

// New returns a sink exporting as opts say. Sampling follows
// OTEL_TRACES_SAMPLER (default: parent-based, always on: a caller's
// sampled flag, W3C or X-Ray, decides).
func New(ctx context.Context, opts Options) (*Sink, error) {
	exp := opts.Exporter
	if exp == nil {
		var eopts []otlptracehttp.Option
		if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			eopts = append(eopts, otlptracehttp.WithEndpointURL(DefaultEndpoint+"/v1/traces"))
		}
		var err error
		if exp, err = otlptracehttp.New(ctx, eopts...); err != nil {
			return nil, fmt.Errorf("OTLP exporter: %w", err)
		}
	}
	service := opts.Service
	if service == "" {
		service = "pml-sandbox"
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", service)}
	if fn := os.Getenv("AWS_LAMBDA_FUNCTION_NAME"); fn != "" {
		attrs = append(attrs, attribute.String("faas.name", fn), attribute.String("cloud.provider", "aws"))
	}
	// Later detectors win: the environment's service name over ours.
	res, err := resource.New(ctx, resource.WithAttributes(attrs...), resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("OpenTelemetry resource: %w", err)
	}
	var process sdktrace.TracerProviderOption
	if opts.Sync {
		process = sdktrace.WithSyncer(exp)
	} else {
		// Exported in batches, and at every Flush.
		process = sdktrace.WithBatcher(exp)
	}
	tp := sdktrace.NewTracerProvider(process, sdktrace.WithResource(res))
	return &Sink{tp: tp, tracer: tp.Tracer("github.com/pml-sandbox/pml"), execs: map[string]*running{}}, nil
}

// Name is the span name of an execution: "execution", or "capability
// NAME" for a capability run, as X-Ray names its subsegments.
func Name(ex trace.Execution) string {
	if ex.Capability != "" {
		return "capability " + ex.Capability
	}
	return "execution"
}

// CallName is the span name of a call: "server:tool", or the built-in's
// own name (tools.search; "*" for the calls refused past tool_calls).
func CallName(c trace.Call) string {
	if c.Server == "" {
		return c.Tool
	}
	return c.Server + ":" + c.Tool
}

// parent is the context a span of ex nests under: the span context ctx
// carries (a caller's traceparent, the call that started a capability
// run), else the X-Ray header's parent, else none (a new trace).
func parent(ctx context.Context, header string) context.Context {
	if tracectx.Has(ctx) {
		return ctx
	}
	if sc, ok := tracectx.FromXRay(header); ok {
		return oteltrace.ContextWithRemoteSpanContext(ctx, sc)
	}
	return ctx
}

// StartExecution implements trace.Spans.
func (s *Sink) StartExecution(ctx context.Context, ex trace.Execution) context.Context {
	if s.full() {
		return ctx
	}
	ctx, span := s.tracer.Start(parent(ctx, ex.TraceHeader), Name(ex), oteltrace.WithSpanKind(execKind(ex)), oteltrace.WithTimestamp(ex.StartedAt),
		oteltrace.WithAttributes(attribute.String("pml.execution_id", ex.ID), attribute.String("pml.source", ex.Source)))
	s.mu.Lock()
	r := s.execs[ex.ID]
	if r == nil {
		r = &running{}
		s.execs[ex.ID] = r
	}
	old := r.span
	r.span = span
	if old == nil {
		s.open++
	}
	s.mu.Unlock()
	if old != nil {
		old.End() // a run whose record never came
	}
	return ctx
}

// full reports whether maxOpen spans are open.
func (s *Sink) full() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open >= maxOpen
}

// StartCall implements trace.Spans.
func (s *Sink) StartCall(ctx context.Context, c trace.Call) context.Context {
	if s.full() {
		return ctx
	}
	ctx, span := s.tracer.Start(ctx, CallName(c), oteltrace.WithSpanKind(callKind(c)),
		oteltrace.WithAttributes(attribute.String("pml.server", c.Server), attribute.String("pml.tool", c.Tool), attribute.Int("pml.call_id", c.CallID)))
	s.mu.Lock()
	r := s.execs[c.ExecutionID]
	if r == nil {
		r = &running{}
		s.execs[c.ExecutionID] = r
	}
	if r.calls == nil {
		r.calls = map[int]oteltrace.Span{}
	}
	old := r.calls[c.CallID]
	r.calls[c.CallID] = span
	if old == nil {
		s.open++
	}
	s.mu.Unlock()
	if old != nil {
		old.End()
	}
	return ctx
}

// execKind is an execution span's kind: a server's, or, for a capability
// run (it has a parent execution), internal.
func execKind(ex trace.Execution) oteltrace.SpanKind {
	if ex.ParentExecutionID != "" {
		return oteltrace.SpanKindInternal
	}
	return oteltrace.SpanKindServer
}

// callEnd is when the call c records ended.
func callEnd(c trace.Call) time.Time {
	return c.StartedAt.Add(time.Duration(c.DurationMS * float64(time.Millisecond)))
}

func callKind(c trace.Call) oteltrace.SpanKind {
	if c.Kind == trace.KindBuiltin || c.Server == "" {
		return oteltrace.SpanKindInternal
	}
	return oteltrace.SpanKindClient
}

// RecordCall implements trace.CallRecorder: it ends the call's span with
// the record's attributes, or makes one from the record under ctx (the
// execution's context) when the call never left.
func (s *Sink) RecordCall(ctx context.Context, c trace.Call) {
	s.mu.Lock()
	var span oteltrace.Span
	r, ok := s.execs[c.ExecutionID]
	if ok {
		span, ok = r.calls[c.CallID]
		if ok {
			delete(r.calls, c.CallID)
			s.open--
		}
	}
	s.mu.Unlock()
	end := callEnd(c)
	if !ok {
		_, span = s.tracer.Start(ctx, CallName(c), oteltrace.WithSpanKind(callKind(c)), oteltrace.WithTimestamp(c.StartedAt))
	}
	finishCall(span, c)
	span.End(oteltrace.WithTimestamp(end))
}

func finishCall(span oteltrace.Span, c trace.Call) {
	attrs := []attribute.KeyValue{
		attribute.String("pml.server", c.Server), attribute.String("pml.tool", c.Tool), attribute.Bool("pml.ok", c.OK),
		attribute.String("pml.kind", string(c.Kind)), attribute.Int("pml.call_id", c.CallID),
		attribute.Int("pml.args_bytes", c.ArgsBytes), attribute.Int("pml.result_bytes", c.ResultBytes),
		attribute.Float64("pml.duration_ms", c.DurationMS),
	}
	if c.ErrorCode != "" {
		attrs = append(attrs, attribute.String("pml.error_code", string(c.ErrorCode)))
	}
	if c.ChildExecutionID != "" {
		attrs = append(attrs, attribute.String("pml.child_execution_id", c.ChildExecutionID))
	}
	if c.Count > 1 {
		attrs = append(attrs, attribute.Int("pml.count", c.Count))
	}
	span.SetAttributes(attrs...)
	if !c.OK {
		span.SetStatus(codes.Error, string(c.ErrorCode))
	}
}

// Record implements trace.Sink: it ends the execution's span (or makes
// one from the record when it was never opened) and the spans of its
// calls that are still open.
func (s *Sink) Record(ctx context.Context, ex trace.Execution, calls []trace.Call) {
	s.mu.Lock()
	var span oteltrace.Span
	var open map[int]oteltrace.Span
	if r := s.execs[ex.ID]; r != nil {
		span, open = r.span, r.calls
		s.open -= len(r.calls)
		if span != nil {
			s.open--
		}
		delete(s.execs, ex.ID)
	}
	ok := span != nil
	s.mu.Unlock()
	now := time.Now()
	for _, c := range calls {
		if sp, ok := open[c.CallID]; ok && c.ExecutionID == ex.ID {
			finishCall(sp, c)
			sp.End(oteltrace.WithTimestamp(callEnd(c)))
			delete(open, c.CallID)
		}
	}
	for _, sp := range open {
		sp.SetStatus(codes.Error, "the call's record never came")
		sp.End(oteltrace.WithTimestamp(now))
	}
	if !ok {
		// ctx is the caller's: when it carries this execution's own span
		// (a record without StartExecution never does), nest beside it.
		_, span = s.tracer.Start(parent(ctx, ex.TraceHeader), Name(ex), oteltrace.WithSpanKind(execKind(ex)), oteltrace.WithTimestamp(ex.StartedAt))
		now = ex.StartedAt.Add(time.Duration(ex.DurationMS * float64(time.Millisecond)))
	}
	attrs := []attribute.KeyValue{
		attribute.String("pml.execution_id", ex.ID), attribute.Bool("pml.ok", ex.Status == trace.StatusOK),
		attribute.String("pml.status", ex.Status), attribute.String("pml.source", ex.Source),
		attribute.Int("pml.code_bytes", ex.CodeBytes), attribute.String("pml.code_hash", ex.CodeHash),
		attribute.Int("pml.calls", ex.Calls), attribute.Float64("pml.duration_ms", ex.DurationMS),
		attribute.Float64("pml.cpu_ms", ex.CPUMS),
	}
	if ex.ErrorCode != "" {
		attrs = append(attrs, attribute.String("pml.error_code", string(ex.ErrorCode)))
	}
	if ex.Limit != "" {
		attrs = append(attrs, attribute.String("pml.limit", ex.Limit))
	}
	if ex.ParentExecutionID != "" {
		attrs = append(attrs, attribute.String("pml.parent_execution_id", ex.ParentExecutionID),
			attribute.Int("pml.parent_call_id", ex.ParentCallID), attribute.String("pml.capability", ex.Capability),
			attribute.Int("pml.depth", ex.Depth))
	}
	if ex.TraceID != "" {
		attrs = append(attrs, attribute.String("pml.xray_trace_id", ex.TraceID))
	}
	span.SetAttributes(attrs...)
	if n := len(ex.Events); n > 0 && ex.Events[n-1].Type == trace.EventSuspend {
		last := ex.Events[n-1]
		span.AddEvent(trace.EventSuspend, oteltrace.WithTimestamp(last.At), oteltrace.WithAttributes(attribute.IntSlice("pml.pending", last.Pending)))
	}
	if ex.Status == trace.StatusError {
		span.SetStatus(codes.Error, string(ex.ErrorCode))
	}
	span.End(oteltrace.WithTimestamp(now))
}

// Flush implements trace.Sink: the spans ended so far are exported
// within ctx (a Lambda function is frozen once it answers).
func (s *Sink) Flush(ctx context.Context) error { return s.tp.ForceFlush(ctx) }

// Close exports what is left and stops the exporter.
func (s *Sink) Close(ctx context.Context) error { return s.tp.Shutdown(ctx) }

var _ interface {
	trace.Sink
	trace.CallRecorder
	trace.Spans
} = (*Sink)(nil)

// Open is how many spans are open (executions and calls running), for
// tests.
func (s *Sink) Open() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open
}
