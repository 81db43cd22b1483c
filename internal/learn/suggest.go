package learn

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/trace"
)

// Suggestion is a candidate proposed as a capability. It is a proposal:
// publishing it goes through the registry's guarded path like any save.
type Suggestion struct {
	// ID names the suggestion (its candidate's fingerprint) for
	// publishing.
	ID string `json:"id"`
	// Name is a proposed ns:action: the namespace "learned", the action
	// from the tools it calls and the fingerprint's first digits.
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
	Tools       []string        `json:"tools"`
	// Code is the candidate's code with the literals that varied (or
	// were withheld) read from args, the others as they always were.
	Code       string    `json:"code"`
	Successes  int64     `json:"successes"`
	Principals int       `json:"principals"`
	LastSeen   time.Time `json:"last_seen"`
	// Inputs name, for each input the code reads, the literal it stood
	// for: how the schema came about.
	Inputs []Input `json:"inputs,omitempty"`
}

// Input is one property of a suggestion's input schema.
type Input struct {
	Name string `json:"name"`
	// From is "args" for a key the code already read, "literal" for a
	// lifted literal.
	From string `json:"from"`
	// Literal is the 1-based position, among the code's lifted literals,
	// of the literal the input stands for (0 for an args key).
	Literal int `json:"literal,omitempty"`
	// Seen are values the literal had (none when withheld).
	Seen     []string `json:"seen,omitempty"`
	Withheld string   `json:"withheld,omitempty"`
}

// SuggestedNamespace is the namespace suggestions are proposed in: never
// a server's (a capability may not take one), and one place an approver
// finds what was learned.
const SuggestedNamespace = "learned"

// Suggest turns a candidate into a suggestion; ok is false when it has no
// template yet (no counted run carried its code).
func Suggest(c Candidate) (Suggestion, bool) {
	t := c.Template
	if t == nil || len(t.Holes) != len(c.Slots) || len(t.Names) != len(c.Slots) {
		return Suggestion{}, false
	}
	s := Suggestion{ID: c.Fingerprint, Name: proposedName(c), Tools: c.Tools, Successes: c.Successes, Principals: c.Principals, LastSeen: c.LastSeen}

	// The inputs: every args key the code reads, then each literal that
	// varied or was withheld, named after where it stood.
	taken := map[string]bool{}
	props := map[string]any{}
	var order, required []string
	for _, k := range c.ArgsKeys {
		taken[k] = true
		props[k] = map[string]any{"description": "read by the code as args." + k}
		order = append(order, k)
		s.Inputs = append(s.Inputs, Input{Name: k, From: "args"})
	}
	slotArg := make([]string, len(c.Slots))
	for i, sl := range c.Slots {
		if !sl.Input() {
			continue
		}
		name := unique(cmp.Or(t.Names[i], "value"), taken)
		slotArg[i] = name
		typ := "string"
		if sl.Kind == trace.LiteralNumber {
			typ = "number"
		}
		p := map[string]any{"type": typ}
		switch {
		case sl.Withheld == trace.WithheldSecret:
			p["description"] = "a value that looked like a secret in the runs learned from: pass it in"
		case len(sl.Values) > 0:
			p["description"] = "was " + seenList(sl.Values)
			if len(sl.Values) > 0 && !sl.Varied {
				p["default"] = defaultOf(sl)
			}
		}
		props[name] = p
		order = append(order, name)
		required = append(required, name)
		s.Inputs = append(s.Inputs, Input{Name: name, From: "literal", Literal: i + 1, Seen: sl.Values, Withheld: sl.Withheld})
	}
	schema := orderedSchema{props: props, order: order, required: required}
	s.InputSchema, _ = json.Marshal(schema)

	// The code: each hole filled with args.<name> or its constant.
	var b strings.Builder
	last := 0
	for i, h := range t.Holes {
		if h < last || h > len(t.Code) {
			return Suggestion{}, false
		}
		b.WriteString(t.Code[last:h])
		if slotArg[i] != "" {
			b.WriteString(argRef(slotArg[i]))
		} else {
			b.WriteString(literalText(c.Slots[i]))
		}
		last = h
	}
	b.WriteString(t.Code[last:])
	s.Code = b.String()
	s.Description = describe(c, t.Comments)
	return s, true
}

