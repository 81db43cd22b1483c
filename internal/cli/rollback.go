package cli

import (
	"context"
	"io"

	"github.com/pml-sandbox/pml/internal/execution"
)

// rollbackCmd is `pml rollback ID`: the compensations of an execution's
// applied effects run, newest first, as an execution of their own
// (docs/EFFECTS.md, "Undo"), over the same stores `pml run` and `pml
// serve` keep (the suspensions directory, or table, holds the journal).
func rollbackCmd(ctx context.Context, args []string, out, errOut io.Writer) (int, error) {
	fs := newFlagSet("rollback", errOut)
	var sf serviceFlags
	allow := fs.Bool("allow-destructive", false, "let compensating calls that need approval run without asking")
	approval := fs.String("approval", "", `what becomes of a compensating call that needs approval otherwise: "suspend" (the default: the rollback waits, pml resume decides) or "refuse"`)
	dry := fs.Bool("dry-run", false, "say what would run, and run nothing")
	sf.callerAuto = true // the caller is the person at the keyboard
	sf.register(fs)
	fs.Usage = func() {
		io.WriteString(errOut, "usage: pml rollback [flags] EXECUTION_ID\n\n"+
			"Undoes what an execution did: runs the compensations its servers' configurations declare\n"+
			"(compensate) for its applied effects, newest first, each attempted even when one fails,\n"+
			"and prints what became of each effect. An effect compensated once is never undone twice.\n"+
			"Exit code: 0 rolled back (or nothing to do), 1 partly or not rolled back, or refused,\n"+
			"3 the rollback waits for a decision on a compensating call (pml resume its execution).\n\n")
		fs.PrintDefaults()
	}
	id, err := parseID(fs, args)
	if err != nil {
		return ExitUsage, err
	}
	if ferr := execution.CheckApproval(*approval); ferr != nil {
		return ExitUsage, usageError{ferr}
	}
	a, err := sf.open(ctx, logger(errOut))
	if err != nil {
		return ExitFailed, err
	}
	defer a.Close(context.Background())
	svc := a.Executor(nil, nil)
	defer svc.Close(context.Background())
	rb, ferr := svc.Rollback(ctx, execution.RollbackRequest{ExecutionID: id, AllowDestructive: *allow, Approval: *approval, DryRun: *dry,
		Source: execution.SourceCLI})
	if err := a.Service.Flush(context.Background()); err != nil {
		logger(errOut).Warn("trace flush failed", "err", err)
	}
	if ferr != nil {
		_ = writeJSON(out, map[string]any{"execution_id": id, "error": ferr})
		return ExitFailed, nil
	}
	if err := writeJSON(out, rb); err != nil {
		return ExitFailed, err
	}
	switch rb.Status {
	case execution.RolledBack, execution.NothingToRollBack, execution.OutcomePlanned:
		return ExitOK, nil
	case execution.RollingBack:
		return ExitSuspended, nil
	}
	return ExitFailed, nil
}
