package cli

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/serverconfig"
	"github.com/pml-sandbox/pml/internal/toolsource/lambda"
	mcpkind "github.com/pml-sandbox/pml/internal/toolsource/mcp"
	"github.com/pml-sandbox/pml/internal/toolsource/openapi"
)

// TestServerFlags: $PML_MCP_SERVERS, --config, --mcp and --openapi merge
// in that order, a later one taking a name whatever its kind.
func TestServerFlags(t *testing.T) {
	t.Setenv(app.EnvMCPServers, `{"servers": [{"name": "a", "url": "http://127.0.0.1:1/mcp"}, {"name": "b", "url": "http://127.0.0.1:1/mcp"}]}`)
	cfg := filepath.Join(t.TempDir(), "servers.yaml")
	if err := os.WriteFile(cfg, []byte("servers:\n  - {name: b, type: openapi, spec: b.json}\n  - {name: c, type: lambda, functions: [{name: f, function: fn, input_schema: {}}]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		want string // kind:name..., or an error's text
	}{
		{[]string{"--config", cfg}, "mcp:a openapi:b lambda:c"},
		{[]string{"--config", cfg, "--openapi", "a=https://a.test/openapi.json"}, "openapi:b openapi:a lambda:c"},
		{[]string{"--config", cfg, "--mcp", "b=http://127.0.0.1:2/mcp"}, "mcp:a mcp:b lambda:c"},
		{[]string{"--openapi", "then=x.json"}, "reserved"},
		{[]string{"--openapi", "x"}, "want NAME=URL or NAME=FILE"},
		{[]string{"--openapi", "x=ftp://host/doc"}, "want an http(s) URL or a file path"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			var f serverFlags
			f.register(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			s, err := f.servers()
			if err != nil {
				if !strings.Contains(err.Error(), tc.want) {
					t.Errorf("error %v, want %q", err, tc.want)
				}
				return
			}
			var got []string
			for _, c := range serverconfig.Of[mcpkind.Config](s) {
				got = append(got, "mcp:"+c.Name)
			}
			for _, c := range serverconfig.Of[openapi.Config](s) {
				got = append(got, "openapi:"+c.Name)
			}
			for _, c := range serverconfig.Of[lambda.Config](s) {
				got = append(got, "lambda:"+c.Name)
			}
			if strings.Join(got, " ") != tc.want {
				t.Errorf("servers %v, want %s", got, tc.want)
			}
		})
	}
}
