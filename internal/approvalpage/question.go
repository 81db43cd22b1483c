package approvalpage

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/idna"

	"github.com/pml-sandbox/pml/internal/argcheck"
	"github.com/pml-sandbox/pml/internal/execution"
)

// A remote server's questions on the page. A call parked on the question
// its remote MCP server asked (execution.PendingQuestion) is shown as the
// server asked it: each elicitation's message as text, and its requested
// schema — MCP's flat object of primitives: strings (with a format),
// numbers and integers, booleans, single- and multi-select enums, titled
// or not — as a form the person fills in, prefilled with the server's
// defaults. A URL-mode question (the server wants its own page opened) is
// a link, shown whole with its host, that the person may open. The answer
// is an execution.DecisionAnswer with one elicitation result per
// question, by the server's keys: accepted with content that the server's
// own schema validates (internal/argcheck, as tool arguments are), or
// declined. Field names in the form are "a.<question index>.<field name>"
// (the questions in the order of their keys), rebuilt from the suspended
// document when the form comes back, so nothing the browser sends names
// a question or a field the server did not ask.

// elicitParams is one question as the server asked it (MCP's
// ElicitRequest params).
type elicitParams struct {
	Mode            string          `json:"mode"`
	Message         string          `json:"message"`
	URL             string          `json:"url"`
	RequestedSchema json.RawMessage `json:"requestedSchema"`
}

// The ways a field is filled in (fieldView.Input).
const (
	inputText   = "text"   // a string: <input type=text|email|url|date>
	inputNumber = "number" // a number or an integer
	inputBool   = "bool"   // yes or no, as radio buttons
	inputSelect = "select" // one of an enum
	inputMulti  = "multi"  // some of an enum, as checkboxes
	// inputJSON is a field of a type MCP's elicitation does not define
	// (an object, an array of anything): the person types its JSON, and
	// the server's schema checks it.
	inputJSON = "json"
)

// questionView is one of a call's questions, as the person reads it.
type questionView struct {
	Key     string // the server's key for it
	Index   int
	Message string
	// URLMode: the server asks the person to open URL (Link when it is an
	// http(s) URL the page may link to; URLHost its host, shown apart so
	// that a look-alike path cannot pass for another site).
	URLMode bool
	URL     string
	Link    string
	URLHost string
	Fields  []fieldView
	// Schema is the requested schema as sent, indented, for the person who
	// wants to read it whole.
	Schema string
	// Unreadable says why the question cannot be answered here (only
	// declined).
	Unreadable string
}

// fieldView is one field of a question's form.
type fieldView struct {
	Name        string // the field's name in the server's schema
	Form        string // its name in the page's form
	ID          string // its element id
	Title       string
	Description string
	Type        string // as the schema says
	Required    bool
	Input       string
	InputType   string // text, email, url, date (inputText)
	Step        string // any, 1 (inputNumber)
	Min, Max    string
	MinLength   int
	MaxLength   int
	Constraints []string
	// Value is what the field shows: the server's default, or what the
	// person sent when the form came back refused.
	Value   string
	Options []optionView
	// Bool is "true", "false" or "" (inputBool).
	Bool string
	// raw are the option values as the schema gives them.
	raw []json.RawMessage
}

// optionView is one choice of an enum.
type optionView struct {
	Index    int
	Label    string
	Selected bool
}

// propSchema is what the page reads of one property of a requested
// schema.
type propSchema struct {
	Type        json.RawMessage   `json:"type"`
	Title       string            `json:"title"`
	Description string            `json:"description"`
	Format      string            `json:"format"`
	Default     json.RawMessage   `json:"default"`
	Enum        []json.RawMessage `json:"enum"`
	EnumNames   []string          `json:"enumNames"`
	OneOf       []titledConst     `json:"oneOf"`
	AnyOf       []titledConst     `json:"anyOf"`
	Minimum     *json.Number      `json:"minimum"`
	Maximum     *json.Number      `json:"maximum"`
	MinLength   *int              `json:"minLength"`
	MaxLength   *int              `json:"maxLength"`
	MinItems    *int              `json:"minItems"`
	MaxItems    *int              `json:"maxItems"`
	Items       *propSchema       `json:"items"`
}

