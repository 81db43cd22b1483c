package demoserver

import (
	"context"
	"encoding/json"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
)

// Guest returns the demo tools as the engine sees them and a host that
// serves them straight from t, with no executor in between: no schema check,
// no trace record, and every tool but sleep answered on the script's own
// goroutine (guest.ImmediateHost). It is the path the benchmark harness
// measures per-call overhead on, kept so that figure stays comparable with
// earlier runs; everything else reaches the demo tools through the executor.
func (t *Tools) Guest() ([]guest.Tool, guest.ToolHost) {
	tools := make([]guest.Tool, len(definitions))
	for i, d := range definitions {
		tools[i] = guest.Tool{Server: Name, Name: d.Name, Description: d.Description, InputSchema: d.InputSchema}
	}
	return tools, guestHost{t}
}

// guestHost is the host Guest returns.
type guestHost struct{ t *Tools }

// CallImmediate implements guest.ImmediateHost.
func (h guestHost) CallImmediate(c guest.Call) (json.RawMessage, bool, error) {
	if def := byName[c.Tool]; c.Server != Name || def == nil || !def.Immediate {
		return nil, false, nil
	}
	r, err := h.t.Call(context.Background(), c.Tool, c.Args)
	return r, true, err
}

// CallTool implements guest.ToolHost.
func (h guestHost) CallTool(ctx context.Context, c guest.Call) (json.RawMessage, error) {
	if c.Server != Name {
		return nil, fault.New(fault.ToolNotFound, "the demo host has no server %q", c.Server).WithTool(c.Server + ":" + c.Tool)
	}
	return h.t.Call(ctx, c.Tool, c.Args)
}
