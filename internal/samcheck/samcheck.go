// Package samcheck checks a SAM template offline, because neither the SAM
// CLI nor AWS is reachable from CI. Check parses the template with
// goformation, validates it against goformation's bundled SAM JSON Schema
// (allowing only the schema's known false positives, each listed with its
// reason), checks that every reference (Ref, Fn::GetAtt, Fn::Sub variables,
// conditions, DependsOn) resolves, that references to conditional resources
// are guarded by the same condition, and that every function's handler, Go
// main package, Makefile target and build recipe exist and agree.
package samcheck

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/awslabs/goformation/v7"
	"github.com/awslabs/goformation/v7/intrinsics"
)

// Problem is one thing wrong with a template. Path is a JSON pointer into
// the template (e.g. /Resources/ExecuteFunction/Properties/Handler), or the
// file's path when the file itself cannot be read.
type Problem struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

// String renders the problem as "path: message".
func (p Problem) String() string { return p.Path + ": " + p.Message }

// Check returns every problem found in the SAM template at templatePath;
// an empty result means the template passed. Relative paths in the template
// (CodeUri) are resolved against the template's directory.
func Check(templatePath string) []Problem {
	problems, _ := check(templatePath)
	return problems
}

// check is Check that also reports which allowed schema false positives
// were seen, so a test can keep that list from going stale.
func check(templatePath string) ([]Problem, []allowedFalsePositive) {
	data, err := os.ReadFile(templatePath)
	if err != nil {
		return []Problem{{Path: templatePath, Message: err.Error()}}, nil
	}
	t, err := load(data, filepath.Dir(templatePath))
	if err != nil {
		return []Problem{{Path: templatePath, Message: err.Error()}}, nil
	}
	var problems []Problem
	problems = append(problems, t.parseWithGoformation(data)...)
	schemaProblems, allowed := t.validateSchema()
	problems = append(problems, schemaProblems...)
	problems = append(problems, t.checkReferences()...)
	problems = append(problems, t.checkFunctions()...)
	sort.Slice(problems, func(i, j int) bool {
		if problems[i].Path != problems[j].Path {
			return problems[i].Path < problems[j].Path
		}
		return problems[i].Message < problems[j].Message
	})
	return dedupe(problems), allowed
}

// template is a template in long form (intrinsic functions as objects,
// e.g. {"Ref": "X"}), with its sections picked out.
type template struct {
	doc        map[string]any
	dir        string
	parameters map[string]any
	resources  map[string]any
	conditions map[string]any
	globals    map[string]any
}

// loadFile reads and loads the template at path.
func loadFile(path string) (*template, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return load(data, filepath.Dir(path))
}

func load(data []byte, dir string) (*template, error) {
	// NoProcess turns short-form tags (!Ref, !GetAtt ...) into their long
	// form and leaves them unevaluated, which is what every check needs.
	raw, err := intrinsics.ProcessYAML(data, &intrinsics.ProcessorOptions{NoProcess: true})
	if err != nil {
		return nil, fmt.Errorf("not a valid YAML template: %w", err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("not a template (the document is not a mapping): %w", err)
	}
	t := &template{doc: doc, dir: dir}
	t.parameters, _ = doc["Parameters"].(map[string]any)
	t.resources, _ = doc["Resources"].(map[string]any)
	t.conditions, _ = doc["Conditions"].(map[string]any)
	g, _ := doc["Globals"].(map[string]any)
	t.globals, _ = g["Function"].(map[string]any)
	return t, nil
}

// parseWithGoformation unmarshals the template into goformation's typed
// model, which catches values of the wrong shape that the schema pass
// cannot see once intrinsics are resolved. CloudFormation hands a Number
// parameter to a numeric property as a number, so Number parameters are
// resolved to numbers here (goformation would keep the string default).
func (t *template) parseWithGoformation(data []byte) []Problem {
	overrides := map[string]any{}
	for name, p := range t.parameters {
		m, _ := p.(map[string]any)
		if m["Type"] != "Number" {
			continue
		}
		switch d := m["Default"].(type) {
		case string:
			if f, err := strconv.ParseFloat(d, 64); err == nil {
				overrides[name] = f
			}
		case float64:
			overrides[name] = d
		}
	}
	tmpl, err := goformation.ParseYAMLWithOptions(data, &intrinsics.ProcessorOptions{ParameterOverrides: overrides})
	if err != nil {
		return []Problem{{Path: "/", Message: "goformation cannot parse the template: " + err.Error()}}
	}
	if len(tmpl.Resources) == 0 {
		return []Problem{{Path: "/Resources", Message: "the template has no resources"}}
	}
	return nil
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

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func dedupe(ps []Problem) []Problem {
	seen := map[Problem]bool{}
	out := ps[:0]
	for _, p := range ps {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}
