package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/pml-sandbox/pml/internal/execution"
)

// Asynchronous executions from the command line. `pml run --async` records
// the execution (in the runs beside the suspensions directory, or table),
// starts a detached pml process to run it (`pml run --start-run ID` with
// the same service flags), prints its document — status running, and its
// id — and exits at once; `pml status ID` reads its document (--wait until
// it ends, --cancel to stop it). What serves the run is the same
// internal/runs service pml serve and the execute function use: the run is
// claimed once, a cancel is polled between steps.

// runAsync starts req (async) and prints its first document.
func runAsync(ctx context.Context, sf *serviceFlags, req execution.Request, args []string, out, errOut io.Writer) (int, error) {
	a, err := sf.open(ctx, logger(errOut))
	if err != nil {
		return ExitFailed, err
	}
	defer a.Close(context.Background())
	svc := a.Executor(nil, detachedLauncher(args))
	defer svc.Close(context.Background())
	resp := svc.Execute(ctx, req)
	if err := writeJSON(out, resp); err != nil {
		return ExitFailed, err
	}
	if !resp.Running() {
		return ExitFailed, nil
	}
	return ExitOK, nil
}

// detachedLauncher starts `pml run --start-run ID` with the flags of this
// command (args, less --async and the script), in a session of its own so
// that it outlives this process and its terminal; its log goes to a file
// in the temporary directory.
func detachedLauncher(args []string) func(ctx context.Context, id string) error {
	return func(_ context.Context, id string) error {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		child := []string{"run"}
		for _, a := range args {
			if strings.TrimLeft(a, "-") == "async" || strings.HasPrefix(strings.TrimLeft(a, "-"), "async=") {
				continue
			}
			child = append(child, a)
		}
		child = append(child, "--start-run", id)
		logPath := filepath.Join(os.TempDir(), "pml-run-"+id+".log")
		log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		defer log.Close()
		cmd := exec.Command(self, child...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, log, log
		detach(cmd)
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("starting the run's process: %w", err)
		}
		// Not waited for: it is its own process now.
		return cmd.Process.Release()
	}
}

// runQueued is `pml run --start-run ID`: the detached process that runs a
// queued asynchronous execution.
func runQueued(ctx context.Context, sf *serviceFlags, id string, errOut io.Writer) (int, error) {
	log := logger(errOut)
	a, err := sf.open(ctx, log)
	if err != nil {
		return ExitFailed, err
	}
	defer a.Close(context.Background())
	svc := a.Executor(nil, nil)
	defer svc.Close(context.Background())
	if err := svc.Run(ctx, id); err != nil {
		return ExitFailed, err
	}
	if err := a.Service.Flush(context.Background()); err != nil {
		log.Warn("trace flush failed", "err", err)
	}
	return ExitOK, nil
}

func statusCmd(ctx context.Context, args []string, out, errOut io.Writer) (int, error) {
	fs := newFlagSet("status", errOut)
	var sf serviceFlags
	wait := fs.Bool("wait", false, "wait until the execution is not running any more (suspended, or ended)")
	cancel := fs.Bool("cancel", false, "cancel it: a queued or suspended one at once, a running one at its next step")
	sf.callerAuto = true
	sf.register(fs)
	fs.Usage = func() {
		io.WriteString(errOut, "usage: pml status [flags] EXECUTION_ID\n\n"+
			"Shows an asynchronous execution's document (one pml run --async started):\n"+
			"status running, suspended (with its pending calls), completed, cancelled or failed.\n"+
			"Exit code: 0 running or completed ok, 1 failed or cancelled, 3 suspended.\n\n")
		fs.PrintDefaults()
	}
	id, err := parseID(fs, args)
	if err != nil {
		return ExitUsage, err
	}
	a, err := sf.open(ctx, logger(errOut))
	if err != nil {
		return ExitFailed, err
	}
	defer a.Close(context.Background())
	svc := a.Executor(nil, nil)
	defer svc.Close(context.Background())
	if *cancel {
		// What the cancel did shows in the document read next.
		if _, fe := svc.Cancel(ctx, execution.CancelRequest{ExecutionID: id}); fe != nil {
			_ = writeJSON(out, execution.Response{ExecutionID: id, Error: fe})
			return ExitFailed, nil
		}
	}
	var doc *execution.Response
	for {
		d, fe := svc.Status(ctx, id, "")
		if fe != nil {
			_ = writeJSON(out, execution.Response{ExecutionID: id, Error: fe})
			return ExitFailed, nil
		}
		doc = d
		if !*wait || !doc.Running() {
			break
		}
		select {
		case <-ctx.Done():
			return ExitFailed, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	if err := writeJSON(out, doc); err != nil {
		return ExitFailed, err
	}
	if doc.Running() {
		return ExitOK, nil
	}
	return exitCode(doc), nil
}