type titledConst struct {
	Const json.RawMessage `json:"const"`
	Title string          `json:"title"`
}

func (s propSchema) typeName() string {
	var t string
	if json.Unmarshal(s.Type, &t) == nil {
		return t
	}
	return ""
}

// choices are the values of an enum schema and their labels: enum (with
// the legacy enumNames), or oneOf/anyOf of titled consts.
func (s propSchema) choices() ([]json.RawMessage, []string) {
	if len(s.Enum) > 0 {
		labels := make([]string, len(s.Enum))
		for i, v := range s.Enum {
			labels[i] = valueLabel(v)
			if i < len(s.EnumNames) && s.EnumNames[i] != "" {
				labels[i] = s.EnumNames[i] + " (" + valueLabel(v) + ")"
			}
		}
		return s.Enum, labels
	}
	titled := s.OneOf
	if len(titled) == 0 {
		titled = s.AnyOf
	}
	var vals []json.RawMessage
	var labels []string
	for _, c := range titled {
		if len(c.Const) == 0 {
			return nil, nil
		}
		vals = append(vals, c.Const)
		l := valueLabel(c.Const)
		if c.Title != "" {
			l = c.Title + " (" + l + ")"
		}
		labels = append(labels, l)
	}
	return vals, labels
}

// valueLabel is a JSON value as the person reads it: a string as itself,
// anything else as JSON.
func valueLabel(v json.RawMessage) string {
	var s string
	if json.Unmarshal(v, &s) == nil {
		return visible(s)
	}
	return visible(string(compact(v)))
}

func compact(v json.RawMessage) []byte {
	var b bytes.Buffer
	if json.Compact(&b, v) != nil {
		return v
	}
	return b.Bytes()
}

// questionKeys are a call's question keys, in the order the page shows
// them and numbers them in its forms.
func questionKeys(pc execution.Pending) []string { return slices.Sorted(maps.Keys(pc.Questions)) }

// questionViews are a call's questions as the page shows them, each field
// holding the server's default or, for the call whose form came back
// refused (back), what the person sent.
func questionViews(pc execution.Pending, back url.Values) []questionView {
	var out []questionView
	for i, key := range questionKeys(pc) {
		out = append(out, questionOf(pc.CallID, i, key, pc.Questions[key], back))
	}
	return out
}

func questionOf(callID, index int, key string, raw json.RawMessage, back url.Values) questionView {
	q := questionView{Key: visible(key), Index: index}
	var p elicitParams
	if err := json.Unmarshal(raw, &p); err != nil {
		q.Unreadable = "The server's question could not be read."
		return q
	}
	q.Message = visible(p.Message)
	if p.Mode == "url" {
		q.URLMode, q.URL = true, visible(p.URL)
		// Linked only when it is plainly a web page: http(s), a host, no
		// user part ("https://bank.example@evil.example" names evil).
		if u, err := url.Parse(p.URL); err == nil && (u.Scheme == "https" || u.Scheme == "http") && u.Host != "" && u.User == nil {
			q.Link, q.URLHost = u.String(), visible(u.Host)
			// A host in another script is shown as the DNS name it is
			// too, so that a look-alike letter cannot pass for another.
			if ascii, err := idna.Lookup.ToASCII(u.Hostname()); err == nil && ascii != u.Hostname() {
				q.URLHost += " (" + ascii + ")"
			} else if err != nil {
				q.Link = ""
			}
		}
		return q
	}
	if len(bytes.TrimSpace(p.RequestedSchema)) == 0 {
		return q
	}
	var buf bytes.Buffer
	if json.Indent(&buf, p.RequestedSchema, "", "  ") == nil {
		q.Schema = visible(buf.String())
	}
	var schema struct {
		Properties json.RawMessage `json:"properties"`
		Required   []string        `json:"required"`
	}
	if err := json.Unmarshal(p.RequestedSchema, &schema); err != nil {
		q.Unreadable = "The server's requested schema is not an object schema: this question cannot be answered here."
		return q
	}
	names, props, err := orderedObject(schema.Properties)
	if err != nil {
		q.Unreadable = "The server's requested schema has no readable properties: this question cannot be answered here."
		return q
	}
	for i, name := range names {
		q.Fields = append(q.Fields, fieldOf(callID, index, i, name, props[name], slices.Contains(schema.Required, name), back))
	}
	return q
}

