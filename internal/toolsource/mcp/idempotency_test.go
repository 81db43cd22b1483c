package mcp

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/testutil/traceprobe"
	"github.com/pml-sandbox/pml/internal/toolsource"
)

// TestIdempotencyKeyLeavesWithEffects: an effect's key reaches a real
// server over both HTTP transports as the Idempotency-Key header (one,
// whatever the server's configured headers say) and in _meta as
// io.pml/idempotency-key, whatever the arguments carry; a call without
// one (a read) carries neither the key nor the configured header's
// stand-in value.
func TestIdempotencyKeyLeavesWithEffects(t *testing.T) {
	probe := traceprobe.Start(t)
	// A configured header of the same name must not stand in for the key.
	configured := map[string]string{"idempotency-key": "configured"}
	p := newTestPool(t, []Config{
		{Config: toolsource.Config{Name: "streamable", Headers: configured}, URL: probe.StreamableURL(), Transport: TransportStreamable},
		{Config: toolsource.Config{Name: "sse", Headers: configured}, URL: probe.SSEURL(), Transport: TransportSSE},
	})
	const key = "pml-abcdefghijklmnopqrstuvwxyz"
	// What a hostile script would try: its own _meta, its own key.
	hostile := json.RawMessage(`{"text":"x","_meta":{"io.pml/idempotency-key":"forged"},"Idempotency-Key":"forged"}`)
	for _, server := range []string{"streamable", "sse"} {
		t.Run(server, func(t *testing.T) {
			before := len(probe.Seen())
			if _, err := p.Set.Call(context.Background(), catalog.Tool{Server: server, Name: "echo"}, hostile, execution.CallOptions{IdempotencyKey: key}); err != nil {
				t.Fatal(err)
			}
			if _, err := p.Set.Call(context.Background(), catalog.Tool{Server: server, Name: "echo"}, json.RawMessage(`{"text":"read"}`), execution.CallOptions{}); err != nil {
				t.Fatal(err)
			}
			seen := probe.Seen()[before:]
			if len(seen) != 2 {
				t.Fatalf("server saw %d calls", len(seen))
			}
			effect, read := seen[0], seen[1]
			if effect.MetaKey != key || !slices.Equal(effect.HeaderKeys, []string{key}) {
				t.Fatalf("the effect arrived with _meta key %q and headers %q", effect.MetaKey, effect.HeaderKeys)
			}
			// The arguments went as they were: the script's _meta is an
			// argument, not the request's.
			var args map[string]any
			if err := json.Unmarshal(effect.Args, &args); err != nil || args["Idempotency-Key"] != "forged" || args["_meta"] == nil {
				t.Fatalf("arguments %s", effect.Args)
			}
			if read.MetaKey != "" || !slices.Equal(read.HeaderKeys, []string{"configured"}) {
				t.Fatalf("the read arrived with _meta key %q and headers %q", read.MetaKey, read.HeaderKeys)
			}
		})
	}
}
