package capability_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/fault"
)

func TestReserveRefusesServerNamespaces(t *testing.T) {
	ctx := context.Background()
	base := capability.NewFileRegistry(filepath.Join(t.TempDir(), "caps.json"))
	// Saved before the server was configured: still readable afterwards.
	if _, err := base.Save(ctx, capability.Capability{Name: "kv:old", Code: "return 1"}, nil); err != nil {
		t.Fatal(err)
	}
	reg := capability.Reserve(base, "kv", "fs")
	for _, name := range []string{"kv:kv_get", "fs:read", "kv:old"} {
		_, err := reg.Save(ctx, capability.Capability{Name: name, Code: "return 1"}, nil)
		if fault.CodeOf(err) != fault.InvalidRequest || !strings.Contains(err.Error(), "configured MCP server") {
			t.Errorf("Save(%s): %v; want INVALID_REQUEST naming the reason", name, err)
		}
	}
	if _, err := reg.Save(ctx, capability.Capability{Name: "kvx:get", Code: "return 1"}, nil); err != nil {
		t.Errorf("a namespace that merely starts like a server's: %v", err)
	}
	caps, err := reg.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range caps {
		names = append(names, c.Name+"@"+string(rune('0'+c.Version)))
	}
	if got := strings.Join(names, ","); got != "kv:old@1,kvx:get@1" {
		t.Errorf("stored %s; want kv:old@1,kvx:get@1 (no refused save stored)", got)
	}
	if _, err := reg.Get(ctx, "kv:old", 0); err != nil {
		t.Errorf("an existing capability is no longer readable: %v", err)
	}
	if capability.Reserve(base) != capability.Registry(base) {
		t.Error("Reserve with no names should return the registry itself")
	}
}
