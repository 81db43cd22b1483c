package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/execution"
)

func runCmd(ctx context.Context, args []string, out, errOut io.Writer) (int, error) {
	fs := newFlagSet("run", errOut)
	var (
		sf       serviceFlags
		code     = fs.String("e", "", "the script to run (instead of a FILE)")
		argsJSON = fs.String("args", "", "JSON value bound to `args` in the script")
		timeout  = fs.Duration("timeout", 30*time.Second, "execution deadline")
		tools    = fs.String("tools", "", "narrow the tool set: comma-separated server:tool patterns, * matching any run of characters (kv:*, fs:read_*)")
		destruct = fs.Bool("allow-destructive", false, "let tools annotated destructiveHint run")
		parseTxt = fs.Bool("parse-json-text", false, "parse text tool results as JSON even without an output schema")
		lang     = fs.String("lang", "", "js or ts (default: ts for a .ts FILE; else JavaScript, then TypeScript if it does not parse)")
		detail   = fs.String("call-detail", execution.CallDetailFull, "how much of the calls the output shows: full, summary or none")
		approval = fs.String("approval", execution.ApprovalRefuse, "what a call that needs approval (destructive, or in a server's require_approval) does without --allow-destructive: refuse (fail FORBIDDEN) or suspend (wait for pml resume; exit 3)")
		async    = fs.Bool("async", false, "start the script and print its document (status running, its id) at once: it runs on in a process of its own; pml status ID shows it")
		startRun = fs.String("start-run", "", "run the queued asynchronous execution ID (what pml run --async starts; not for use by hand)")
		session  = fs.String("session", "", "run in a session: new starts one (the output names it), an ss_… id continues it; its top-level declarations and globals live on between runs (pml session list|show|rm)")
		sessTTL  = fs.Duration("session-ttl", 0, "with --session new: how long the session lives without a run (default $"+app.EnvSessionTTL+", else 1h; at most 24h)")
		answers  = fs.String("answers", "", "answer remote MCP servers' questions from this JSON file (- for standard input) instead of at the terminal: "+
			`an array of answers in the order asked, or an object of them keyed by server:tool; an answer is "accept" (the form's defaults), "decline", "cancel" or {"action": "accept", "content": {…}}`)
	)
	var pins pinFlag
	fs.Var(&pins, "pin", "run this version of a capability wherever the script, or a capability it calls, calls it: NAME@VERSION (math:sum@2); repeatable, or comma-separated")
	sf.callerAuto = true // the caller is the person at the keyboard
	sf.register(fs)
	fs.Usage = func() {
		io.WriteString(errOut, "usage: pml run [flags] FILE.js|FILE.ts\n       pml run [flags] -e 'return 1 + 1'\n\n")
		fs.PrintDefaults()
	}
	if err := parse(fs, args); err != nil {
		return ExitUsage, err
	}
	if *startRun != "" {
		return runQueued(ctx, &sf, *startRun, errOut)
	}
	src, err := scriptSource(*code, fs.Args())
	if err != nil {
		return ExitUsage, err
	}
	if *lang == "" && fs.NArg() == 1 && strings.EqualFold(filepath.Ext(fs.Arg(0)), ".ts") {
		*lang = execution.LangTS
	}
	if *argsJSON != "" && !json.Valid([]byte(*argsJSON)) {
		return ExitUsage, usagef("--args is not valid JSON: %s", *argsJSON)
	}
	req := execution.Request{Code: src, Lang: *lang, CallDetail: *detail, TimeoutMS: int(timeout.Milliseconds()),
		Approval: *approval, AllowDestructive: *destruct, ParseJSONText: *parseTxt, Source: execution.SourceCLI}
	if *argsJSON != "" {
		req.Args = json.RawMessage(*argsJSON)
	}
	if len(pins) > 0 {
		req.Capabilities = pins
	}
	if *tools != "" {
		for _, p := range strings.Split(*tools, ",") {
			req.Tools = append(req.Tools, strings.TrimSpace(p))
		}
	}
	if *session == execution.SessionNew {
		req.Session = execution.SessionNew
	} else {
		req.SessionID = *session
	}
	if *sessTTL != 0 {
		if *sessTTL < time.Second {
			return ExitUsage, usagef("--session-ttl must be at least 1s, not %v", *sessTTL)
		}
		req.SessionTTLS = int(sessTTL.Seconds())
	}
	// The flags make a request like any front end's, checked by the same
	// rules: a bad value is a usage error.
	if ferr := req.Validate(); ferr != nil {
		return ExitUsage, usageError{ferr}
	}
	if *async {
		if *answers != "" {
			return ExitUsage, usagef("--answers: an asynchronous run has nobody to answer for; run it without --async")
		}
		req.Async = true
		return runAsync(ctx, &sf, req, args, out, errOut)
	}
	closeAsker, err := sf.inlineAnswers(*answers, fs.Args(), errOut)
	if err != nil {
		return ExitUsage, err
	}
	defer closeAsker()

	var resp *execution.Response
	err = withService(ctx, &sf, errOut, func(svc execution.Executor, onEvent func(execution.Event)) {
		req.OnEvent = onEvent
		resp = svc.Execute(ctx, req)
	})
	if err != nil {
		return ExitFailed, err
	}
	if err := writeJSON(out, resp); err != nil {
		return ExitFailed, err
	}
	return exitCode(resp), nil
}

