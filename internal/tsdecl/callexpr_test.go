package tsdecl

import (
	"testing"

	"github.com/pml-sandbox/pml/internal/catalog"
)

func TestCallExpr(t *testing.T) {
	tests := []struct {
		server, name, want string
	}{
		{"demo", "echo", "mcp.demo.echo(args)"},
		{"ev", "get-sum", `mcp.ev["get-sum"](args)`},
		{"my-server", "new", `mcp["my-server"].new(args)`},
		{"s", "a\"b\u2028", `mcp.s["a\"b\u2028"](args)`},
		{"$x", "_y1", "mcp.$x._y1(args)"},
	}
	for _, tt := range tests {
		if got := CallExpr(catalog.Tool{Server: tt.server, Name: tt.name}); got != tt.want {
			t.Errorf("CallExpr(%q, %q) = %s; want %s", tt.server, tt.name, got, tt.want)
		}
	}
}
