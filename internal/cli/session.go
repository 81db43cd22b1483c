package cli

import (
	"context"
	"io"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/suspend"
)

// sessionCmd reads and ends the sessions pml run --session keeps, from
// their store alone: no sandbox starts.
//
//	pml session list       the sessions, newest first (the directory store)
//	pml session show ID    one session: its executions, names, size, expiry
//	pml session rm ID      delete it and its state
func sessionCmd(ctx context.Context, args []string, out, errOut io.Writer) (int, error) {
	fs := newFlagSet("session", errOut)
	var sf suspensionFlags
	sf.register(fs)
	fs.Usage = func() {
		io.WriteString(errOut, "usage: pml session list\n       pml session show ID\n       pml session rm ID\n\n")
		fs.PrintDefaults()
	}
	if err := parse(fs, args); err != nil {
		return ExitUsage, err
	}
	cfg, err := sf.config()
	if err != nil {
		return ExitUsage, err
	}
	store, err := app.OpenSessions(ctx, cfg)
	if err != nil {
		return ExitFailed, err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fs.Usage()
		return ExitUsage, usagef("pml session: list, show ID or rm ID")
	}
	switch verb := rest[0]; {
	case verb == "list" && len(rest) == 1:
		lister, ok := store.(suspend.SessionLister)
		if !ok || cfg.Table != "" {
			return ExitUsage, usagef("pml session list reads the directory store; with --suspensions-table, show a session by its id")
		}
		list, err := lister.List(ctx, "")
		if err != nil {
			return ExitFailed, err
		}
		infos := make([]*execution.SessionInfo, 0, len(list))
		for _, s := range list {
			info, ferr := executor.SessionInfoOf(s)
			if ferr != nil {
				return ExitFailed, ferr
			}
			infos = append(infos, info)
		}
		return ExitOK, writeJSON(out, infos)
	case verb == "show" && len(rest) == 2:
		info, ferr := executor.DescribeSession(ctx, store, execution.SessionRequest{SessionID: rest[1]})
		if ferr != nil {
			return ExitFailed, ferr
		}
		return ExitOK, writeJSON(out, info)
	case verb == "rm" && len(rest) == 2:
		if ferr := executor.EndSession(ctx, store, execution.SessionRequest{SessionID: rest[1]}); ferr != nil {
			return ExitFailed, ferr
		}
		return ExitOK, writeJSON(out, map[string]any{"session_id": rest[1], "deleted": true})
	}
	fs.Usage()
	return ExitUsage, usagef("pml session: list, show ID or rm ID, not %q", rest)
}