// orderedObject reads a JSON object's members in the order they are
// written (the server's order of its fields).
func orderedObject(raw json.RawMessage) ([]string, map[string]json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, nil, fmt.Errorf("not an object")
	}
	var names []string
	values := map[string]json.RawMessage{}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		name, _ := k.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, err
		}
		if _, dup := values[name]; !dup {
			names = append(names, name)
		}
		values[name] = v
	}
	return names, values, nil
}

// formName is a field's name in the page's form.
func formName(question int, field string) string { return "a." + strconv.Itoa(question) + "." + field }

func fieldOf(callID, question, index int, name string, raw json.RawMessage, required bool, back url.Values) fieldView {
	f := fieldView{Name: visible(name), Form: formName(question, name), ID: fmt.Sprintf("a-%d-%d-%d", callID, question, index), Required: required}
	var s propSchema
	if json.Unmarshal(raw, &s) != nil {
		s = propSchema{}
	}
	f.Title, f.Description, f.Type = visible(s.Title), visible(s.Description), s.typeName()
	if f.Type == "" {
		f.Type = "any"
	}
	if s.Format != "" {
		f.Constraints = append(f.Constraints, "format: "+visible(s.Format))
	}
	if s.MinLength != nil {
		f.MinLength = *s.MinLength
		f.Constraints = append(f.Constraints, fmt.Sprintf("at least %d characters", *s.MinLength))
	}
	if s.MaxLength != nil {
		f.MaxLength = *s.MaxLength
		f.Constraints = append(f.Constraints, fmt.Sprintf("at most %d characters", *s.MaxLength))
	}
	if s.Minimum != nil {
		f.Min = s.Minimum.String()
		f.Constraints = append(f.Constraints, "at least "+f.Min)
	}
	if s.Maximum != nil {
		f.Max = s.Maximum.String()
		f.Constraints = append(f.Constraints, "at most "+f.Max)
	}
	if s.MinItems != nil {
		f.Constraints = append(f.Constraints, fmt.Sprintf("choose at least %d", *s.MinItems))
	}
	if s.MaxItems != nil {
		f.Constraints = append(f.Constraints, fmt.Sprintf("choose at most %d", *s.MaxItems))
	}
	sent, resent := back[f.Form]
	def := s.Default
	switch vals, labels := s.choices(); {
	case f.Type == "string" && len(vals) > 0:
		f.Input, f.raw = inputSelect, vals
		for i, l := range labels {
			selected := bytes.Equal(compact(vals[i]), compact(def))
			if resent {
				selected = slices.Contains(sent, strconv.Itoa(i))
			}
			f.Options = append(f.Options, optionView{Index: i, Label: l, Selected: selected})
		}
	case f.Type == "string":
		f.Input, f.InputType = inputText, "text"
		switch s.Format {
		case "email":
			f.InputType = "email"
		case "uri":
			f.InputType = "url"
		case "date":
			f.InputType = "date"
		}
		var d string
		if json.Unmarshal(def, &d) == nil {
			f.Value = d
		}
	case f.Type == "number" || f.Type == "integer":
		f.Input, f.Step = inputNumber, "any"
		if f.Type == "integer" {
			f.Step = "1"
		}
		var n json.Number
		if json.Unmarshal(def, &n) == nil {
			f.Value = n.String()
		}
	case f.Type == "boolean":
		f.Input = inputBool
		var b bool
		if json.Unmarshal(def, &b) == nil {
			f.Bool = strconv.FormatBool(b)
		}
	case f.Type == "array" && s.Items != nil:
		vals, labels := s.Items.choices()
		if len(vals) == 0 {
			f.Input = inputJSON
			f.Value = defaultJSON(def)
			break
		}
		f.Input, f.raw = inputMulti, vals
		var defs []json.RawMessage
		_ = json.Unmarshal(def, &defs)
		for i, l := range labels {
			selected := slices.ContainsFunc(defs, func(d json.RawMessage) bool { return bytes.Equal(compact(d), compact(vals[i])) })
			if resent {
				selected = slices.Contains(sent, strconv.Itoa(i))
			}
			f.Options = append(f.Options, optionView{Index: i, Label: l, Selected: selected})
		}
	default:
		f.Input = inputJSON
		f.Value = defaultJSON(def)
	}
	if resent {
		switch f.Input {
		case inputText, inputNumber, inputJSON:
			f.Value = sent[0]
		case inputBool:
			f.Bool = sent[0]
		}
	}
	return f
}

