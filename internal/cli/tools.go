package cli

import (
	"context"
	"io"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/tsdecl"
)

func toolsCmd(ctx context.Context, args []string, out, errOut io.Writer) (int, error) {
	fs := newFlagSet("tools", errOut)
	var sf serviceFlags
	dts := fs.Bool("dts", false, "print TypeScript declarations of the mcp API instead of JSON")
	query := fs.String("search", "", "rank tools by relevance to this query (with --dts: the declarations of the best 20)")
	var servers listFlag
	fs.Var(&servers, "server", "only this server's tools (repeatable): one server's declarations of a large catalog")
	sf.callerAuto = true // the caller is the person at the keyboard
	sf.register(fs)
	if err := parse(fs, args); err != nil {
		return ExitUsage, err
	}
	a, err := sf.open(ctx, logger(errOut))
	if err != nil {
		return ExitFailed, err
	}
	defer a.Close(context.Background())
	tools := tsdecl.OfServers(a.Service.Catalog(ctx), servers)
	if *query != "" {
		// The evidence of capability runs is read first: this process
		// answers one search and ends.
		a.Ranker.Refresh(ctx)
		hits := a.Ranker.Search(ctx, tools, *query, 20)
		if !*dts {
			return ExitOK, writeJSON(out, hits)
		}
		tools = make([]catalog.Tool, len(hits))
		for i, h := range hits {
			tools[i] = h.Tool
		}
	}
	if *dts {
		_, err = io.WriteString(out, tsdecl.Declarations(a.Ranker.Annotate(ctx, tools)))
		return ExitOK, err
	}
	return ExitOK, writeJSON(out, map[string]any{"tools": tools, "health": a.ServerHealth()})
}
