// The demo host below is the guest tests' in-memory tool host: a file of
// package guest so that the external tests (package guest_test) can use it
// too, and a _test.go file so that it never ships in the engine. The demo
// tools the product offers are internal/demoserver's.

package guest

import (
	"context"
	"encoding/json"
	"time"

	"github.com/pml-sandbox/pml/internal/fault"
)

// DemoServer is the server name of the test tools.
const DemoServer = "demo"

// DemoTools returns the definitions of the test tools: echo, add, sleep
// and fail, all in memory.
func DemoTools() []Tool {
	return []Tool{
		{Server: DemoServer, Name: "echo", Description: "Returns its arguments unchanged.",
			InputSchema: json.RawMessage(`{"type":"object"}`)},
		{Server: DemoServer, Name: "add", Description: "Adds two numbers: {a, b} → a + b.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"]}`)},
		{Server: DemoServer, Name: "sleep", Description: "Waits {ms} milliseconds (at most 60000), then returns {slept_ms}.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"ms":{"type":"number","minimum":0,"maximum":60000}},"required":["ms"]}`)},
		{Server: DemoServer, Name: "fail", Description: "Always fails with TOOL_ERROR and the given {message}.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"message":{"type":"string"}}}`)},
	}
}

// DemoHost serves DemoTools. It is stateless and safe for concurrent use.
type DemoHost struct{}

// CallImmediate implements ImmediateHost: everything but sleep answers at
// once.
func (h DemoHost) CallImmediate(c Call) (json.RawMessage, bool, error) {
	if c.Server == DemoServer && c.Tool == "sleep" {
		return nil, false, nil
	}
	r, err := h.CallTool(context.Background(), c)
	return r, true, err
}

// CallTool implements ToolHost.
func (DemoHost) CallTool(ctx context.Context, c Call) (json.RawMessage, error) {
	full := c.Server + ":" + c.Tool
	if c.Server != DemoServer {
		return nil, fault.New(fault.ToolNotFound, "the demo host has no tool %q", full).WithTool(full)
	}
	bad := func(err error) error {
		return fault.Wrap(fault.InvalidArguments, err, "").WithTool(full)
	}
	switch c.Tool {
	case "echo":
		return c.Args, nil
	case "add":
		var a struct{ A, B *float64 }
		if err := json.Unmarshal(c.Args, &a); err != nil {
			return nil, bad(err)
		}
		if a.A == nil || a.B == nil {
			return nil, fault.New(fault.InvalidArguments, "add needs numbers a and b").WithTool(full)
		}
		return json.Marshal(*a.A + *a.B)
	case "sleep":
		var a struct{ MS float64 }
		if err := json.Unmarshal(c.Args, &a); err != nil {
			return nil, bad(err)
		}
		if a.MS < 0 || a.MS > 60000 {
			return nil, fault.New(fault.InvalidArguments, "ms must be between 0 and 60000").WithTool(full)
		}
		t := time.NewTimer(time.Duration(a.MS * float64(time.Millisecond)))
		defer t.Stop()
		select {
		case <-t.C:
			return json.Marshal(map[string]float64{"slept_ms": a.MS})
		case <-ctx.Done():
			return nil, fault.Wrap(fault.Timeout, ctx.Err(), "sleep interrupted").WithTool(full)
		}
	case "fail":
		var a struct{ Message string }
		_ = json.Unmarshal(c.Args, &a)
		if a.Message == "" {
			a.Message = "the demo tool failed as asked"
		}
		return nil, fault.New(fault.ToolError, "%s", a.Message).WithTool(full)
	}
	return nil, fault.New(fault.ToolNotFound, "the demo host has no tool %q", full).WithTool(full)
}