func defaultJSON(def json.RawMessage) string {
	if len(def) == 0 {
		return ""
	}
	return string(compact(def))
}

// maxAnswerBytes bounds one question's answer (its content's JSON).
const maxAnswerBytes = 32 << 10

// answerProblem is why a form's answer was refused, for the person.
type answerProblem struct {
	Field   string // the field's title or name; "" for the whole answer
	Message string
}

// readAnswers reads the answers to a call's questions from a posted form:
// every question accepted (a URL-mode one as done, a form one with the
// content the fields give, checked against the server's schema). It
// returns the elicitation results by question key, or the problems that
// refuse them.
func readAnswers(pc execution.Pending, form url.Values) (map[string]json.RawMessage, []answerProblem) {
	answers := map[string]json.RawMessage{}
	var problems []answerProblem
	for _, q := range questionViews(pc, nil) {
		key := questionKeys(pc)[q.Index]
		switch {
		case q.Unreadable != "":
			problems = append(problems, answerProblem{Message: q.Unreadable + " Decline it instead."})
			continue
		case q.URLMode:
			answers[key] = json.RawMessage(`{"action":"accept"}`)
			continue
		}
		content, probs := readContent(q, form)
		if len(probs) > 0 {
			problems = append(problems, probs...)
			continue
		}
		var p elicitParams
		_ = json.Unmarshal(pc.Questions[key], &p)
		if len(bytes.TrimSpace(p.RequestedSchema)) > 0 {
			if _, ferr := argcheck.New(p.RequestedSchema).Check(content); ferr != nil {
				problems = append(problems, schemaProblems(q, ferr.Message, ferr.Details)...)
				continue
			}
		}
		raw, err := json.Marshal(map[string]json.RawMessage{"action": json.RawMessage(`"accept"`), "content": content})
		if err != nil || len(raw) > maxAnswerBytes {
			problems = append(problems, answerProblem{Message: fmt.Sprintf("The answer is over %d bytes.", maxAnswerBytes)})
			continue
		}
		answers[key] = raw
	}
	return answers, problems
}

// readContent builds a form question's content from the fields sent, in
// the server's order of its fields; a field left empty is left out (the
// server's default then applies, or its schema says it is required).
func readContent(q questionView, form url.Values) (json.RawMessage, []answerProblem) {
	var b bytes.Buffer
	var problems []answerProblem
	b.WriteByte('{')
	n := 0
	for _, f := range q.Fields {
		v, ok, msg := fieldValue(f, form[f.Form])
		if msg != "" {
			problems = append(problems, answerProblem{Field: f.label(), Message: msg})
			continue
		}
		if !ok {
			continue
		}
		if n > 0 {
			b.WriteByte(',')
		}
		n++
		name, _ := json.Marshal(f.rawName(q))
		b.Write(name)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), problems
}

