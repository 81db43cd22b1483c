package capability

import (
	"context"
	"slices"

	"github.com/pml-sandbox/pml/internal/fault"
)

// Reserve returns reg with Save (and PutDraft) refusing, with INVALID_REQUEST, every
// capability whose namespace is one of namespaces: the names of the
// configured MCP servers. A server's mcp.<name>.* belongs to the server;
// a capability saved as "kv:kv_get" would otherwise be offered in its
// place whenever server kv is down. The executor also drops such capabilities
// when it builds its catalog, for those saved before the server was
// configured or through a registry that is not wrapped. Other methods pass
// through, so existing versions stay readable.
func Reserve(reg Registry, namespaces ...string) Registry {
	if len(namespaces) == 0 {
		return reg
	}
	return reserved{Registry: reg, namespaces: slices.Clone(namespaces)}
}

type reserved struct {
	Registry
	namespaces []string
}

func (r reserved) Unwrap() Registry { return r.Registry }

// Save implements Registry.
func (r reserved) Save(ctx context.Context, c Capability, allow Allow) (Saved, error) {
	if err := CheckNamespace(c.Name, r.namespaces); err != nil {
		return Saved{}, err
	}
	return r.Registry.Save(ctx, c, allow)
}

// PutDraft implements Registry: a draft that could never be published is
// refused as a save would be.
func (r reserved) PutDraft(ctx context.Context, d Draft, limits DraftLimits) error {
	if err := CheckNamespace(d.Name, r.namespaces); err != nil {
		return err
	}
	return r.Registry.PutDraft(ctx, d, limits)
}

// CheckNamespace returns INVALID_REQUEST when name's namespace is one of
// servers (see Reserve).
func CheckNamespace(name string, servers []string) error {
	ns, _, err := ParseName(name)
	if err != nil {
		return err
	}
	if slices.Contains(servers, ns) {
		return fault.New(fault.InvalidRequest,
			"capability name %q: %q is the name of a configured MCP server, whose tools it would shadow; choose another namespace", name, ns)
	}
	return nil
}
