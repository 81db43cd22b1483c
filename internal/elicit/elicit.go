// Package elicit puts a remote MCP server's question — an elicitation: a
// message and a small form — to the person running pml while the call
// that asked is in flight, and hands back their answer completed as MCP
// asks: an accepted form takes the form's defaults for the fields left
// out (SEP-1034) and must fit the form.
//
// Only a front end whose caller is the person at the keyboard answers in
// line (pml run: a prompt on the terminal, Terminal, or answers written
// beforehand, Script). Everywhere else a question parks the call and the
// execution suspends until someone answers (internal/executor); who may
// answer is approval.Policy.MayAnswer's to say, and an Answerer is only
// configured where it says the caller may.
package elicit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/pml-sandbox/pml/internal/argcheck"
)

// Actions an answer takes (MCP's elicitation result actions).
const (
	Accept  = "accept"
	Decline = "decline"
	Cancel  = "cancel"
)

// Question is one elicitation a remote server asked.
type Question struct {
	// Server is the configured server that asked; Tool the tool whose
	// call it asked during, "" when the server asked outside any call
	// pml can tell (on its own stream, with several calls in flight).
	Server, Tool string
	// Params are the elicitation's params as the server sent them
	// (message, requestedSchema), scrubbed of the secrets it is sent.
	Params json.RawMessage
}

// Who names the asker in prompts and messages: "server:tool", or the
// server alone.
func (q Question) Who() string {
	if q.Tool == "" {
		return q.Server
	}
	return q.Server + ":" + q.Tool
}

// Result is an answer: an elicitation result as MCP sends it back.
type Result struct {
	Action  string         `json:"action"`
	Content map[string]any `json:"content,omitempty"`
}

// Answerer answers questions in line. Answer returns a complete result
// (Complete): an accepted form with its defaults applied, fitting the
// form. It may be called from several goroutines at once.
type Answerer interface {
	Answer(ctx context.Context, q Question) (Result, error)
}

// ErrURLMode is the error of a question in URL mode (the person is sent
// to a web page): pml declares form mode only.
var ErrURLMode = errors.New("the server asks in URL mode (open a web page), which pml does not offer: it declares form mode only")

// maxFields bounds the fields of one form a person is asked to fill.
const maxFields = 64

// form is a question's form, its fields in the order the server wrote
// them.
type form struct {
	message string
	schema  json.RawMessage
	fields  []*field
}

// parseForm reads an elicitation's params: its message and requested
// schema, refused when it is not a form pml can put to a person.
func parseForm(params json.RawMessage) (*form, error) {
	var p struct {
		Mode    string          `json:"mode"`
		Message string          `json:"message"`
		Schema  json.RawMessage `json:"requestedSchema"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, fmt.Errorf("the question is not an elicitation: %w", err)
	}
	if p.Mode != "" && p.Mode != "form" {
		return nil, ErrURLMode
	}
	f := &form{message: p.Message, schema: p.Schema}
	if len(bytes.TrimSpace(p.Schema)) == 0 || string(bytes.TrimSpace(p.Schema)) == "null" {
		return f, nil
	}
	// A server's schema is compiled to check the answer: bounded first,
	// as a tool's input schema is.
	if err := argcheck.CheckBounds(p.Schema); err != nil {
		return nil, fmt.Errorf("the question's form: %w", err)
	}
	var s struct {
		Type       string          `json:"type"`
		Properties json.RawMessage `json:"properties"`
		Required   []string        `json:"required"`
	}
	if err := json.Unmarshal(p.Schema, &s); err != nil {
		return nil, fmt.Errorf("the question's form: %w", err)
	}
	if s.Type != "" && s.Type != "object" {
		return nil, fmt.Errorf("the question's form is of type %q, not an object", s.Type)
	}
	names, props, err := orderedObject(s.Properties)
	if err != nil {
		return nil, fmt.Errorf("the question's form: properties: %w", err)
	}
	if len(names) > maxFields {
		return nil, fmt.Errorf("the question's form has %d fields (at most %d)", len(names), maxFields)
	}
	for i, name := range names {
		fd, err := parseField(name, props[i])
		if err != nil {
			return nil, fmt.Errorf("the question's form: field %q: %w", name, err)
		}
		for _, r := range s.Required {
			if r == name {
				fd.required = true
			}
		}
		f.fields = append(f.fields, fd)
	}
	return f, nil
}

// orderedObject returns a JSON object's keys and values in document
// order (a form's fields are asked in the order the server wrote them).
func orderedObject(raw json.RawMessage) ([]string, []json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return nil, nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, nil, errors.New("not an object")
	}
	var names []string
	var values []json.RawMessage
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		name, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, err
		}
		names = append(names, name)
		values = append(values, v)
	}
	return names, values, nil
}

// Complete checks r against the question it answers: a known action; for
// accept, the content with the form's defaults filled in where the person
// left a field out (SEP-1034), fitting the form; for decline and cancel,
// no content.
func Complete(params json.RawMessage, r Result) (Result, error) {
	switch r.Action {
	case Decline, Cancel:
		return Result{Action: r.Action}, nil
	case Accept:
	default:
		return Result{}, fmt.Errorf("the action is accept, decline or cancel, not %q", r.Action)
	}
	f, err := parseForm(params)
	if err != nil {
		return Result{}, err
	}
	r.Content = WithDefaults(r.Content, params)
	if r.Content == nil {
		r.Content = map[string]any{}
	}
	if len(f.schema) > 0 {
		b, err := json.Marshal(r.Content)
		if err != nil {
			return Result{}, err
		}
		if _, ferr := argcheck.New(f.schema).Check(b); ferr != nil {
			return Result{}, fmt.Errorf("the answer does not fit the form: %s", strings.TrimPrefix(ferr.Message, "arguments do not match the input schema: "))
		}
	}
	return r, nil
}

// WithDefaults fills the fields of an accepted form that the person left
// out with the defaults the question's schema names (SEP-1034). A field
// given stays as given; content is returned (allocated when nil and a
// default is added).
func WithDefaults(content map[string]any, params json.RawMessage) map[string]any {
	var p struct {
		Schema struct {
			Properties map[string]struct {
				Default json.RawMessage `json:"default"`
			} `json:"properties"`
		} `json:"requestedSchema"`
	}
	if json.Unmarshal(params, &p) != nil {
		return content
	}
	for name, prop := range p.Schema.Properties {
		if len(prop.Default) == 0 {
			continue
		}
		if _, ok := content[name]; ok {
			continue
		}
		var v any
		if json.Unmarshal(prop.Default, &v) != nil {
			continue
		}
		if content == nil {
			content = map[string]any{}
		}
		content[name] = v
	}
	return content
}

// printable makes a server's text safe to show on a terminal: control
// characters (escape sequences that would move the cursor, rewrite the
// screen or the title, or hide what follows) and the bidirectional
// overrides that reorder what is shown are replaced, and the text is cut
// to max runes. Line breaks stay where keepLines says so.
func printable(s string, max int, keepLines bool) string {
	var b strings.Builder
	n := 0
	for _, r := range s {
		if n == max {
			b.WriteString("…")
			break
		}
		switch {
		case r == '\n' && keepLines:
		case r == '\t':
			r = ' '
		case r == utf8.RuneError, unicode.IsControl(r), unicode.Is(unicode.Bidi_Control, r):
			r = '\uFFFD'
		}
		b.WriteRune(r)
		n++
	}
	return b.String()
}
