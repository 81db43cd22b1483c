package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/pml-sandbox/pml/internal/demoserver"
)

func demoServerCmd(ctx context.Context, args []string, out, errOut io.Writer) (int, error) {
	fs := newFlagSet("demo-server", errOut)
	addr := fs.String("addr", "127.0.0.1:8765", "listen address (loopback)")
	if err := parse(fs, args); err != nil {
		return ExitUsage, err
	}
	s, err := demoserver.Start(*addr)
	if err != nil {
		return ExitFailed, err
	}
	fmt.Fprintf(out, "demo MCP server\n  SSE:             %s\n  streamable HTTP: %s\ntry: pml run --mcp demo=%s -e 'return await mcp.demo.word_count({text: \"hello sandbox\"})'\n",
		s.SSEURL(), s.StreamableURL(), s.SSEURL())
	<-ctx.Done()
	return ExitOK, s.Close()
}
