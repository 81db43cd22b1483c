package tsdecl

import "github.com/pml-sandbox/pml/internal/catalog"

// CallExpr is how a script reaches the tool: `mcp.demo.echo(args)`, or with
// bracket access where a name is not a JS identifier: `mcp.ev["get-sum"](args)`.
func CallExpr(t catalog.Tool) string {
	return "mcp" + member(t.Server) + member(t.Name) + "(args)"
}

func member(name string) string {
	if identifier.MatchString(name) {
		return "." + name
	}
	return "[" + quote(name) + "]"
}
