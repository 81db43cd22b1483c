package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/learn"
)

func capabilityCmd(ctx context.Context, args []string, out, errOut io.Writer) (int, error) {
	usage := usagef("usage: pml capability save NAME FILE.js [--description TEXT] [--schema JSON|@FILE]\n       pml capability list\n       pml capability show NAME[@VERSION]\n       pml capability suggest [--min-runs K] [--limit N] [--publish ID [--name NS:ACTION]] [--store file|memory|dynamodb ...]\n       pml capability reindex [--table NAME] [--endpoint URL]")
	if len(args) == 0 {
		return ExitUsage, usage
	}
	switch args[0] {
	case "reindex":
		return reindexCmd(ctx, args[1:], out, errOut)
	case "suggest":
		return suggestCmd(ctx, args[1:], out, errOut)
	}
	file := app.CapabilitiesFile()
	reg, err := app.OpenRegistry(ctx, app.Config{CapabilitiesFile: file}, logger(errOut))
	if err != nil {
		return ExitFailed, err
	}
	switch args[0] {
	case "save":
		fs := newFlagSet("capability save", errOut)
		desc := fs.String("description", "", "what the capability does (shown to agents by tools.search)")
		schema := fs.String("schema", "", "JSON Schema of the arguments, inline or @file")
		if err := parse(fs, args[1:]); err != nil {
			return ExitUsage, err
		}
		pos := fs.Args()
		if len(pos) != 2 {
			return ExitUsage, usage
		}
		code, err := scriptSource("", pos[1:])
		if err != nil {
			return ExitUsage, err
		}
		c := capability.Capability{Name: pos[0], Code: code, Description: *desc}
		if *schema != "" {
			raw := []byte(*schema)
			if p, ok := strings.CutPrefix(*schema, "@"); ok {
				if raw, err = os.ReadFile(p); err != nil {
					return ExitUsage, usageError{err}
				}
			}
			if !json.Valid(raw) {
				return ExitUsage, usagef("--schema is not valid JSON")
			}
			c.InputSchema = raw
		}
		saved, err := reg.Save(ctx, c)
		if err != nil {
			return ExitFailed, badInput(err)
		}
		return ExitOK, writeJSON(out, saved)
	case "list":
		list, err := reg.List(ctx)
		if err != nil {
			return ExitFailed, err
		}
		for i := range list {
			list[i].Code = "" // list shows what exists; show gives the code
		}
		return ExitOK, writeJSON(out, map[string]any{"capabilities": list, "file": file})
	case "show":
		if len(args) != 2 {
			return ExitUsage, usage
		}
		name, version, err := capability.ParseRef(args[1])
		if err != nil {
			return ExitUsage, usageError{err}
		}
		c, err := reg.Get(ctx, name, version)
		if err != nil {
			return ExitFailed, err
		}
		return ExitOK, writeJSON(out, c)
	}
	return ExitUsage, usage
}

// reindexCmd brings the capabilities an earlier release saved in a
// DynamoDB registry into discovery (capability.DynamoRegistry.Reindex).
func reindexCmd(ctx context.Context, args []string, out, errOut io.Writer) (int, error) {
	fs := newFlagSet("capability reindex", errOut)
	table := fs.String("table", os.Getenv(app.EnvCapTable), "the DynamoDB capabilities table (default $"+app.EnvCapTable+")")
	endpoint := fs.String("endpoint", "", "DynamoDB endpoint URL (DynamoDB Local); default AWS's, from the AWS environment")
	fs.Usage = func() {
		io.WriteString(errOut, "usage: pml capability reindex [--table NAME] [--endpoint URL]\n\n"+
			"Once after upgrading a deployment whose capabilities an earlier release saved:\n"+
			"gives them the keys of the discovery index and their namespace items, so\n"+
			"tools.search, /tools and mcp[ns] find them (by name they are callable anyway).\n"+
			"Scans the table once; safe to run again and beside saves.\n\n")
		fs.PrintDefaults()
	}
	if err := parse(fs, args); err != nil {
		return ExitUsage, err
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return ExitUsage, usagef("reindex takes no arguments")
	}
	if *table == "" {
		return ExitUsage, usagef("reindex is for a DynamoDB registry: give --table or set %s (the file registry has no index to rebuild)", app.EnvCapTable)
	}
	done, err := app.ReindexCapabilities(ctx, *table, *endpoint, func(r capability.Reindexed) {
		fmt.Fprintf(errOut, "reindex: %d indexed, %d already current\n", r.Indexed, r.Current)
	})
	if err != nil {
		return ExitFailed, err
	}
	return ExitOK, writeJSON(out, done)
}

