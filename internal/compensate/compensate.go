// Package compensate is the undo a deployment declares for a tool: which
// tool of the same server undoes a call of it, and that tool's arguments,
// built from the call's own arguments and result by a JSON template. A
// template is data, not code: it is the compensating call's arguments as
// JSON, where a string that is exactly a reference — "$.args.key",
// "$.result.id", "$.result.items[0]", `$.result["odd key"]` — stands for the
// value found there. It cannot loop, compute, concatenate or name anything
// but one tool, so whoever reads the server list sees exactly which call
// undoes which (docs/EFFECTS.md, "Undo").
//
// The paths are parsed here by hand, not by a JSONPath library: only
// member and index steps from two roots are allowed, and a library's
// filters, recursive descent and script expressions would each have to be
// refused anyway. Evaluation reads the journalled arguments and result
// (bounded by the journal: 32 KiB and 16 KiB) one step at a time, and every
// value it substitutes is bounded in depth; what it builds is bounded in
// size. A substituted value is never read as a template again, so a result
// holding "$.args" is only data.
package compensate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Bounds of a template and of what it builds.
const (
	// MaxTemplateBytes bounds a template's arguments as written.
	MaxTemplateBytes = 8 << 10
	// MaxTemplateDepth bounds how deeply a template's arguments nest.
	MaxTemplateDepth = 16
	// MaxRefs bounds the references one template holds.
	MaxRefs = 64
	// MaxSteps bounds the steps of one reference after its root.
	MaxSteps = 16
	// MaxValueDepth bounds how deeply a substituted value may nest: a
	// hostile result cannot make a compensating call the host refuses.
	MaxValueDepth = 64
	// MaxBuiltBytes bounds the arguments a template builds.
	MaxBuiltBytes = 64 << 10
)

// The roots a reference may start from.
const (
	RootArgs   = "args"
	RootResult = "result"
)

// Template is one tool's compensation as the deployment declared it: the
// tool of the same server that undoes a call, and its arguments. Made by
// Compile; immutable, safe to share.
type Template struct {
	// Tool is the compensating tool's name, on the same server.
	Tool string
	// Args are the arguments as written (JSON), for whoever audits it.
	Args json.RawMessage

	tree any // Args decoded, references replaced by *ref
	uses map[string]bool
}

// ref is one reference: a root and its steps.
type ref struct {
	text  string
	root  string
	steps []step
}

// step is one member (name) or index step.
type step struct {
	name  string
	index int
	isIdx bool
}

// Compile checks a declared compensation and makes it a Template. args is
// JSON (an object, or empty for none). A string starting with "$" must be
// a valid reference; "$$" writes a literal "$".
func Compile(tool string, args json.RawMessage) (*Template, error) {
	if strings.TrimSpace(tool) == "" {
		return nil, errors.New("a compensation needs the tool that undoes the call")
	}
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	if len(args) > MaxTemplateBytes {
		return nil, fmt.Errorf("its args are %d bytes; at most %d", len(args), MaxTemplateBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("its args are not JSON: %w", err)
	}
	if dec.More() {
		return nil, errors.New("its args are more than one JSON value")
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, errors.New("its args must be an object, the compensating call's arguments")
	}
	t := &Template{Tool: tool, Args: compact(args), uses: map[string]bool{}}
	refs := 0
	tree, err := t.compileValue(v, 0, &refs)
	if err != nil {
		return nil, err
	}
	t.tree = tree
	return t, nil
}

func compact(raw json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return raw
	}
	return b.Bytes()
}

