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
	"fmt"
	"os"
	"slices"

	"gopkg.in/yaml.v3"

	"github.com/pml-sandbox/pml/internal/toolsource/lambda"
	mcpkind "github.com/pml-sandbox/pml/internal/toolsource/mcp"
	"github.com/pml-sandbox/pml/internal/toolsource/openapi"
)

// Kinds of server (an entry's "type").
const (
	TypeMCP     = "mcp"
	TypeOpenAPI = "openapi"
	TypeLambda  = "lambda"
)

// Servers is a server list, by kind.
type Servers struct {
	MCP     []mcpkind.Config
	OpenAPI []openapi.Config
	Lambda  []lambda.Config
}

// Len counts the servers of every kind.
func (s Servers) Len() int { return len(s.MCP) + len(s.OpenAPI) + len(s.Lambda) }

// Names lists every server's name.
func (s Servers) Names() []string {
	var out []string
	for _, c := range s.MCP {
		out = append(out, c.Name)
	}
	for _, c := range s.OpenAPI {
		out = append(out, c.Name)
	}
	for _, c := range s.Lambda {
		out = append(out, c.Name)
	}
	return out
}

// Merge adds more to s, each server replacing any of its name, of any
// kind (a later --mcp or --openapi wins over the configuration file).
func (s *Servers) Merge(more Servers) {
	for _, name := range more.Names() {
		s.remove(name)
	}
	s.MCP = append(s.MCP, more.MCP...)
	s.OpenAPI = append(s.OpenAPI, more.OpenAPI...)
	s.Lambda = append(s.Lambda, more.Lambda...)
}

func (s *Servers) remove(name string) {
	s.MCP = slices.DeleteFunc(s.MCP, func(c mcpkind.Config) bool { return c.Name == name })
	s.OpenAPI = slices.DeleteFunc(s.OpenAPI, func(c openapi.Config) bool { return c.Name == name })
	s.Lambda = slices.DeleteFunc(s.Lambda, func(c lambda.Config) bool { return c.Name == name })
}

// Load reads a server list from a file (see Parse).
func Load(path string) (Servers, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Servers{}, fmt.Errorf("mcp config: %w", err)
	}
	return Parse(path, data)
}

// Parse reads a server list, JSON or YAML (which JSON is a subset of);
// name is used in errors.
func Parse(name string, data []byte) (Servers, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return Servers{}, nil
	}
	var doc struct {
		Servers []yaml.Node `yaml:"servers"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		return Servers{}, fmt.Errorf("mcp config %s: %w", name, err)
	}
	var out Servers
	seen := map[string]int{}
	for i := range doc.Servers {
		n := &doc.Servers[i]
		if n.Kind != yaml.MappingNode {
			return Servers{}, fmt.Errorf("mcp config %s: servers[%d]: not an object", name, i)
		}
		kind, entryName := TypeMCP, ""
		for j := 0; j+1 < len(n.Content); j += 2 {
			switch n.Content[j].Value {
			case "type":
				kind = n.Content[j+1].Value
			case "name":
				entryName = n.Content[j+1].Value
			}
		}
		if prev, dup := seen[entryName]; dup && entryName != "" {
			return Servers{}, fmt.Errorf("mcp config %s: servers[%d]: duplicate server name %q (servers[%d])", name, i, entryName, prev)
		}
		seen[entryName] = i
		fail := func(err error) (Servers, error) {
			return Servers{}, fmt.Errorf("mcp config %s: servers[%d]: %w", name, i, err)
		}
		switch kind {
		case TypeMCP, "":
			spec, err := new(mcpkind.Kind).Decode(n)
			if err != nil {
				return fail(err)
			}
			out.MCP = append(out.MCP, spec.(mcpkind.Config))
		case TypeOpenAPI:
			spec, err := openapi.Kind{}.Decode(n)
			if err != nil {
				return fail(err)
			}
			out.OpenAPI = append(out.OpenAPI, spec.(openapi.Config))
		case TypeLambda:
			spec, err := lambda.Kind{}.Decode(n)
			if err != nil {
				return fail(err)
			}
			out.Lambda = append(out.Lambda, spec.(lambda.Config))
		default:
			return fail(fmt.Errorf("unknown type %q (want mcp, openapi or lambda)", kind))
		}
	}
	return out, nil
}