// badInput marks a refused save as a usage error when what was refused is
// what the user gave (a bad name, code that does not parse, a bad schema),
// and leaves any other failure (the registry's) alone.
func badInput(err error) error {
	switch fault.CodeOf(err) {
	case fault.InvalidRequest, fault.ScriptError:
		return usageError{err}
	}
	return err
}

// suggestCmd lists what the learning loop suggests keeping (the programs
// run here that succeeded at least K times), or publishes one.
func suggestCmd(ctx context.Context, args []string, out, errOut io.Writer) (int, error) {
	fs := newFlagSet("capability suggest", errOut)
	var sf storeFlags
	sf.register(fs)
	minRuns := fs.Int64("min-runs", 0, "successful runs before a program is suggested (default $"+app.EnvSuggestMinRuns+", else 3)")
	limit := fs.Int("limit", 20, "suggestions to list, at most 100")
	publish := fs.String("publish", "", "publish the suggestion with this id as a capability")
	name := fs.String("name", "", "with --publish: the capability's name, instead of the proposed one")
	fs.Usage = func() {
		io.WriteString(errOut, "usage: pml capability suggest [flags]\n\n"+
			"Programs run here that succeeded at least K times and called tools, proposed as\n"+
			"capabilities: a name, an input schema from the args they read and the literals\n"+
			"that varied between runs, and their code reading those from args.\n\n")
		fs.PrintDefaults()
	}
	if err := parse(fs, args); err != nil {
		return ExitUsage, err
	}
	if fs.NArg() != 0 || (*name != "" && *publish == "") {
		fs.Usage()
		return ExitUsage, usagef("suggest takes no arguments; --name goes with --publish")
	}
	learning, err := app.LearnFromEnv()
	if err != nil {
		return ExitUsage, usageError{err}
	}
	if *minRuns <= 0 {
		*minRuns = learning.MinSuccesses
	}
	cfg, err := sf.traceConfig()
	if err != nil {
		return ExitUsage, err
	}
	traces, err := app.OpenTraces(ctx, cfg, logger(errOut))
	if err != nil {
		return ExitFailed, err
	}
	store := app.LearnStore(traces)
	// Locally there is no sign-in: the person at the keyboard is the
	// caller of every run, the empty principal.
	viewer := learn.Viewer{}
	if *publish == "" {
		list, err := learn.Suggestions(ctx, store, learn.Query{Viewer: viewer, MinSuccesses: *minRuns, Limit: *limit})
		if err != nil {
			return ExitFailed, err
		}
		return ExitOK, writeJSON(out, map[string]any{"suggestions": list})
	}
	sug, err := learn.Proposal(ctx, store, *publish, viewer, *name, *minRuns)
	if err != nil {
		return ExitFailed, badInput(err)
	}
	reg, err := app.OpenRegistry(ctx, app.Config{CapabilitiesFile: app.CapabilitiesFile()}, logger(errOut))
	if err != nil {
		return ExitFailed, err
	}
	saved, err := app.PublishSuggestion(ctx, reg, sug)
	if err != nil {
		return ExitFailed, badInput(err)
	}
	return ExitOK, writeJSON(out, saved)
}