func (t *Template) compileValue(v any, depth int, refs *int) (any, error) {
	if depth > MaxTemplateDepth {
		return nil, fmt.Errorf("its args nest deeper than %d levels", MaxTemplateDepth)
	}
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			c, err := t.compileValue(e, depth+1, refs)
			if err != nil {
				return nil, err
			}
			out[k] = c
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			c, err := t.compileValue(e, depth+1, refs)
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	case string:
		if rest, ok := strings.CutPrefix(x, "$$"); ok {
			return "$" + rest, nil
		}
		if !strings.HasPrefix(x, "$") {
			return x, nil
		}
		if *refs++; *refs > MaxRefs {
			return nil, fmt.Errorf("its args hold more than %d references", MaxRefs)
		}
		r, err := parseRef(x)
		if err != nil {
			return nil, err
		}
		t.uses[r.root] = true
		return r, nil
	}
	return v, nil
}

// parseRef reads "$.args…" or "$.result…" followed by steps: .name
// (letters, digits, '_' and '-'), [N] or ["any name"].
func parseRef(s string) (*ref, error) {
	bad := func(why string) error {
		return fmt.Errorf("%q is not a reference (%s): write $.args.NAME, $.result.NAME, [N] or [\"NAME\"] steps, or $$ for a literal $", s, why)
	}
	if len(s) > 256 {
		return nil, bad("longer than 256 bytes")
	}
	rest, ok := strings.CutPrefix(s, "$.")
	if !ok {
		return nil, bad("it must start with $.args or $.result")
	}
	r := &ref{text: s}
	switch {
	case strings.HasPrefix(rest, RootArgs) && (len(rest) == len(RootArgs) || rest[len(RootArgs)] == '.' || rest[len(RootArgs)] == '['):
		r.root, rest = RootArgs, rest[len(RootArgs):]
	case strings.HasPrefix(rest, RootResult) && (len(rest) == len(RootResult) || rest[len(RootResult)] == '.' || rest[len(RootResult)] == '['):
		r.root, rest = RootResult, rest[len(RootResult):]
	default:
		return nil, bad("only args and result can be referred to")
	}
	for rest != "" {
		if len(r.steps) == MaxSteps {
			return nil, bad(fmt.Sprintf("more than %d steps", MaxSteps))
		}
		var st step
		var err error
		switch rest[0] {
		case '.':
			n := 1
			for n < len(rest) && nameChar(rest[n]) {
				n++
			}
			if n == 1 {
				return nil, bad("an empty name after '.'")
			}
			st.name, rest = rest[1:n], rest[n:]
		case '[':
			st, rest, err = bracket(rest)
			if err != nil {
				return nil, bad(err.Error())
			}
		default:
			return nil, bad(fmt.Sprintf("unexpected %q", rest[0]))
		}
		r.steps = append(r.steps, st)
	}
	return r, nil
}

func nameChar(c byte) bool {
	return c == '_' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// bracket reads one [N] or ["name"] step at the start of s.
func bracket(s string) (step, string, error) {
	if len(s) > 1 && s[1] == '"' {
		i := 2
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' {
				i++
			}
		}
		if i+1 >= len(s) || s[i+1] != ']' {
			return step{}, "", errors.New(`a ["name"] step without its closing "]`)
		}
		var name string
		if err := json.Unmarshal([]byte(s[1:i+1]), &name); err != nil {
			return step{}, "", errors.New("a quoted name that is not a JSON string")
		}
		return step{name: name}, s[i+2:], nil
	}
	end := strings.IndexByte(s, ']')
	if end < 2 || end > 7 {
		return step{}, "", errors.New("an index must be 0 to 999999")
	}
	n, err := strconv.Atoi(s[1:end])
	if err != nil || n < 0 || strconv.Itoa(n) != s[1:end] {
		return step{}, "", errors.New("an index must be 0 to 999999")
	}
	return step{index: n, isIdx: true}, s[end+1:], nil
}

// Uses reports whether the template refers to root (RootArgs,
// RootResult): a compensation whose journal entry did not keep that
// root cannot be built.
func (t *Template) Uses(root string) bool { return t.uses[root] }

// NotKeptError is a template that refers to what the journal did not keep
// of the effect (its arguments over 32 KiB, its result over 16 KiB).
type NotKeptError struct{ Root string }

func (e *NotKeptError) Error() string {
	return fmt.Sprintf("its compensation refers to $.%s, and the journal did not keep the effect's %s (over its bound)", e.Root, e.Root)
}

