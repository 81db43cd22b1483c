package elicit

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/mail"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// field is one field of a form, as MCP's elicitation schemas define them:
// a string (with a format or bounds), a number or integer (with bounds), a
// boolean, a single choice (enum, with enumNames; or oneOf const/title)
// or several (an array whose items are such a choice).
type field struct {
	name, title, description string
	typ, format              string
	required                 bool
	// choices and their titles, for single and multi choice.
	choices, titles []string
	multi           bool
	def             json.RawMessage
	minLen, maxLen  *int
	min, max        *float64
	minItems        *int
	maxItems        *int
}

type choice struct {
	Const string `json:"const"`
	Title string `json:"title"`
}

func parseField(name string, raw json.RawMessage) (*field, error) {
	var s struct {
		Type        string          `json:"type"`
		Title       string          `json:"title"`
		Description string          `json:"description"`
		Format      string          `json:"format"`
		Enum        []string        `json:"enum"`
		EnumNames   []string        `json:"enumNames"`
		OneOf       []choice        `json:"oneOf"`
		Default     json.RawMessage `json:"default"`
		MinLength   *int            `json:"minLength"`
		MaxLength   *int            `json:"maxLength"`
		Minimum     *float64        `json:"minimum"`
		Maximum     *float64        `json:"maximum"`
		MinItems    *int            `json:"minItems"`
		MaxItems    *int            `json:"maxItems"`
		Items       *struct {
			Enum  []string `json:"enum"`
			AnyOf []choice `json:"anyOf"`
		} `json:"items"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, errors.New("not a primitive field (string, number, integer, boolean, or a choice)")
	}
	f := &field{name: name, title: s.Title, description: s.Description, typ: s.Type, format: s.Format, def: s.Default,
		minLen: s.MinLength, maxLen: s.MaxLength, min: s.Minimum, max: s.Maximum, minItems: s.MinItems, maxItems: s.MaxItems}
	switch s.Type {
	case "string":
		f.setChoices(s.Enum, s.EnumNames, s.OneOf)
	case "number", "integer", "boolean":
	case "array":
		if s.Items == nil {
			return nil, errors.New("an array field without items")
		}
		f.multi = true
		f.setChoices(s.Items.Enum, nil, s.Items.AnyOf)
		if len(f.choices) == 0 {
			return nil, errors.New("an array field whose items are not choices")
		}
	default:
		return nil, fmt.Errorf("type %q is not one a form field may have", s.Type)
	}
	return f, nil
}

func (f *field) setChoices(enum, names []string, oneOf []choice) {
	if len(enum) > 0 {
		f.choices = enum
		if len(names) == len(enum) {
			f.titles = names
		}
		return
	}
	for _, c := range oneOf {
		f.choices = append(f.choices, c.Const)
		f.titles = append(f.titles, c.Title)
	}
}

// label is how the field is named in the prompt: its title, else its name.
func (f *field) label() string {
	if f.title != "" {
		return printable(f.title, 120, false)
	}
	return printable(f.name, 120, false)
}

// hint says what the field takes.
func (f *field) hint() string {
	switch {
	case len(f.choices) > 0:
		var opts []string
		for i, c := range f.choices {
			o := fmt.Sprintf("%d) %s", i+1, printable(f.choiceTitle(i), 80, false))
			if t := f.choiceTitle(i); t != c {
				o += " [" + printable(c, 80, false) + "]"
			}
			opts = append(opts, o)
		}
		if f.multi {
			return "any of (comma-separated): " + strings.Join(opts, ", ")
		}
		return "one of: " + strings.Join(opts, ", ")
	case f.typ == "boolean":
		return "yes/no"
	case f.typ == "integer":
		return "a whole number" + f.bounds()
	case f.typ == "number":
		return "a number" + f.bounds()
	}
	h := "text"
	switch f.format {
	case "email":
		h = "an email address"
	case "uri":
		h = "a URI"
	case "date":
		h = "a date, YYYY-MM-DD"
	case "date-time":
		h = "a date and time, RFC 3339"
	}
	if f.minLen != nil || f.maxLen != nil {
		h += fmt.Sprintf(", %s to %s characters", intOr(f.minLen, "0"), intOr(f.maxLen, "any number of"))
	}
	return h
}

func (f *field) bounds() string {
	switch {
	case f.min != nil && f.max != nil:
		return fmt.Sprintf(" from %v to %v", *f.min, *f.max)
	case f.min != nil:
		return fmt.Sprintf(" ≥ %v", *f.min)
	case f.max != nil:
		return fmt.Sprintf(" ≤ %v", *f.max)
	}
	return ""
}

func intOr(p *int, s string) string {
	if p == nil {
		return s
	}
	return strconv.Itoa(*p)
}

func (f *field) choiceTitle(i int) string {
	if i < len(f.titles) && f.titles[i] != "" {
		return f.titles[i]
	}
	return f.choices[i]
}

// defaultShown is the default as the person would type it, "" for none.
func (f *field) defaultShown() string {
	if len(f.def) == 0 {
		return ""
	}
	var v any
	if json.Unmarshal(f.def, &v) != nil {
		return ""
	}
	switch d := v.(type) {
	case bool:
		if d {
			return "yes"
		}
		return "no"
	case string:
		return printable(d, 120, false)
	case []any:
		var parts []string
		for _, x := range d {
			parts = append(parts, printable(fmt.Sprint(x), 80, false))
		}
		return strings.Join(parts, ", ")
	}
	return printable(fmt.Sprint(v), 120, false)
}

// parse reads what the person typed (not empty) as the field's value.
func (f *field) parse(in string) (any, error) {
	if f.multi {
		var out []any
		for _, part := range strings.Split(in, ",") {
			if part = strings.TrimSpace(part); part == "" {
				continue
			}
			c, err := f.pick(part)
			if err != nil {
				return nil, err
			}
			if !slices.Contains(out, any(c)) {
				out = append(out, c)
			}
		}
		if f.minItems != nil && len(out) < *f.minItems {
			return nil, fmt.Errorf("choose at least %d", *f.minItems)
		}
		if f.maxItems != nil && len(out) > *f.maxItems {
			return nil, fmt.Errorf("choose at most %d", *f.maxItems)
		}
		return out, nil
	}
	if len(f.choices) > 0 {
		return f.pick(in)
	}
	switch f.typ {
	case "boolean":
		switch strings.ToLower(in) {
		case "y", "yes", "true", "1":
			return true, nil
		case "n", "no", "false", "0":
			return false, nil
		}
		return nil, errors.New("answer yes or no")
	case "number", "integer":
		n, err := strconv.ParseFloat(in, 64)
		if err != nil || math.IsInf(n, 0) || math.IsNaN(n) {
			return nil, errors.New("not a number")
		}
		if f.typ == "integer" && n != math.Trunc(n) {
			return nil, errors.New("not a whole number")
		}
		if (f.min != nil && n < *f.min) || (f.max != nil && n > *f.max) {
			return nil, fmt.Errorf("out of range:%s", f.bounds())
		}
		return n, nil
	}
	n := utf8.RuneCountInString(in)
	if (f.minLen != nil && n < *f.minLen) || (f.maxLen != nil && n > *f.maxLen) {
		return nil, fmt.Errorf("%d characters; want %s to %s", n, intOr(f.minLen, "0"), intOr(f.maxLen, "any number of"))
	}
	switch f.format {
	case "email":
		if _, err := mail.ParseAddress(in); err != nil {
			return nil, errors.New("not an email address")
		}
	case "uri":
		if u, err := url.Parse(in); err != nil || u.Scheme == "" {
			return nil, errors.New("not an absolute URI")
		}
	case "date":
		if _, err := time.Parse(time.DateOnly, in); err != nil {
			return nil, errors.New("not a date (YYYY-MM-DD)")
		}
	case "date-time":
		if _, err := time.Parse(time.RFC3339, in); err != nil {
			return nil, errors.New("not an RFC 3339 date and time (2026-01-02T15:04:05Z)")
		}
	}
	return in, nil
}

// pick reads a choice: its value, its number in the list, or its value
// or title without regard to case.
func (f *field) pick(in string) (string, error) {
	// The value as written wins over a number that could be its index.
	if slices.Contains(f.choices, in) {
		return in, nil
	}
	if i, err := strconv.Atoi(in); err == nil && i >= 1 && i <= len(f.choices) {
		return f.choices[i-1], nil
	}
	for i, c := range f.choices {
		if strings.EqualFold(c, in) || strings.EqualFold(f.choiceTitle(i), in) {
			return c, nil
		}
	}
	return "", fmt.Errorf("%q is not one of the choices", printable(in, 80, false))
}