// proposedName is learned:<tools>_<fingerprint prefix>, within the 64
// characters an action may have.
func proposedName(c Candidate) string {
	var parts []string
	for _, tool := range c.Tools {
		_, name, _ := strings.Cut(tool, ":")
		name = identifier(name)
		if name != "" && !slices.Contains(parts, name) {
			parts = append(parts, name)
		}
	}
	action := strings.Join(parts, "_")
	if action == "" {
		action = "program"
	}
	if len(action) > 50 {
		action = action[:50]
	}
	if c := action[0]; c >= '0' && c <= '9' {
		action = "_" + action
	}
	return SuggestedNamespace + ":" + action + "_" + c.Fingerprint[:min(6, len(c.Fingerprint))]
}

// describe says what the program does in the words it has: the tools it
// calls, in order, and its comments.
func describe(c Candidate, comments []string) string {
	var b strings.Builder
	if len(comments) > 0 {
		b.WriteString(strings.Join(comments, " "))
		if !strings.HasSuffix(b.String(), ".") {
			b.WriteString(".")
		}
		b.WriteString(" ")
	}
	b.WriteString("Calls ")
	b.WriteString(strings.Join(c.Tools, ", then "))
	fmt.Fprintf(&b, ". Learned from %d successful runs", c.Successes)
	if c.Principals > 1 {
		fmt.Fprintf(&b, " by %d principals", c.Principals)
	}
	b.WriteString(".")
	return b.String()
}

var identRE = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$]*$`)

func argRef(name string) string {
	if identRE.MatchString(name) {
		return "args." + name
	}
	q, _ := json.Marshal(name)
	return "args[" + string(q) + "]"
}

// literalText is a constant slot's literal as code.
func literalText(s Slot) string {
	if s.Kind == trace.LiteralNumber {
		return s.Values[0]
	}
	return quote(s.Values[0])
}

func defaultOf(s Slot) any {
	if s.Kind == trace.LiteralNumber {
		if f, err := strconv.ParseFloat(strings.ReplaceAll(s.Values[0], "_", ""), 64); err == nil {
			return f
		}
		return nil
	}
	return s.Values[0]
}

// quote is v as a JavaScript string literal (JSON's, without HTML
// escaping).
func quote(v string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return strings.TrimSuffix(b.String(), "\n")
}

func seenList(vs []string) string {
	qs := make([]string, len(vs))
	for i, v := range vs {
		qs[i] = quote(v)
	}
	return strings.Join(qs, ", ")
}

func unique(name string, taken map[string]bool) string {
	n := name
	for i := 2; taken[n]; i++ {
		n = name + strconv.Itoa(i)
	}
	taken[n] = true
	return n
}

// orderedSchema marshals an object schema with its properties in the
// order given (the args keys, then the literals in the order of the code).
type orderedSchema struct {
	props    map[string]any
	order    []string
	required []string
}

func (o orderedSchema) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"type":"object","properties":{`)
	for i, k := range o.order {
		if i > 0 {
			b.WriteByte(',')
		}
		kj, _ := json.Marshal(k)
		vj, err := json.Marshal(o.props[k])
		if err != nil {
			return nil, err
		}
		b.Write(kj)
		b.WriteByte(':')
		b.Write(vj)
	}
	b.WriteByte('}')
	if len(o.required) > 0 {
		rj, _ := json.Marshal(o.required)
		b.WriteString(`,"required":`)
		b.Write(rj)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// Suggestions are the suggestions q's viewer may see: its candidates seen
// succeed at least K times that have their code, best first.
func Suggestions(ctx context.Context, store Store, q Query) ([]Suggestion, error) {
	cs, err := store.Candidates(ctx, q)
	if err != nil {
		return nil, err
	}
	out := []Suggestion{}
	for _, c := range cs {
		if s, ok := Suggest(c); ok {
			out = append(out, s)
		}
	}
	return out, nil
}

// Proposal is suggestion id as v would publish it, under name when given
// (else its proposed one): NOT_FOUND unless v may see the candidate and it
// was seen succeed at least min times (DefaultMinSuccesses when 0).
func Proposal(ctx context.Context, store Store, id string, v Viewer, name string, min int64) (Suggestion, error) {
	if min <= 0 {
		min = DefaultMinSuccesses
	}
	if !validFingerprint(id) {
		// Only a fingerprint names a candidate: never another counter.
		return Suggestion{}, fault.New(fault.InvalidRequest, "%q is not a suggestion id (16 hex digits)", id)
	}
	c, err := store.Candidate(ctx, id, v)
	if err != nil {
		return Suggestion{}, err
	}
	s, ok := Suggest(c)
	if !ok || c.Successes < min {
		return Suggestion{}, noCandidate(id)
	}
	if name != "" {
		s.Name = name
	}
	return s, nil
}
