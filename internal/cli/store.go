package cli

import (
	"context"
	"flag"
	"io"
	"os"
	"time"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/journal"
	"github.com/pml-sandbox/pml/internal/trace"
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
	var jf suspensionFlags // the journal of effects is kept beside the suspensions
	fs.StringVar(&jf.dir, "suspensions-dir", app.SuspensionsDir(), "where suspended executions and the journal of effects are kept")
	fs.StringVar(&jf.table, "suspensions-table", os.Getenv(app.EnvSuspTable), "read the journal of effects from this DynamoDB table instead")
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
	id := fs.Arg(0)
	ex, calls, err := store.GetExecution(ctx, id)
	entries := journalOf(ctx, jf, id, errOut)
	if fault.CodeOf(err) == fault.NotFound && len(entries) > 0 {
		// The trace was lost (its process died before writing it): the
		// journal, written as the effects happened, says what they did.
		doc := map[string]any{"execution": trace.Execution{ID: id, Principal: entries[0].Principal, StartedAt: entries[0].IntendedAt},
			"calls": []trace.Call{}, "trace_missing": true, "effects": journal.Effects(entries, journal.Quiet(entries, time.Now()))}
		return ExitOK, writeJSON(out, doc)
	}
	if err != nil {
		return ExitFailed, err
	}
	doc := map[string]any{"execution": ex, "calls": calls}
	if effects := journal.Effects(entries, ex.Status != trace.StatusSuspended); effects != nil {
		doc["effects"] = effects
		if state := execution.RollbackState(effects); state != "" {
			doc["rollback"] = state
		}
	}
	return ExitOK, writeJSON(out, doc)
}

// journalOf is id's journal of effects where the flags say it is kept,
// none when it cannot be read (a warning says why).
func journalOf(ctx context.Context, f suspensionFlags, id string, errOut io.Writer) []journal.Entry {
	cfg := app.SuspensionConfig{Dir: f.dir, Table: f.table}
	if f.table != "" {
		cfg.Dir = ""
	}
	j, err := app.OpenJournal(ctx, cfg)
	if err == nil && j != nil {
		var entries []journal.Entry
		if entries, err = j.List(ctx, id); err == nil {
			return entries
		}
	}
	if err != nil {
		logger(errOut).WarnContext(ctx, "the journal of effects could not be read", "err", err)
	}
	return nil
}
