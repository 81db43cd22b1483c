package cli

import (
	"context"
	"io"

	"github.com/pml-sandbox/pml/internal/tsdecl"
)

func toolsCmd(ctx context.Context, args []string, out, errOut io.Writer) (int, error) {
	fs := newFlagSet("tools", errOut)
	var sf serviceFlags
	dts := fs.Bool("dts", false, "print TypeScript declarations of the mcp API instead of JSON")
	query := fs.String("search", "", "rank tools by relevance to this query")
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
	tools := a.Service.Catalog(ctx)
	switch {
	case *dts:
		_, err = io.WriteString(out, tsdecl.Declarations(a.Ranker.Annotate(ctx, tools)))
		return ExitOK, err
	case *query != "":
		// The evidence of capability runs is read first: this process
		// answers one search and ends.
		a.Ranker.Refresh(ctx)
		return ExitOK, writeJSON(out, a.Ranker.Search(ctx, tools, *query, 20))
	}
	return ExitOK, writeJSON(out, map[string]any{"tools": tools, "health": a.ServerHealth()})
}
