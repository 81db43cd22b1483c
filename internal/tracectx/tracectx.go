// Package tracectx carries W3C trace context (traceparent, tracestate)
// across the host's boundaries: in from an HTTP request's headers and from
// an X-Ray trace header, out in an MCP request's `_meta` and HTTP headers,
// and across the capability function's invocation in the call's lineage.
//
// Inside a process the context travels in a context.Context, as
// OpenTelemetry's span context, so the spans internal/otelsink opens nest
// under whatever arrived, and whatever leaves carries the span that is
// current there. Nothing here starts a span or needs an SDK: with tracing
// off there is nothing in a context to carry, and Inject writes nothing.
package tracectx

import (
	"context"
	"encoding/hex"
	"net/http"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	"go.opentelemetry.io/otel/propagation"
	oteltrace "go.opentelemetry.io/otel/trace"
)

// Header names.
const (
	TraceParent = "traceparent"
	TraceState  = "tracestate"
)

// w3c is OpenTelemetry's W3C Trace Context propagator: it parses and
// writes traceparent strictly (a malformed one is ignored) and bounds
// tracestate. It holds no state.
type w3c = propagation.TraceContext

// FromHeader returns ctx carrying the remote span context of h's
// traceparent (and tracestate), or ctx unchanged when h has none or a
// malformed one.
func FromHeader(ctx context.Context, h http.Header) context.Context {
	if h.Get(TraceParent) == "" {
		return ctx
	}
	return w3c{}.Extract(ctx, propagation.HeaderCarrier(h))
}

// Extract returns ctx carrying the remote span context traceparent and
// tracestate describe, or ctx unchanged when traceparent is empty or
// malformed.
func Extract(ctx context.Context, traceparent, tracestate string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return w3c{}.Extract(ctx, propagation.MapCarrier{TraceParent: traceparent, TraceState: tracestate})
}

// Inject returns the traceparent and tracestate of the span context in
// ctx, or "" when it holds none.
func Inject(ctx context.Context) (traceparent, tracestate string) {
	if !oteltrace.SpanContextFromContext(ctx).IsValid() {
		return "", ""
	}
	m := propagation.MapCarrier{}
	w3c{}.Inject(ctx, m)
	return m[TraceParent], m[TraceState]
}

// Headers returns the span context in ctx as HTTP headers (traceparent,
// and tracestate when there is one), nil when ctx holds none: the shape of
// mcp-go's transport header functions.
func Headers(ctx context.Context) map[string]string {
	tp, ts := Inject(ctx)
	if tp == "" {
		return nil
	}
	h := map[string]string{TraceParent: tp}
	if ts != "" {
		h[TraceState] = ts
	}
	return h
}

// Has reports whether ctx carries a span context, local or remote.
func Has(ctx context.Context) bool { return oteltrace.SpanContextFromContext(ctx).IsValid() }

// FromXRay returns the span context of an X-Ray trace header
// ("Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"):
// the root's 24 hex digits after the epoch's 8 are the W3C trace id, and
// Parent the span id. ok is false when the header has no well-formed root
// or parent (a parent is what a span must nest under). Sampled=1 sets the
// sampled flag; 0, "?" or nothing leaves it clear.
func FromXRay(header string) (sc oteltrace.SpanContext, ok bool) {
	var root, parent string
	sampled := false
	for part := range strings.SplitSeq(header, ";") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "Root":
			root = v
		case "Parent":
			parent = v
		case "Sampled":
			sampled = v == "1"
		}
	}
	// 1-<8 hex digits of epoch seconds>-<24 hex digits>
	if len(root) != 35 || root[:2] != "1-" || root[10] != '-' {
		return oteltrace.SpanContext{}, false
	}
	var cfg oteltrace.SpanContextConfig
	if _, err := hex.Decode(cfg.TraceID[:4], []byte(root[2:10])); err != nil {
		return oteltrace.SpanContext{}, false
	}
	if _, err := hex.Decode(cfg.TraceID[4:], []byte(root[11:])); err != nil {
		return oteltrace.SpanContext{}, false
	}
	if len(parent) != 16 {
		return oteltrace.SpanContext{}, false
	}
	if _, err := hex.Decode(cfg.SpanID[:], []byte(parent)); err != nil {
		return oteltrace.SpanContext{}, false
	}
	if sampled {
		cfg.TraceFlags = oteltrace.FlagsSampled
	}
	cfg.Remote = true
	sc = oteltrace.NewSpanContext(cfg)
	return sc, sc.IsValid()
}

// XRayRoot is the X-Ray form ("1-5759e988-bd862e3fe1be46a994272793") of a
// W3C trace id, so an OpenTelemetry trace can be found by the id X-Ray
// shows and the other way round.
func XRayRoot(id oteltrace.TraceID) string {
	h := hex.EncodeToString(id[:])
	return "1-" + h[:8] + "-" + h[8:]
}

// TraceID is what an execution's record keeps as trace_id: the X-Ray form
// of the trace of the span this process opened for it (ctx carries it
// under OpenTelemetry), else the root of its X-Ray header, else "".
func TraceID(ctx context.Context, xrayHeader string) string {
	if sc := oteltrace.SpanContextFromContext(ctx); sc.IsValid() && !sc.IsRemote() {
		return XRayRoot(sc.TraceID())
	}
	for part := range strings.SplitSeq(xrayHeader, ";") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(part), "Root="); ok {
			return v
		}
	}
	return ""
}

// MCPMeta carries the context in an MCP request's _meta (traceparent and
// tracestate, as MCP 2026-07-28 puts them there): mcp-go's
// tracing.MetaPropagator, for the MCP endpoint's server
// (server.WithMetaPropagator) to honour what a client sends.
type MCPMeta struct{}

// InjectMeta implements tracing.MetaPropagator.
func (MCPMeta) InjectMeta(ctx context.Context, meta *mcp.Meta) *mcp.Meta {
	tp, ts := Inject(ctx)
	if tp == "" {
		return meta
	}
	if meta == nil {
		meta = &mcp.Meta{}
	}
	if meta.AdditionalFields == nil {
		meta.AdditionalFields = map[string]any{}
	}
	meta.AdditionalFields[TraceParent] = tp
	if ts != "" {
		meta.AdditionalFields[TraceState] = ts
	}
	return meta
}

// ExtractMeta implements tracing.MetaPropagator: a well-formed traceparent
// in meta replaces what ctx carries (the HTTP headers').
func (MCPMeta) ExtractMeta(ctx context.Context, meta *mcp.Meta) context.Context {
	if meta == nil {
		return ctx
	}
	tp, _ := meta.AdditionalFields[TraceParent].(string)
	ts, _ := meta.AdditionalFields[TraceState].(string)
	return Extract(ctx, tp, ts)
}