// withService opens the service the flags ask for, runs do with it and the
// live progress display (nil when stderr is not a terminal: never in a
// pipe), then flushes the traces and closes the service.
func withService(ctx context.Context, sf *serviceFlags, errOut io.Writer, do func(execution.Executor, func(execution.Event))) error {
	log := logger(errOut)
	// The start never ends here: the process exits after its one
	// execution, and turning the collector back on then would only run a
	// cycle over what exit frees. startgc's fallback brings it back for a
	// run that lasts, and its memory limit bounds the heap until then.
	sf.oneShot = true
	a, err := sf.open(ctx, log)
	if err != nil {
		return err
	}
	defer a.Close(context.Background())
	live := startProgress(errOut)
	var onEvent func(execution.Event)
	if live != nil {
		onEvent = live.event
	}
	if sf.progress != nil {
		sf.progress.set(live)
	}
	do(a.Service, onEvent)
	if sf.progress != nil {
		sf.progress.set(nil)
	}
	live.finish()
	if err := a.Service.Flush(context.Background()); err != nil {
		log.Warn("trace flush failed", "err", err)
	}
	return nil
}

// scriptSource returns the code from -e or from the one FILE argument
// ("-" reads standard input).
func scriptSource(e string, rest []string) (string, error) {
	switch {
	case e != "" && len(rest) > 0:
		return "", usagef("give either -e CODE or a FILE, not both")
	case e != "":
		return e, nil
	case len(rest) == 0:
		return "", usagef("nothing to run: give a FILE or -e CODE")
	case len(rest) > 1:
		return "", usagef("one FILE at a time (got %d)", len(rest))
	}
	var b []byte
	var err error
	if rest[0] == "-" {
		b, err = io.ReadAll(os.Stdin)
	} else {
		b, err = os.ReadFile(rest[0])
	}
	if err != nil {
		return "", usageError{err}
	}
	return string(b), nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// pinFlag collects --pin NAME@VERSION (repeatable, or comma-separated).
type pinFlag map[string]int

func (p *pinFlag) String() string {
	var out []string
	for name, v := range *p {
		out = append(out, fmt.Sprintf("%s@%d", name, v))
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

func (p *pinFlag) Set(v string) error {
	if *p == nil {
		*p = pinFlag{}
	}
	for _, ref := range strings.Split(v, ",") {
		name, version, err := capability.ParseRef(strings.TrimSpace(ref))
		if err != nil || version == 0 {
			return usagef("--pin is NAME@VERSION (math:sum@2), not %q", ref)
		}
		(*p)[name] = version
	}
	return nil
}
