package mcp

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/pml-sandbox/pml/internal/testutil/traceprobe"
	"github.com/pml-sandbox/pml/internal/toolsource"
	"github.com/pml-sandbox/pml/internal/tracectx"
)

// TestTraceContextLeavesWithCalls: a call made under a span context
// carries it to the server as _meta.traceparent and as the traceparent
// header, over both transports; a call under none carries neither.
func TestTraceContextLeavesWithCalls(t *testing.T) {
	probe := traceprobe.Start(t)
	p := newTestPool(t, []Config{
		{Config: toolsource.Config{Name: "streamable"}, URL: probe.StreamableURL(), Transport: TransportStreamable},
		{Config: toolsource.Config{Name: "sse"}, URL: probe.SSEURL(), Transport: TransportSSE},
	})
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, server := range []string{"streamable", "sse"} {
		for _, tc := range []struct {
			name          string
			parent, state string
		}{
			{"traced", parent, "pml=1"},
			{"untraced", "", ""},
		} {
			t.Run(server+" "+tc.name, func(t *testing.T) {
				before := len(probe.Seen())
				ctx := tracectx.Extract(context.Background(), tc.parent, tc.state)
				if _, err := p.Call(ctx, server, "echo", json.RawMessage(`{"text":"x"}`), CallOptions{}); err != nil {
					t.Fatal(err)
				}
				seen := probe.Seen()
				if len(seen) != before+1 {
					t.Fatalf("server saw %d calls", len(seen)-before)
				}
				got := seen[len(seen)-1]
				if got.MetaParent != tc.parent || got.HeaderParent != tc.parent || got.MetaState != tc.state || got.HeaderState != tc.state {
					t.Fatalf("server saw %+v; want traceparent %q, tracestate %q in _meta and headers", got, tc.parent, tc.state)
				}
				if string(got.Args) != `{"text":"x"}` {
					t.Fatalf("arguments %s", got.Args)
				}
			})
		}
	}
}
