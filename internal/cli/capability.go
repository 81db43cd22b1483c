package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/learn"
)

// capabilityUsage is what pml capability says when it is called wrong.
const capabilityUsage = `usage: pml capability save NAME FILE.js [--description TEXT] [--schema JSON|@FILE] [--pins JSON] [--provenance EX_ID,...]
       pml capability list
       pml capability show NAME[@VERSION]
       pml capability drafts [DRAFT_ID] [--all]
       pml capability publish DRAFT_ID
       pml capability reject DRAFT_ID [--reason TEXT]
       pml capability suggest [--min-runs K] [--limit N] [--publish ID [--name NS:ACTION]] [--store file|memory|dynamodb ...]
       pml capability reindex [--table NAME] [--endpoint URL]

save publishes a new version where the caller decides (the default here: the
caller is the person at the keyboard), else keeps a draft (exit 3) that
publish publishes; --caller-decides off (or PML_CALLER_DECIDES=off) applies
the deployed policy`

func capabilityCmd(ctx context.Context, args []string, out, errOut io.Writer) (int, error) {
	usage := usageError{errors.New(capabilityUsage)}
	if len(args) == 0 {
		return ExitUsage, usage
	}
	switch args[0] {
	case "reindex":
		return reindexCmd(ctx, args[1:], out, errOut)
	case "suggest":
		return suggestCmd(ctx, args[1:], out, errOut)
	}
	fs := newFlagSet("capability "+args[0], errOut)
	callerDecides := fs.String("caller-decides", cmp.Or(os.Getenv(app.EnvCallerDecides), "on"), "may the caller (you, here) publish its own capabilities at once: on or off (default $"+app.EnvCallerDecides+", else on)")
	var (
		desc, schema, pins, provenance, reason *string
		all                                    *bool
	)
	switch args[0] {
	case "save":
		desc = fs.String("description", "", "what the capability does (shown to agents by tools.search)")
		schema = fs.String("schema", "", "JSON Schema of the arguments, inline or @file")
		pins = fs.String("pins", "", `versions of the capabilities the code calls that it runs, as JSON: {"math:sum": 2}`)
		provenance = fs.String("provenance", "", "the execution ids the code came from, comma-separated")
	case "drafts":
		all = fs.Bool("all", false, "closed drafts too (they are kept until they expire)")
	case "reject":
		reason = fs.String("reason", "", "why the draft is rejected (kept with it)")
	case "list", "show", "publish":
	default:
		return ExitUsage, usage
	}
	if err := parse(fs, args[1:]); err != nil {
		return ExitUsage, err
	}
	pos := fs.Args()
	guard, file, err := localGuard(ctx, *callerDecides, errOut)
	if err != nil {
		return ExitFailed, err
	}
	// The person at the keyboard, with the credentials of this machine.
	me := approval.Decider{Channel: execution.ChannelCaller}
	switch args[0] {
	case "save":
		if len(pos) != 2 {
			return ExitUsage, usage
		}
		code, err := scriptSource("", pos[1:])
		if err != nil {
			return ExitUsage, err
		}
		p := capability.Proposal{Name: pos[0], Code: code, Description: *desc}
		if *schema != "" {
			if p.InputSchema, err = jsonFlag("--schema", *schema); err != nil {
				return ExitUsage, err
			}
		}
		if *pins != "" {
			if err := json.Unmarshal([]byte(*pins), &p.Pins); err != nil {
				return ExitUsage, usagef(`--pins is {"namespace:action": version, ...}: %v`, err)
			}
		}
		if *provenance != "" {
			p.Provenance = strings.Split(*provenance, ",")
		}
		o, err := guard.Submit(ctx, me, me.Principal, p)
		if err != nil {
			return ExitFailed, badInput(err)
		}
		return outcome(o, out, errOut)
	case "list":
		if len(pos) != 0 {
			return ExitUsage, usage
		}
		list, err := guard.Registry.List(ctx)
		if err != nil {
			return ExitFailed, err
		}
		for i := range list {
			list[i].Code = "" // list shows what exists; show gives the code
		}
		return ExitOK, writeJSON(out, map[string]any{"capabilities": list, "file": file})
	case "show":
		if len(pos) != 1 {
			return ExitUsage, usage
		}
		name, version, err := capability.ParseRef(pos[0])
		if err != nil {
			return ExitUsage, usageError{err}
		}
		c, err := guard.Registry.Get(ctx, name, version)
		if err != nil {
			return ExitFailed, err
		}
		return ExitOK, writeJSON(out, c)
	case "drafts":
		switch len(pos) {
		case 0:
			drafts, err := guard.Drafts(ctx, me.Principal, *all)
			if err != nil {
				return ExitFailed, err
			}
			for i := range drafts {
				drafts[i].Code = "" // drafts lists; drafts ID gives the code
			}
			return ExitOK, writeJSON(out, map[string]any{"drafts": drafts, "file": file})
		case 1:
			d, err := guard.Draft(ctx, me.Principal, pos[0])
			if err != nil {
				return ExitFailed, badInput(err)
			}
			return ExitOK, writeJSON(out, d)
		}
		return ExitUsage, usage
	case "publish":
		if len(pos) != 1 {
			return ExitUsage, usage
		}
		o, err := guard.PublishDraft(ctx, me, pos[0])
		if err != nil {
			return ExitFailed, badInput(err)
		}
		return outcome(o, out, errOut)
	case "reject":
		if len(pos) != 1 {
			return ExitUsage, usage
		}
		d, err := guard.RejectDraft(ctx, me, pos[0], *reason)
		if err != nil {
			return ExitFailed, badInput(err)
		}
		return ExitOK, writeJSON(out, d)
	}
	return ExitUsage, usage
}

