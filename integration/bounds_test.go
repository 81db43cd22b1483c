package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
)

// TestCapabilityBoundsOverInvoke checks the sandbox budget and the
// inherited narrowing where they matter: between function instances, over
// the Lambda Invoke API, where nothing is shared but the payload.
func TestCapabilityBoundsOverInvoke(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	reg := capability.NewDynamoRegistry(s.db.Client(), s.capTable)
	for name, code := range map[string]string{
		"b:leaf": "return 1",
		"b:mid":  "return await mcp.b.leaf({}) + 1",
		"b:wide": "return (await Promise.all(Array.from({length: args.n}, () => mcp.b.leaf({})))).length",
		"iso:x":  "return await mcp.text.word_count({text: 'a b'})",
	} {
		if _, err := reg.Save(ctx, capability.Capability{Name: name, Code: code}, nil); err != nil {
			t.Fatal(err)
		}
	}
	call := func(fn string, payload any) execution.Response {
		t.Helper()
		var r execution.Response
		if err := json.Unmarshal(s.invoke(t, fn, payload, ""), &r); err != nil {
			t.Fatal(err)
		}
		return r
	}

	// What a nested run spends comes back to the root through two Invokes:
	// execute → capability (b:mid) → capability (b:leaf).
	if r := call("execute", map[string]any{"code": "return await mcp.b.mid({})"}); !r.OK || string(r.Result) != "2" || r.Sandboxes != 2 {
		t.Fatalf("b:mid: %s %+v (%d sandboxes)", r.Result, r.Error, r.Sandboxes)
	}
	// A run holds only the share in its payload, whatever the default.
	inv := func(budget int) map[string]any {
		return map[string]any{"parent": map[string]any{"capability": "b:wide", "sandboxes": budget}, "args": map[string]int{"n": 3}}
	}
	if r := call("capability", inv(3)); !r.OK || string(r.Result) != "3" || r.Sandboxes != 3 {
		t.Fatalf("budget 3: %s %+v (%d sandboxes)", r.Result, r.Error, r.Sandboxes)
	}
	if r := call("capability", inv(2)); r.OK || r.Error.Code != fault.LimitExceeded || r.Error.Limit != fault.LimitSandboxes {
		t.Fatalf("budget 2: %s %+v", r.Result, r.Error)
	}

	// The caller's narrowing reaches the capability function.
	if r := call("execute", map[string]any{"code": "return await mcp.iso.x({})"}); !r.OK {
		t.Fatalf("unnarrowed: %+v", r.Error)
	}
	r := call("execute", map[string]any{"code": "return await mcp.iso.x({})", "tools": []string{"iso:*"}})
	if r.OK || r.Error.Code != fault.Forbidden || !strings.Contains(r.Error.Message, "text:word_count") {
		t.Fatalf("narrowed to iso:*: %+v", r.Error)
	}
}
