package mcp

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/pml-sandbox/pml/internal/argcheck"
	"github.com/pml-sandbox/pml/internal/testutil/mcptest"
	"github.com/pml-sandbox/pml/internal/toolsource"
)

// The Call benchmarks go through the Set and the kind (lookup, schema
// validation, raw send, normalisation); the Direct ones make the same call with a bare
// mcp-go client on the same loopback server. Both report p50 beside ns/op.
//
//	go test -run '^$' -bench . -benchtime 2000x ./internal/mcp/

func BenchmarkCallSSE(b *testing.B)        { benchPool(b, TransportSSE) }
func BenchmarkCallStreamable(b *testing.B) { benchPool(b, TransportStreamable) }
func BenchmarkDirectSSE(b *testing.B)      { benchDirect(b, TransportSSE) }
func BenchmarkDirectStreamable(b *testing.B) {
	benchDirect(b, TransportStreamable)
}

func benchPool(b *testing.B, kind string) {
	ts := newTestServer(b, kind, srvOpts{})
	p := newTestPool(b, []Config{{Config: toolsource.Config{Name: "demo"}, URL: ts.URL(), Transport: kind}})
	waitTools(b, p, "demo", "echo")
	ctx := context.Background()
	args := json.RawMessage(`{"text":"hi"}`)
	run(b, func() error {
		_, err := p.Call(ctx, "demo", "echo", args, CallOptions{})
		return err
	})
}

func benchDirect(b *testing.B, kind string) {
	ts := newTestServer(b, kind, srvOpts{})
	var c *client.Client
	var err error
	if kind == TransportSSE {
		c, err = client.NewSSEMCPClient(ts.URL())
	} else {
		c, err = client.NewStreamableHttpClient(ts.URL())
	}
	if err != nil {
		b.Fatal(err)
	}
	mcptest.Connect(b, c, ProtocolVersion)
	ctx := context.Background()
	var req mcpgo.CallToolRequest
	req.Params.Name = "echo"
	req.Params.Arguments = map[string]any{"text": "hi"}
	run(b, func() error {
		_, err := c.CallTool(ctx, req)
		return err
	})
}

func run(b *testing.B, f func() error) {
	for range 20 { // warm connections and caches
		if err := f(); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		if err := f(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	}
}

// BenchmarkHostOverhead is the per-call work without the network:
// argument validation against a compiled schema (the Set's) and result
// normalisation (the kind's).
func BenchmarkHostOverhead(b *testing.B) {
	input := argcheck.New(json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`))
	args := json.RawMessage(`{"text":"hi"}`)
	result := json.RawMessage(`{"content":[{"type":"text","text":"hi"}]}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, ferr := input.Check(args); ferr != nil {
			b.Fatal(ferr)
		}
		if _, _, _, err := normalizeResult(result, false); err != nil {
			b.Fatal(err)
		}
	}
}