// MissingError is a reference that finds nothing in the effect's
// arguments or result.
type MissingError struct {
	Ref string
	Why string
}

func (e *MissingError) Error() string {
	return fmt.Sprintf("its compensation refers to %s, which the effect's %s does not hold (%s)", e.Ref, rootOf(e.Ref), e.Why)
}

func rootOf(r string) string {
	if strings.HasPrefix(r, "$.args") {
		return RootArgs
	}
	return RootResult
}

// Build makes the compensating call's arguments from the effect's
// arguments and result, as the journal kept them (nil: not kept). Every
// reference must find a value: a missing one is a *MissingError, a root
// not kept a *NotKeptError.
func (t *Template) Build(args, result json.RawMessage) (json.RawMessage, error) {
	roots := map[string]json.RawMessage{RootArgs: args, RootResult: result}
	for root := range t.uses {
		if roots[root] == nil {
			return nil, &NotKeptError{Root: root}
		}
	}
	v, err := build(t.tree, roots)
	if err != nil {
		return nil, err
	}
	out, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("building its compensation's arguments: %w", err)
	}
	if len(out) > MaxBuiltBytes {
		return nil, fmt.Errorf("its compensation's arguments would be %d bytes; at most %d", len(out), MaxBuiltBytes)
	}
	return out, nil
}

func build(v any, roots map[string]json.RawMessage) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			b, err := build(e, roots)
			if err != nil {
				return nil, err
			}
			out[k] = b
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			b, err := build(e, roots)
			if err != nil {
				return nil, err
			}
			out[i] = b
		}
		return out, nil
	case *ref:
		return x.resolve(roots[x.root])
	}
	return v, nil
}

// resolve finds r's value in raw, one step at a time: each step decodes
// one level (its members or elements as raw values), never the whole.
func (r *ref) resolve(raw json.RawMessage) (json.RawMessage, error) {
	cur := bytes.TrimSpace(raw)
	for i, st := range r.steps {
		at := r.text
		if i+1 < len(r.steps) {
			at = "the step before " + strconv.Quote(stepText(r.steps[i+1]))
		}
		if st.isIdx {
			var arr []json.RawMessage
			if len(cur) == 0 || cur[0] != '[' || json.Unmarshal(cur, &arr) != nil {
				return nil, &MissingError{Ref: r.text, Why: "not an array at " + at}
			}
			if st.index >= len(arr) {
				return nil, &MissingError{Ref: r.text, Why: fmt.Sprintf("index %d past the array's %d elements", st.index, len(arr))}
			}
			cur = bytes.TrimSpace(arr[st.index])
			continue
		}
		var obj map[string]json.RawMessage
		if len(cur) == 0 || cur[0] != '{' || json.Unmarshal(cur, &obj) != nil {
			return nil, &MissingError{Ref: r.text, Why: "not an object at " + at}
		}
		next, ok := obj[st.name]
		if !ok {
			return nil, &MissingError{Ref: r.text, Why: "no member " + strconv.Quote(st.name)}
		}
		cur = bytes.TrimSpace(next)
	}
	if !json.Valid(cur) {
		return nil, &MissingError{Ref: r.text, Why: "not valid JSON"}
	}
	if d := depth(cur); d > MaxValueDepth {
		return nil, fmt.Errorf("%s nests %d levels deep; a compensation takes values at most %d deep", r.text, d, MaxValueDepth)
	}
	return json.RawMessage(cur), nil
}

func stepText(st step) string {
	if st.isIdx {
		return "[" + strconv.Itoa(st.index) + "]"
	}
	return "." + st.name
}

// depth is how deeply b's arrays and objects nest, counting brackets
// outside strings (b is valid JSON).
func depth(b []byte) int {
	d, deepest := 0, 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		case '[', '{':
			d++
			deepest = max(deepest, d)
		case ']', '}':
			d--
		}
	}
	return deepest
}
