package mcpserver

import (
	"cmp"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
)

// minTextBytes is the smallest budget honoured: below it not even the
// status and the markers fit.
const minTextBytes = 1024

// Shares of the budget the parts other than the result may take at most.
const (
	errorShare   = 4 // the error message and stack: 1/4
	pendingShare = 2 // a suspension's pending calls and how to resume: 1/2
	callsShare   = 8 // the call summary: 1/8
	logsShare    = 4 // console output, when the result needs the room: 1/4
)

// modelText renders an execution for a model, within budget bytes: a
// status line, the error, the result (cut with a marker saying how much
// was cut), a call summary instead of the records, and the console output,
// capped. The whole document goes in structuredContent beside it.
// callerDecides is whether the model's side may approve what waits.
func modelText(resp *execution.Response, budget int, callerDecides bool) string {
	budget = max(budget, minTextBytes)
	var head strings.Builder
	if resp.Suspended() {
		head.WriteString(pendingText(resp, budget/pendingShare, callerDecides))
	} else if resp.OK {
		fmt.Fprintf(&head, "ok (execution %s, %.1f ms)\n", resp.ExecutionID, resp.DurationMS)
	} else {
		code := "INTERNAL"
		if resp.Error != nil {
			code = string(resp.Error.Code)
		}
		fmt.Fprintf(&head, "failed: %s (execution %s, %.1f ms)\n", code, resp.ExecutionID, resp.DurationMS)
	}
	head.WriteString(cut(sessionText(resp.Session), budget/errorShare, "of the session's summary"))
	if e := resp.Error; e != nil {
		var b strings.Builder
		b.WriteString("error: ")
		if e.Tool != "" {
			b.WriteString(e.Tool + ": ")
		}
		b.WriteString(e.Message + "\n")
		if e.Stack != "" {
			b.WriteString(strings.TrimRight(e.Stack, "\n") + "\n")
		}
		if e.Details != nil {
			if d, err := json.Marshal(e.Details); err == nil {
				b.WriteString("details: " + string(d) + "\n")
			}
		}
		head.WriteString(cut(b.String(), budget/errorShare, "of the error"))
	}
	calls := cut(callsText(resp), budget/callsShare, "of the call summary")
	logs := logsText(resp)

	const resultLabel = "result:\n"
	result, hasResult := string(resp.Result), resp.OK || len(resp.Result) > 0 && string(resp.Result) != "null"
	room := budget - head.Len() - len(calls)
	if hasResult {
		room -= len(resultLabel) + 1 // and its newline
	} else {
		result = ""
	}
	// The result comes first: the console gets what the result leaves,
	// and at least its share when the result needs cutting.
	logs = cut(logs, max(room-len(result), room/logsShare), "of the console output")
	if hasResult {
		result = resultLabel + cut(result, room-len(logs), "of the result") + "\n"
	}
	return head.String() + result + calls + logs
}

// pendingText tells a model which calls wait for approval and what it may
// do about them, in about budget bytes: the status line and the
// instructions always, then the calls in what they leave, each call's
// arguments with an equal share of it. Where the caller does not decide
// (callerDecides false: the deployment's policy), the model is told who
// does, and that it may only reject.
func pendingText(resp *execution.Response, budget int, callerDecides bool) string {
	n := len(resp.Pending)
	noun := "calls await"
	if n == 1 {
		noun = "call awaits"
	}
	status := fmt.Sprintf("suspended: %d %s approval (execution %s, %.1f ms so far; it waits until %s)\n",
		n, noun, resp.ExecutionID, resp.DurationMS, resp.ExpiresAt.UTC().Format(time.RFC3339))
	example := "2"
	if n > 0 {
		example = strconv.Itoa(resp.Pending[0].CallID)
	}
	how := fmt.Sprintf("No pending call has run. Ask the user, then call resume_execution "+
		`{"execution_id": %q, "decisions": {%q: "approve"}}`+
		`: per call "approve", "reject" or {"decision": "reject", "reason": "…"}. `+
		"A rejected call throws REJECTED in the script; undecided calls stay pending. "+
		`To stop the whole execution instead: cancel_execution {"execution_id": %q}.\n`, resp.ExecutionID, example, resp.ExecutionID)
	if !callerDecides {
		how = fmt.Sprintf("No pending call has run, and approving them is not yours to do: %s decides (tell the user execution %s waits). "+
			`You may reject a call with resume_execution {"execution_id": %q, "decisions": {%q: "reject"}}; `+
			"a rejected call throws REJECTED in the script, and undecided calls stay pending; "+
			`cancel_execution {"execution_id": %q} stops the whole execution.`+"\n", cmp.Or(resp.Approvers, "a person"), resp.ExecutionID, resp.ExecutionID, example, resp.ExecutionID)
	}
	for _, p := range resp.Pending {
		if p.Reason == execution.PendingQuestion {
			how = "The calls whose server asked a question were sent, and go on only with the user's answer; no other pending call has run. " + how
			break
		}
	}
	if resp.ApprovalURL != "" {
		// Where the person decides: a page they sign in to, which no
		// answer of the model's side stands in for.
		how += "A person reviews and decides these calls on the approval page: " + resp.ApprovalURL + " (tell the user to open it).\n"
	}
	room := budget - len(status) - len(how)
	argsRoom := max(room/max(n, 1)-32, 64)
	list := func(args func(json.RawMessage) string) string {
		var b strings.Builder
		for _, p := range resp.Pending {
			fmt.Fprintf(&b, "#%d %s:%s", p.CallID, p.Server, p.Tool)
			if args != nil {
				b.WriteString(" " + args(p.Args))
			}
			b.WriteString("\n")
			if p.Reason == execution.PendingQuestion {
				// The call ran, and its server asks the user something: the
				// user's answer, not an approval, lets it go on.
				fmt.Fprintf(&b, "  the server asked the user (answer with {\"decision\": \"answer\", \"answers\": {KEY: {\"action\": \"accept\", \"content\": {…}}}}, or reject): %s\n",
					cut(questionsJSON(p.Questions), argsRoom, fmt.Sprintf("of call #%d's questions", p.CallID)))
			}
		}
		return b.String()
	}
	// Every key of every call, each value cut on its own (argsText); when
	// that does not fit, the least of each value; when even that does not,
	// no arguments, said plainly: which calls wait matters more than their
	// arguments, and a call must never look like it has fewer of them.
	calls := list(func(a json.RawMessage) string { return argsText(a, argsRoom) })
	if len(calls) > room {
		calls = list(briefArgs)
	}
	if len(calls) > room {
		calls = "(no arguments shown here: structuredContent has them)\n" + list(nil)
	}
	return status + cut(calls, max(room, 0), "of the pending calls") + how
}

