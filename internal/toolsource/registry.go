package toolsource

import (
	"fmt"
	"strings"
)

// DefaultType is the kind of an entry that names none: the server list
// began as a list of MCP servers.
const DefaultType = "mcp"

// Registry is the kinds a server list may name, by type. The wiring
// builds one; nothing registers itself into a package-level map.
type Registry struct {
	kinds map[string]Kind
	order []string
}

// NewRegistry registers kinds; a type registered twice is a programming
// error.
func NewRegistry(kinds ...Kind) *Registry {
	r := &Registry{kinds: map[string]Kind{}}
	for _, k := range kinds {
		r.Register(k)
	}
	return r
}

// Register adds a kind. It panics on an empty or repeated type: two kinds
// of one name would make a configuration mean two things.
func (r *Registry) Register(k Kind) {
	t := k.Info().Type
	if t == "" || r.kinds[t] != nil {
		panic(fmt.Sprintf("toolsource: kind %q registered twice or unnamed", t))
	}
	r.kinds[t] = k
	r.order = append(r.order, t)
}

// With returns a registry of r's kinds and more (r is unchanged).
func (r *Registry) With(more ...Kind) *Registry {
	out := NewRegistry()
	for _, t := range r.order {
		out.Register(r.kinds[t])
	}
	for _, k := range more {
		out.Register(k)
	}
	return out
}

// Kind finds the kind of a type ("" is DefaultType).
func (r *Registry) Kind(t string) (Kind, error) {
	if t == "" {
		t = DefaultType
	}
	if k := r.kinds[t]; k != nil {
		return k, nil
	}
	return nil, fmt.Errorf("unknown type %q (want %s)", t, r.types())
}

// types lists the registered types for an error: "mcp, openapi or lambda".
func (r *Registry) types() string {
	switch n := len(r.order); n {
	case 0:
		return "a registered kind"
	case 1:
		return r.order[0]
	default:
		return strings.Join(r.order[:n-1], ", ") + " or " + r.order[n-1]
	}
}
