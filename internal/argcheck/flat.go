package argcheck

import (
	"bytes"
	"encoding/json"
	"slices"

	"github.com/go-json-experiment/json/jsontext"
)

// flatSchema is an input schema of the shape most tools have: an object
// whose listed properties each ask for one primitive type (or anything),
// some of them required, others allowed or not. accepts decides the
// arguments it is sure of without the validator, which a call otherwise
// runs with cold caches (its code and data evicted by the network path
// since the last call): several microseconds a call, for the most common
// schemas there are. It only ever says "valid": arguments it cannot
// vouch for go to the validator, which also writes the errors, so a
// failure reads the same either way.
type flatSchema struct {
	props    map[string]jsontext.Kind // 0: any value
	integers map[string]bool          // "integer": a number, integral
	required []string
	closed   bool // additionalProperties: false
}

// maxFlatMembers bounds the members accepts reads: its check of a name
// given twice is a scan of those before it.
const maxFlatMembers = 32

// annotation reports whether a schema keyword asserts nothing.
func annotation(k string) bool {
	switch k {
	case "title", "description", "$comment", "default", "examples":
		return true
	}
	return false
}

// parseFlat returns raw as a flatSchema, or nil when it asks for anything
// more.
func parseFlat(raw json.RawMessage) *flatSchema {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return nil
	}
	f := &flatSchema{props: map[string]jsontext.Kind{}, integers: map[string]bool{}}
	for k, val := range m {
		switch {
		case annotation(k), k == "$schema":
		case k == "type":
			if string(bytes.TrimSpace(val)) != `"object"` {
				return nil
			}
		case k == "required":
			if json.Unmarshal(val, &f.required) != nil {
				return nil
			}
		case k == "additionalProperties":
			var open bool
			if json.Unmarshal(val, &open) != nil {
				return nil
			}
			f.closed = !open
		case k == "properties":
			var props map[string]json.RawMessage
			if json.Unmarshal(val, &props) != nil {
				return nil
			}
			for name, p := range props {
				kind, integer, ok := flatProperty(p)
				if !ok {
					return nil
				}
				f.props[name] = kind
				f.integers[name] = integer
			}
		default:
			return nil
		}
	}
	return f
}

// flatProperty reads a property's schema: true, {} or one primitive type,
// with annotations.
func flatProperty(raw json.RawMessage) (kind jsontext.Kind, integer, ok bool) {
	if string(bytes.TrimSpace(raw)) == "true" {
		return 0, false, true
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return 0, false, false
	}
	for k, val := range m {
		if annotation(k) {
			continue
		}
		if k != "type" {
			return 0, false, false
		}
		var t string
		if json.Unmarshal(val, &t) != nil {
			return 0, false, false
		}
		switch t {
		case "string":
			kind = '"'
		case "number":
			kind = '0'
		case "integer":
			kind, integer = '0', true
		case "boolean":
			kind = 't'
		default:
			return 0, false, false
		}
	}
	return kind, integer, true
}

// accepts reports whether args (a valid JSON object) surely meets the
// schema. false means "ask the validator", not "invalid".
func (f *flatSchema) accepts(args []byte) bool {
	d := jsontext.NewDecoder(bytes.NewReader(args))
	if tok, err := d.ReadToken(); err != nil || tok.Kind() != '{' {
		return false
	}
	seen := make([]string, 0, len(f.props))
	for d.PeekKind() != '}' {
		k, err := d.ReadToken()
		if err != nil {
			return false
		}
		name := k.String()
		if len(seen) == maxFlatMembers {
			return false // many names: the validator's map is the better check
		}
		if slices.Contains(seen, name) {
			return false // a name given twice: the validator reads its last value
		}
		seen = append(seen, name)
		want, listed := f.props[name]
		if !listed && f.closed {
			return false
		}
		v, err := d.ReadValue()
		if err != nil {
			return false
		}
		if !listed || (want == 0 && !f.integers[name]) {
			continue
		}
		got := v.Kind()
		if got == 'f' {
			got = 't'
		}
		if got != want {
			return false
		}
		if f.integers[name] && bytes.ContainsAny(v, ".eE") {
			return false // 1.0 and 1e2: what each draft makes of them is the validator's to say
		}
	}
	for _, r := range f.required {
		if !slices.Contains(seen, r) {
			return false
		}
	}
	return true
}
