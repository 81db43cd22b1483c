package cli

import (
	"context"
	"flag"
	"io"
	"os"

	"github.com/pml-sandbox/pml/internal/app"
)

// storeFlags choose where traces go: a file shared by pml commands (the
// default), memory, or a DynamoDB table.
type storeFlags struct {
	store    string
	table    string
	endpoint string
}

func (f *storeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.store, "store", app.StoreFile, "where traces are kept: file ("+app.TracesFile()+"), memory, or dynamodb")
	fs.StringVar(&f.table, "table", os.Getenv(app.EnvTracesTable), "DynamoDB table for --store dynamodb")
	fs.StringVar(&f.endpoint, "endpoint", "", "DynamoDB endpoint (e.g. DynamoDB Local); the table is created there if missing")
}

// traceConfig is the store the flags ask for. Its errors are usage errors.
func (f *storeFlags) traceConfig() (app.TraceConfig, error) {
	keep, err := app.TracesKeep()
	if err != nil {
		return app.TraceConfig{}, usagef("%v", err)
	}
	switch f.store {
	case app.StoreFile:
		return app.TraceConfig{Store: app.StoreFile, File: app.TracesFile(), Keep: keep}, nil
	case app.StoreMemory:
		return app.TraceConfig{Store: app.StoreMemory, Keep: keep}, nil
	case app.StoreDynamo:
		if f.table == "" {
			return app.TraceConfig{}, usagef("--store dynamodb needs --table (or %s)", app.EnvTracesTable)
		}
		return app.TraceConfig{Store: app.StoreDynamo, Table: f.table, Endpoint: f.endpoint}, nil
	}
	return app.TraceConfig{}, usagef("--store must be file, memory or dynamodb, not %q", f.store)
}

func traceCmd(ctx context.Context, args []string, out, errOut io.Writer) (int, error) {
	fs := newFlagSet("trace", errOut)
	var sf storeFlags
	sf.register(fs)
	related := fs.String("related", "", "instead of an execution, list the tools used together with this server:tool")
	fs.Usage = func() {
		io.WriteString(errOut, "usage: pml trace [flags] EXECUTION_ID\n       pml trace [flags] --related server:tool\n\n")
		fs.PrintDefaults()
	}
	if err := parse(fs, args); err != nil {
		return ExitUsage, err
	}
	if *related == "" && fs.NArg() != 1 {
		fs.Usage()
		return ExitUsage, usagef("give one execution id")
	}
	cfg, err := sf.traceConfig()
	if err != nil {
		return ExitUsage, err
	}
	store, err := app.OpenTraces(ctx, cfg, logger(errOut))
	if err != nil {
		return ExitFailed, err
	}
	if *related != "" {
		rel, err := store.RelatedTools(ctx, *related, 20)
		if err != nil {
			return ExitFailed, err
		}
		return ExitOK, writeJSON(out, map[string]any{"tool": *related, "related": rel})
	}
	ex, calls, err := store.GetExecution(ctx, fs.Arg(0))
	if err != nil {
		return ExitFailed, err
	}
	return ExitOK, writeJSON(out, map[string]any{"execution": ex, "calls": calls})
}
