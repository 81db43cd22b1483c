package cli

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/term"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/elicit"
	"github.com/pml-sandbox/pml/internal/execution"
)

// inlineAnswers says who answers a remote MCP server's question while its
// call is in flight in pml run (internal/elicit): the --answers document
// when there is one, else the person at the terminal when standard input
// and the command's error output both are one, else nobody (a question
// then fails its call, or parks it with --approval suspend). The answer
// is the caller's, weighed as an approval: only where the policy lets
// the caller answer (approval.Policy.MayAnswer; on for pml run unless
// --caller-decides off). It returns what to close when the run ends.
func (f *serviceFlags) inlineAnswers(path string, rest []string, errOut io.Writer) (func(), error) {
	appr, err := f.approvalConfig()
	if err != nil {
		return nil, err
	}
	mayAnswer := appr.Policy.MayAnswer(approval.Decider{Channel: execution.ChannelCaller}, "")
	switch {
	case path != "":
		if !mayAnswer {
			return nil, usagef("--answers: with --caller-decides off the caller may not answer a server's question (it is weighed as an approval)")
		}
		var data []byte
		if path == "-" {
			if len(rest) == 1 && rest[0] == "-" {
				return nil, usagef("--answers - and the script both on standard input: put one of them in a file")
			}
			data, err = io.ReadAll(os.Stdin)
		} else {
			data, err = os.ReadFile(path)
		}
		if err != nil {
			return nil, usageError{fmt.Errorf("--answers: %w", err)}
		}
		s, err := elicit.ParseScript(data, errOut)
		if err != nil {
			return nil, usagef("--answers: %v", err)
		}
		f.answerer = s
		return func() {}, nil
	case mayAnswer && isTerminal(os.Stdin) && isTerminal(errOut):
		f.progress = &progressSlot{}
		t := elicit.NewTerminal(os.Stdin, errOut, f.progress.hold)
		f.answerer = t
		return t.Close, nil
	}
	return func() {}, nil
}

// isTerminal reports whether v is a terminal.
func isTerminal(v any) bool {
	f, ok := v.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
