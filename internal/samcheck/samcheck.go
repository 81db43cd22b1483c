// Package samcheck checks a SAM template offline, because neither the SAM
// CLI nor AWS is reachable from CI. CloudFormation itself (the schema,
// references, conditions, DependsOn, resource types) is cfn-lint's job:
// Check runs it when it is installed and says so when it is not. What
// cfn-lint cannot know is this project's build: that every function's
// handler, runtime, CodeUri, Go main package and `make build-<LogicalId>`
// target exist and agree, which sam build needs and Check checks itself.
package samcheck

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/awslabs/goformation/v7/intrinsics"
)

// Problem is one thing wrong with a template.
type Problem struct {
	// File is the template's path as it was given to Check.
	File string `json:"file"`
	// Path is a JSON pointer into the template (e.g.
	// /Resources/ExecuteFunction/Properties/Handler); "" when the problem
	// is the file as a whole.
	Path string `json:"path"`
	// Line is the 1-based line cfn-lint reported; 0 when unknown.
	Line int `json:"line,omitempty"`
	// Rule is the cfn-lint rule (E3002, W1001, ...) or, for the project's
	// own checks, "pml:" and what is checked (pml:handler, pml:make, ...).
	Rule    string `json:"rule"`
	Message string `json:"message"`
}

// String renders the problem as "file:line: path: [rule] message".
func (p Problem) String() string {
	at := p.File
	if p.Line > 0 {
		at = fmt.Sprintf("%s:%d", at, p.Line)
	}
	if p.Path != "" {
		at += ": " + p.Path
	}
	return at + ": [" + p.Rule + "] " + p.Message
}

// Check returns every problem found in the SAM templates; none means they
// passed. Relative paths in a template (CodeUri) are resolved against the
// template's directory. The error is not about the templates: it says
// which part of the check could not run (errors.Is ErrNoCfnLint when
// cfn-lint is not installed, or make is missing), and the problems of the
// parts that did run are returned with it.
func Check(templates ...string) ([]Problem, error) {
	var problems []Problem
	var readable []string
	for _, path := range templates {
		if _, err := os.Stat(path); err != nil {
			problems = append(problems, Problem{File: path, Rule: "pml:file", Message: err.Error()})
			continue
		}
		readable = append(readable, path)
	}
	lintProblems, lintErr := lint(readable)
	problems = append(problems, lintProblems...)
	var makeErr error
	for _, path := range readable {
		ps, err := checkFunctionsIn(path)
		problems = append(problems, ps...)
		makeErr = cmp.Or(makeErr, err)
	}
	slices.SortFunc(problems, func(a, b Problem) int {
		return cmp.Or(strings.Compare(a.File, b.File), strings.Compare(a.Path, b.Path),
			strings.Compare(a.Rule, b.Rule), strings.Compare(a.Message, b.Message))
	})
	return slices.Compact(problems), errors.Join(lintErr, makeErr)
}

func checkFunctionsIn(path string) ([]Problem, error) {
	t, err := loadFile(path)
	if err != nil {
		return []Problem{{File: path, Rule: "pml:yaml", Message: err.Error()}}, nil
	}
	ps, err := t.checkFunctions()
	for i := range ps {
		ps[i].File = path
	}
	return ps, err
}

// template is a template in long form (intrinsic functions as objects,
// e.g. {"Ref": "X"}), with the sections the checks read picked out.
type template struct {
	dir       string
	resources map[string]any
	globals   map[string]any // Globals.Function
}

// loadFile reads and loads the template at path.
func loadFile(path string) (*template, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	// goformation's intrinsics turn short-form tags (!Ref, !GetAtt ...)
	// into their long form; NoProcess leaves them unevaluated, so a tagged
	// value is never mistaken for the literal it names.
	raw, err := intrinsics.ProcessYAML(data, &intrinsics.ProcessorOptions{NoProcess: true})
	if err != nil {
		return nil, fmt.Errorf("not a valid YAML template: %w", err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("not a template (the document is not a mapping): %w", err)
	}
	t := &template{dir: filepath.Dir(path)}
	t.resources, _ = doc["Resources"].(map[string]any)
	g, _ := doc["Globals"].(map[string]any)
	t.globals, _ = g["Function"].(map[string]any)
	return t, nil
}

func typeOf(r any) string {
	m, _ := r.(map[string]any)
	t, _ := m["Type"].(string)
	return t
}

func propertiesOf(r any) map[string]any {
	m, _ := r.(map[string]any)
	p, _ := m["Properties"].(map[string]any)
	return p
}

// pointer joins JSON pointer segments, escaping each (RFC 6901).
func pointer(segments ...string) string {
	var b strings.Builder
	for _, s := range segments {
		b.WriteString("/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(s))
	}
	return b.String()
}