// rawName is the field's name as the server wrote it (Name is escaped for
// showing): the form's name holds it after the question's index.
func (f fieldView) rawName(q questionView) string {
	return strings.TrimPrefix(f.Form, "a."+strconv.Itoa(q.Index)+".")
}

func (f fieldView) label() string {
	if f.Title != "" {
		return f.Title + " (" + f.Name + ")"
	}
	return f.Name
}

// fieldValue reads one field as JSON: ok is false when the person left
// it empty; msg says why what was sent cannot be read.
func fieldValue(f fieldView, sent []string) (json.RawMessage, bool, string) {
	switch f.Input {
	case inputMulti:
		var vals []json.RawMessage
		for _, s := range sent {
			i, err := strconv.Atoi(s)
			if err != nil || i < 0 || i >= len(f.raw) {
				return nil, false, "is not one of the choices"
			}
			vals = append(vals, f.raw[i])
		}
		if len(vals) == 0 {
			if f.Required {
				return json.RawMessage(`[]`), true, ""
			}
			return nil, false, ""
		}
		raw, _ := json.Marshal(vals)
		return raw, true, ""
	}
	if len(sent) > 1 {
		return nil, false, "was sent more than once"
	}
	if len(sent) == 0 || sent[0] == "" {
		return nil, false, ""
	}
	s := sent[0]
	switch f.Input {
	case inputText:
		raw, _ := json.Marshal(s)
		return raw, true, ""
	case inputNumber:
		t := strings.TrimSpace(s)
		if f.Type == "integer" {
			i, err := strconv.ParseInt(t, 10, 64)
			if err != nil {
				return nil, false, "is not a whole number"
			}
			return json.RawMessage(strconv.FormatInt(i, 10)), true, ""
		}
		x, err := strconv.ParseFloat(t, 64)
		if err != nil || math.IsInf(x, 0) || math.IsNaN(x) || strings.ContainsAny(t, "xXpP_") {
			return nil, false, "is not a number"
		}
		raw, _ := json.Marshal(x)
		return raw, true, ""
	case inputBool:
		switch s {
		case "true", "false":
			return json.RawMessage(s), true, ""
		}
		return nil, false, "is neither yes nor no"
	case inputSelect:
		i, err := strconv.Atoi(s)
		if err != nil || i < 0 || i >= len(f.raw) {
			return nil, false, "is not one of the choices"
		}
		return f.raw[i], true, ""
	}
	// inputJSON
	if !json.Valid([]byte(s)) {
		return nil, false, "is not JSON"
	}
	return compact(json.RawMessage(s)), true, ""
}

// schemaProblems names the fields the server's schema refused, by title.
func schemaProblems(q questionView, msg string, details any) []answerProblem {
	errs, ok := details.([]argcheck.Error)
	if !ok || len(errs) == 0 {
		return []answerProblem{{Message: "The answer does not fit what the server asked: " + msg}}
	}
	var out []answerProblem
	for _, e := range errs {
		p := answerProblem{Message: e.Message}
		name := strings.SplitN(strings.TrimPrefix(e.Path, "/"), "/", 2)[0]
		name = strings.NewReplacer("~1", "/", "~0", "~").Replace(name)
		for _, f := range q.Fields {
			if f.rawName(q) == name && name != "" {
				p.Field = f.label()
			}
		}
		if p.Field == "" && e.Path != "" {
			p.Field = visible(e.Path)
		}
		out = append(out, p)
	}
	return out
}

// declined is the answer that declines every one of a call's questions.
func declined(pc execution.Pending) map[string]json.RawMessage {
	out := map[string]json.RawMessage{}
	for key := range pc.Questions {
		out[key] = json.RawMessage(`{"action":"decline"}`)
	}
	return out
}
