package tracectx_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/pml-sandbox/pml/internal/tracectx"
)

const (
	parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	state  = "vendor=opaque"
)

func TestFromHeader(t *testing.T) {
	for _, tc := range []struct {
		name    string
		header  http.Header
		want    string // the traceparent ctx then carries, "" for none
		wantTS  string
		sampled bool
	}{
		{"none", http.Header{}, "", "", false},
		{"valid", http.Header{"Traceparent": {parent}, "Tracestate": {state}}, parent, state, true},
		{"unsampled", http.Header{"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"}}, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", "", false},
		{"malformed", http.Header{"Traceparent": {"00-zz-yy-01"}}, "", "", false},
		{"zero trace id", http.Header{"Traceparent": {"00-00000000000000000000000000000000-00f067aa0ba902b7-01"}}, "", "", false},
		{"too long", http.Header{"Traceparent": {parent + strings.Repeat("0", 10000)}}, "", "", false},
		{"version ff", http.Header{"Traceparent": {"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}, "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := tracectx.FromHeader(context.Background(), tc.header)
			tp, ts := tracectx.Inject(ctx)
			if tp != tc.want || ts != tc.wantTS {
				t.Fatalf("carried %q %q; want %q %q", tp, ts, tc.want, tc.wantTS)
			}
			sc := oteltrace.SpanContextFromContext(ctx)
			if tracectx.Has(ctx) != (tc.want != "") || sc.IsSampled() != tc.sampled || (tc.want != "" && !sc.IsRemote()) {
				t.Fatalf("span context %+v", sc)
			}
			if h := tracectx.Headers(ctx); (h == nil) != (tc.want == "") || (h != nil && h["traceparent"] != tc.want) {
				t.Fatalf("headers %v", h)
			}
		})
	}
}

func TestExtractRoundTrip(t *testing.T) {
	ctx := tracectx.Extract(context.Background(), parent, state)
	if tp, ts := tracectx.Inject(ctx); tp != parent || ts != state {
		t.Fatalf("round trip %q %q", tp, ts)
	}
	if ctx := tracectx.Extract(context.Background(), "", state); tracectx.Has(ctx) {
		t.Fatal("a tracestate without traceparent made a span context")
	}
}

func TestFromXRay(t *testing.T) {
	for _, tc := range []struct {
		header  string
		ok      bool
		trace   string
		span    string
		sampled bool
	}{
		{"Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1", true, "5759e988bd862e3fe1be46a994272793", "53995c3f42cd8ad8", true},
		{"Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=0", true, "5759e988bd862e3fe1be46a994272793", "53995c3f42cd8ad8", false},
		{" Sampled=?; Parent=53995c3f42cd8ad8 ;Root=1-5759e988-bd862e3fe1be46a994272793;Lineage=a87bd80c:1", true, "5759e988bd862e3fe1be46a994272793", "53995c3f42cd8ad8", false},
		{"Root=1-5759e988-bd862e3fe1be46a994272793", false, "", "", false}, // no parent to nest under
		{"Root=1-5759e988-bd862e3fe1be46a99427279z;Parent=53995c3f42cd8ad8", false, "", "", false},
		{"Root=2-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8", false, "", "", false},
		{"Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad", false, "", "", false},
		{"Root=1-5759e988-bd862e3fe1be46a994272793;Parent=0000000000000000", false, "", "", false},
		{"", false, "", "", false},
		{strings.Repeat(";", 1000), false, "", "", false},
	} {
		sc, ok := tracectx.FromXRay(tc.header)
		if ok != tc.ok {
			t.Errorf("%q: ok %v", tc.header, ok)
			continue
		}
		if !ok {
			continue
		}
		if sc.TraceID().String() != tc.trace || sc.SpanID().String() != tc.span || sc.IsSampled() != tc.sampled || !sc.IsRemote() {
			t.Errorf("%q: %s %s sampled %v", tc.header, sc.TraceID(), sc.SpanID(), sc.IsSampled())
		}
		if root := tracectx.XRayRoot(sc.TraceID()); root != "1-5759e988-bd862e3fe1be46a994272793" {
			t.Errorf("XRayRoot %s", root)
		}
	}
}