// refusalText is a refused resume for a model: nothing ran.
func refusalText(id string, e *fault.Error) string { return refusedText("resume", id, e) }

// refusedText is a refused request (what: resume, cancel) for a model.
func refusedText(what, id string, e *fault.Error) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s refused: %s (execution %s); nothing ran\nerror: %s\n", what, e.Code, id, e.Message)
	if e.Details != nil {
		if d, err := json.Marshal(e.Details); err == nil {
			b.WriteString("details: " + string(d) + "\n")
		}
	}
	switch {
	case what != "resume":
	case e.Code == fault.Conflict:
		b.WriteString("The execution is not waiting for decisions any more: do not retry.\n")
	case e.Code == fault.Expired:
		b.WriteString("It waited past its expiry and can no longer be resumed: run the code again if it is still needed.\n")
	case e.Code == fault.ResumeIncompatible:
		b.WriteString("Another version of the sandbox suspended it; this one cannot resume it.\n")
	}
	return b.String()
}

// callsText summarises the calls in a few lines.
func callsText(resp *execution.Response) string {
	s := resp.CallSummary
	if s == nil {
		if resp.Calls == nil {
			return "" // the request asked for nothing about calls
		}
		s = execution.Summarize(resp.ExecutionID, resp.Calls)
	}
	if s.Total == 0 {
		return "calls: none\n"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "calls: %d", s.Total)
	if s.Failed > 0 {
		fmt.Fprintf(&b, ", %d failed", s.Failed)
	}
	b.WriteString(" —")
	for i, t := range s.ByTool {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, " %s ×%d", t.Tool, t.Calls)
		if t.Failed > 0 {
			fmt.Fprintf(&b, " (%d failed)", t.Failed)
		}
	}
	b.WriteString("\n")
	for _, f := range s.Failures {
		fmt.Fprintf(&b, "failed call #%d %s: %s", f.CallID, f.Tool, f.ErrorCode)
		if f.ExecutionID != "" {
			fmt.Fprintf(&b, " (in %s)", f.ExecutionID)
		}
		if f.Count > 1 {
			fmt.Fprintf(&b, " ×%d", f.Count)
		}
		b.WriteString("\n")
	}
	if s.FailuresOmitted > 0 {
		fmt.Fprintf(&b, "… and %d more failed calls\n", s.FailuresOmitted)
	}
	return b.String()
}

// logsText is the console output, one line per entry.
func logsText(resp *execution.Response) string {
	if len(resp.Logs) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "console (%d lines):\n", len(resp.Logs))
	for _, l := range resp.Logs {
		fmt.Fprintf(&b, "[%s] %s\n", l.Level, l.Message)
	}
	return b.String()
}

// cut returns s if it fits in n bytes, else its beginning (whole
// characters) and a marker line saying how much of what was cut.
func cut(s string, n int, what string) string {
	if len(s) <= n {
		return s
	}
	marker := func(kept int) string {
		return fmt.Sprintf("\n[… %d of %d bytes %s cut; structuredContent has all of it]\n", len(s)-kept, len(s), what)
	}
	kept := truncateUTF8(s, max(n-len(marker(0)), 0)) // the longest marker: nothing kept
	return kept + marker(len(kept))
}