// localGuard is the guard over the local file registry, under the policy
// the environment describes with the caller deciding unless callerDecides
// says off.
func localGuard(ctx context.Context, callerDecides string, errOut io.Writer) (*capability.Guard, string, error) {
	cfg, err := app.ApprovalFromEnv(true)
	if err != nil {
		return nil, "", usageError{err}
	}
	if cfg.Policy.CallerDecides, err = app.OnOff("--caller-decides", callerDecides, true); err != nil {
		return nil, "", usageError{err}
	}
	limits, err := app.DraftLimitsFromEnv()
	if err != nil {
		return nil, "", usageError{err}
	}
	file := app.CapabilitiesFile()
	log := logger(errOut)
	// Publishing is the policy set's decision, as in pml serve: the file
	// PML_POLICY names, else the set the switches generate.
	pc, err := app.PolicyFromEnv()
	if err != nil {
		return nil, "", usageError{err}
	}
	if cfg.Policy, err = app.LoadPolicy(ctx, pc, cfg.Policy, log); err != nil {
		return nil, "", err
	}
	reg, err := app.OpenRegistry(ctx, app.Config{CapabilitiesFile: file}, log)
	if err != nil {
		return nil, "", err
	}
	return &capability.Guard{Registry: reg, Policy: cfg.Policy, DraftLimits: limits}, file, nil
}

// jsonFlag reads a flag's JSON, inline or @file.
func jsonFlag(name, v string) (json.RawMessage, error) {
	raw := []byte(v)
	if p, ok := strings.CutPrefix(v, "@"); ok {
		var err error
		if raw, err = os.ReadFile(p); err != nil {
			return nil, usageError{err}
		}
	}
	if !json.Valid(raw) {
		return nil, usagef("%s is not valid JSON", name)
	}
	return raw, nil
}

// outcome prints a save's or a publication's outcome: exit 0 when a
// version is published (or an equivalent one was), 3 when it waits as a
// draft, its message on stderr.
func outcome(o capability.Outcome, out, errOut io.Writer) (int, error) {
	fmt.Fprintln(errOut, o.Message)
	if err := writeJSON(out, o); err != nil {
		return ExitFailed, err
	}
	if o.Status == capability.OutcomeDraft {
		return ExitSuspended, nil
	}
	return ExitOK, nil
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
	// On the guarded path every save takes: published where the caller
	// decides (the default here), a draft otherwise.
	guard, _, err := localGuard(ctx, "on", errOut)
	if err != nil {
		return ExitFailed, err
	}
	o, err := app.PublishSuggestion(ctx, guard, approval.Decider{Channel: execution.ChannelCaller}, sug)
	if err != nil {
		return ExitFailed, badInput(err)
	}
	return outcome(o, out, errOut)
}
