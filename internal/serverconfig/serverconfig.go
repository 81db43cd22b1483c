// Package serverconfig reads the server list — {"servers": [...]} in JSON
// or YAML, from PML_MCP_SERVERS, an SSM parameter, or pml's --config —
// whose entries are MCP servers (the default, "type": "mcp"), OpenAPI
// services ("type": "openapi") or Lambda functions ("type": "lambda"),
// and hands each kind to the package that owns its shape: the kinds of
// internal/toolsource (mcp, openapi, lambda). Every entry is decoded
// strictly (an unknown field is an error, so a typo cannot silently
// change what runs), and names are unique across kinds: each is one
// mcp.<name>.
package serverconfig

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"

	"gopkg.in/yaml.v3"

	"github.com/pml-sandbox/pml/internal/toolsource"
)

// Servers is a server list, in the order it was written: each entry one
// kind's configuration (a toolsource.Spec).
type Servers []toolsource.Spec

// Names lists every server's name.
func (s Servers) Names() []string {
	out := make([]string, len(s))
	for i, c := range s {
		out[i] = c.Base().Name
	}
	return out
}

// Of lists the servers of one kind, as that kind's configuration type.
func Of[T toolsource.Spec](s Servers) []T {
	var out []T
	for _, c := range s {
		if t, ok := c.(T); ok {
			out = append(out, t)
		}
	}
	return out
}

// Merge adds more to s, each server replacing any of its name, of any
// kind (a later --mcp or --openapi wins over the configuration file).
func (s *Servers) Merge(more ...toolsource.Spec) {
	for _, c := range more {
		name := c.Base().Name
		*s = slices.DeleteFunc(*s, func(o toolsource.Spec) bool { return o.Base().Name == name })
		*s = append(*s, c)
	}
}

// Load reads a server list from a file (see Parse).
func Load(path string, kinds *toolsource.Registry) (Servers, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("mcp config: %w", err)
	}
	return Parse(path, data, kinds)
}

// Parse reads a server list, JSON or YAML (which JSON is a subset of),
// handing each entry to the kind its "type" names in kinds (an entry
// without one is toolsource.DefaultType's); name is used in errors.
func Parse(name string, data []byte, kinds *toolsource.Registry) (Servers, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil
	}
	var doc struct {
		Servers []yaml.Node `yaml:"servers"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("mcp config %s: %w", name, err)
	}
	var out Servers
	seen := map[string]int{}
	for i := range doc.Servers {
		spec, err := entry(&doc.Servers[i], kinds)
		if err != nil {
			return nil, fmt.Errorf("mcp config %s: servers[%d]: %w", name, i, located(&doc.Servers[i], err))
		}
		n := spec.Base().Name
		if prev, dup := seen[n]; dup {
			return nil, fmt.Errorf("mcp config %s: servers[%d]: duplicate server name %q (servers[%d])", name, i, n, prev)
		}
		seen[n] = i
		out = append(out, spec)
	}
	return out, nil
}

// entry decodes one entry with the kind it names.
func entry(n *yaml.Node, kinds *toolsource.Registry) (toolsource.Spec, error) {
	if n.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("line %d: not an object", n.Line)
	}
	var typ string
	for j := 0; j+1 < len(n.Content); j += 2 {
		if n.Content[j].Value == "type" {
			typ = n.Content[j+1].Value
		}
	}
	kind, err := kinds.Kind(typ)
	if err != nil {
		return nil, err
	}
	return kind.Decode(n)
}

// hasLine matches an error that says its line already (the decoder's).
var hasLine = regexp.MustCompile(`\bline \d+\b`)

// located is err with the line it is about: the line of the field a
// toolsource.FieldError names (as far as the entry n spells its path),
// else of the entry itself. An error that says its line is left alone.
func located(n *yaml.Node, err error) error {
	if hasLine.MatchString(err.Error()) {
		return err
	}
	line := n.Line
	var fe *toolsource.FieldError
	if errors.As(err, &fe) {
		line = lineOf(n, fe.Path)
	}
	return fmt.Errorf("line %d: %w", line, err)
}

// lineOf is the line of the key (or list item) path names under n, as
// deep as n has it.
func lineOf(n *yaml.Node, path []string) int {
	line := n.Line
	for _, p := range path {
		switch n.Kind {
		case yaml.MappingNode:
			var next *yaml.Node
			for j := 0; j+1 < len(n.Content); j += 2 {
				if n.Content[j].Value == p {
					line, next = n.Content[j].Line, n.Content[j+1]
					break
				}
			}
			if next == nil {
				return line
			}
			n = next
		case yaml.SequenceNode:
			i, err := strconv.Atoi(p)
			if err != nil || i < 0 || i >= len(n.Content) {
				return line
			}
			n = n.Content[i]
			line = n.Line
		default:
			return line
		}
	}
	return line
}
