package samcheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// ErrNoCfnLint is wrapped by Check's error when cfn-lint is not on PATH:
// the CloudFormation half of the check was skipped.
var ErrNoCfnLint = errors.New("cfn-lint is not installed (pip install cfn-lint); the CloudFormation checks were skipped")

// cfnLintMatch is one entry of `cfn-lint --format json`.
type cfnLintMatch struct {
	Filename *string
	Level    string
	Location struct {
		Path  []any // keys and array indexes; null for the whole file
		Start struct{ LineNumber int }
	}
	Message string
	Rule    struct {
		ID string `json:"Id"`
	}
}

// lint runs cfn-lint once over all the templates (it starts in seconds,
// and most of that is loading its specs, so one run beats one a file).
// cfn-lint validates against the CloudFormation and SAM specs it ships and
// runs the SAM translator, so it knows every resource type, property and
// reference rule without an allow-list of its own mistakes.
func lint(templates []string) ([]Problem, error) {
	if len(templates) == 0 {
		return nil, nil
	}
	bin, err := exec.LookPath("cfn-lint")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoCfnLint, err)
	}
	cmd := exec.Command(bin, append([]string{"--format", "json", "--"}, templates...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	// The exit status is a bit set of the levels found (2 errors, 4
	// warnings, 8 informational); what counts is the JSON it printed.
	var matches []cfnLintMatch
	if err := json.Unmarshal(stdout.Bytes(), &matches); err != nil {
		return nil, fmt.Errorf("cfn-lint did not run (%v): %w: %s", runErr, err, strings.TrimSpace(stderr.String()))
	}
	problems := make([]Problem, 0, len(matches))
	for _, m := range matches {
		if m.Filename == nil {
			// Not about a template: cfn-lint's own configuration failed.
			return nil, fmt.Errorf("cfn-lint: %s %s", m.Rule.ID, m.Message)
		}
		segs := make([]string, len(m.Location.Path))
		for i, s := range m.Location.Path {
			if f, ok := s.(float64); ok {
				segs[i] = strconv.Itoa(int(f))
			} else {
				segs[i] = fmt.Sprint(s)
			}
		}
		problems = append(problems, Problem{File: *m.Filename, Path: pointer(segs...), Line: m.Location.Start.LineNumber, Rule: m.Rule.ID, Message: m.Message})
	}
	return problems, nil
}
