package cli

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
)

// suspensionFlags choose where suspended executions are kept: a directory
// in the user's data directory by default, so that `pml resume` finds what
// `pml run --approval suspend` left, or a DynamoDB table.
type suspensionFlags struct {
	dir   string
	table string
	ttl   time.Duration
}

func (f *suspensionFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.dir, "suspensions-dir", app.SuspensionsDir(), "where suspended executions are kept")
	fs.StringVar(&f.table, "suspensions-table", os.Getenv(app.EnvSuspTable), "keep suspended executions in this DynamoDB table instead (AWS_ENDPOINT_URL_DYNAMODB points it at DynamoDB Local)")
	fs.DurationVar(&f.ttl, "suspension-ttl", 0, "how long a suspended execution waits for decisions (default $"+app.EnvSuspTTL+", else 24h)")
}

// config is the store the flags ask for. Its errors are usage errors.
func (f *suspensionFlags) config() (app.SuspensionConfig, error) {
	ttl := f.ttl
	if ttl < 0 {
		return app.SuspensionConfig{}, usagef("--suspension-ttl must be positive, not %v", ttl)
	}
	if ttl == 0 {
		var err error
		if ttl, err = app.SuspensionTTL(); err != nil {
			return app.SuspensionConfig{}, usageError{err}
		}
	}
	sttl, smax, err := app.SessionBounds()
	if err != nil {
		return app.SuspensionConfig{}, usageError{err}
	}
	sq, pq, err := app.StoreQuotas()
	if err != nil {
		return app.SuspensionConfig{}, usageError{err}
	}
	cfg := app.SuspensionConfig{Dir: f.dir, TTL: ttl, SessionTTL: sttl, SessionMaxBytes: smax, SessionQuota: sq, SuspendedQuota: pq}
	if f.table != "" {
		cfg.Dir, cfg.Table = "", f.table
	}
	return cfg, nil
}

// callIDs collects call ids from a repeatable flag that also takes
// comma-separated lists (--approve 2 --approve 3, --approve 2,3).
type callIDs []int

func (c *callIDs) String() string {
	s := make([]string, len(*c))
	for i, id := range *c {
		s[i] = strconv.Itoa(id)
	}
	return strings.Join(s, ",")
}

func (c *callIDs) Set(v string) error {
	for _, f := range strings.Split(v, ",") {
		id, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || id < 1 {
			return usagef("a call id is a positive number, as in the pending list, not %q", f)
		}
		*c = append(*c, id)
	}
	return nil
}

// answerFlags collects --answer ID=ANSWERS: the answers to the question a
// call's remote server asked, as {KEY: {"action": "accept", "content": {…}}}
// by the server's keys.
type answerFlags map[int]map[string]json.RawMessage

func (a answerFlags) String() string { return "" }

func (a answerFlags) Set(v string) error {
	idText, answers, ok := strings.Cut(v, "=")
	id, err := strconv.Atoi(strings.TrimSpace(idText))
	if !ok || err != nil || id < 1 {
		return usagef(`--answer is ID=ANSWERS, as in --answer '2={"confirm": {"action": "accept", "content": {"confirmed": true}}}', not %q`, v)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(answers), &m); err != nil || len(m) == 0 {
		return usagef(`--answer %d: the answers are a JSON object of elicitation results by the server's keys, {"KEY": {"action": "accept", "content": {…}}}`, id)
	}
	a[id] = m
	return nil
}

func resumeCmd(ctx context.Context, args []string, out, errOut io.Writer) (int, error) {
	fs := newFlagSet("resume", errOut)
	var (
		sf              serviceFlags
		approve, reject callIDs
		reason          = fs.String("reason", "", "why the calls given to --reject were rejected: the script's error message and the trace carry it")
		detail          = fs.String("call-detail", execution.CallDetailFull, "how much of the calls the output shows: full, summary or none")
	)
	fs.Var(&approve, "approve", "run these pending calls (call ids; repeatable, or comma-separated)")
	fs.Var(&reject, "reject", "refuse these pending calls: the script sees an error with code REJECTED (call ids; repeatable, or comma-separated)")
	answers := answerFlags{}
	fs.Var(answers, "answer", `answer the question a pending call's remote server asked (reason "question"): ID={"KEY": {"action": "accept", "content": {…}}} by the server's keys; repeatable`)
	sf.callerAuto = true // the caller is the person at the keyboard
	sf.register(fs)
	fs.Usage = func() {
		io.WriteString(errOut, "usage: pml resume [flags] EXECUTION_ID --approve ID[,ID…] --reject ID[,ID…] --answer ID=ANSWERS\n\n"+
			"Runs a suspended execution on (one that pml run --approval suspend left, exit code 3)\n"+
			"with decisions on its pending calls. Calls left undecided stay pending.\n\n")
		fs.PrintDefaults()
	}
	execID, err := parseID(fs, args)
	if err != nil {
		return ExitUsage, err
	}
	if len(approve)+len(reject)+len(answers) == 0 {
		return ExitUsage, usagef("decide on at least one pending call: --approve ID, --reject ID or --answer ID=ANSWERS")
	}
	if *reason != "" && len(reject) == 0 {
		return ExitUsage, usagef("--reason is the reason for a rejection: give --reject too")
	}
	if ferr := execution.CheckCallDetail(*detail); ferr != nil {
		return ExitUsage, usageError{ferr}
	}
	rr := execution.ResumeRequest{ExecutionID: execID, CallDetail: *detail, Decisions: map[string]execution.Decision{}}
	for _, id := range approve {
		rr.Decisions[strconv.Itoa(id)] = execution.Decision{Approve: true}
	}
	for _, id := range reject {
		key := strconv.Itoa(id)
		if _, both := rr.Decisions[key]; both {
			return ExitUsage, usagef("call %d is both approved and rejected", id)
		}
		rr.Decisions[key] = execution.Decision{Reason: *reason}
	}
	for id, a := range answers {
		key := strconv.Itoa(id)
		if _, both := rr.Decisions[key]; both {
			return ExitUsage, usagef("call %d is answered and decided otherwise too", id)
		}
		rr.Decisions[key] = execution.Decision{Approve: true, Answers: a}
	}
	if len(*reason) > execution.MaxReasonBytes {
		return ExitUsage, usagef("--reason is at most %d bytes", execution.MaxReasonBytes)
	}

	var resp *execution.Response
	var ferr *fault.Error
	err = withService(ctx, &sf, errOut, func(svc execution.Executor, onEvent func(execution.Event)) {
		rr.OnEvent = onEvent
		resp, ferr = svc.Resume(ctx, rr)
	})
	if err != nil {
		return ExitFailed, err
	}
	if ferr != nil {
		// Unknown, expired, already resumed: what was asked for does not
		// exist (any more), as pml trace of an unknown id, not a usage
		// error; the document says which.
		if err := writeJSON(out, execution.Response{ExecutionID: rr.ExecutionID, Error: ferr}); err != nil {
			return ExitFailed, err
		}
		return ExitFailed, nil
	}
	if err := writeJSON(out, resp); err != nil {
		return ExitFailed, err
	}
	return exitCode(resp), nil
}

// exitCode is what a finished, failed or suspended execution exits with.
func exitCode(resp *execution.Response) int {
	switch {
	case resp.Status == execution.StatusSuspended:
		return ExitSuspended
	case !resp.OK:
		return ExitFailed
	}
	return ExitOK
}
