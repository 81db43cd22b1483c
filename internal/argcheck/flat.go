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

// accepts reports whether args (a JSON object that json.Valid has passed)
// surely meets the schema. false means "ask the validator", not "invalid".
// It reads args in one pass without allocating, since validity is known:
// a name with an escape or a byte past ASCII, which the validator reads
// decoded, is left to the validator.
func (f *flatSchema) accepts(args []byte) bool {
	s := scan{b: args}
	if s.byte() != '{' {
		return false
	}
	var seen [maxFlatMembers][]byte
	n := 0
	if s.peek() == '}' {
		return f.hasRequired(seen[:0])
	}
	for {
		name, ok := s.plainName()
		if !ok || n == maxFlatMembers {
			return false // many names: the validator's map is the better check
		}
		for _, k := range seen[:n] {
			if bytes.Equal(k, name) {
				return false // a name given twice: the validator reads its last value
			}
		}
		seen[n] = name
		n++
		want, listed := f.props[string(name)]
		if !listed && f.closed {
			return false
		}
		if s.byte() != ':' {
			return false
		}
		v, ok := s.value()
		if !ok {
			return false
		}
		if listed && (want != 0 || f.integers[string(name)]) {
			got := jsontext.Kind(v[0])
			switch got {
			case 'f':
				got = 't'
			case '-', '1', '2', '3', '4', '5', '6', '7', '8', '9':
				got = '0'
			}
			if got != want {
				return false
			}
			if f.integers[string(name)] && bytes.ContainsAny(v, ".eE") {
				return false // 1.0 and 1e2: what each draft makes of them is the validator's to say
			}
		}
		switch s.byte() {
		case ',':
		case '}':
			return f.hasRequired(seen[:n])
		default:
			return false
		}
	}
}

// hasRequired reports whether every required name is among seen.
func (f *flatSchema) hasRequired(seen [][]byte) bool {
	for _, r := range f.required {
		if !slices.ContainsFunc(seen, func(k []byte) bool { return string(k) == r }) {
			return false
		}
	}
	return true
}

// scan reads a JSON text json.Valid has passed. Its methods skip the
// whitespace before what they read and report false on anything they do
// not expect rather than trusting the text's validity for bounds.
type scan struct {
	b []byte
	i int
}

func (s *scan) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek is the next byte after whitespace (0 at the end).
func (s *scan) peek() byte {
	s.space()
	if s.i == len(s.b) {
		return 0
	}
	return s.b[s.i]
}

// byte reads the next byte after whitespace (0 at the end).
func (s *scan) byte() byte {
	c := s.peek()
	if c != 0 {
		s.i++
	}
	return c
}

// plainName reads a member name made of printable ASCII without escapes:
// its bytes are the name the validator decodes.
func (s *scan) plainName() ([]byte, bool) {
	if s.byte() != '"' {
		return nil, false
	}
	start := s.i
	for ; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return s.b[start : s.i-1], true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return nil, false
		}
	}
	return nil, false
}

// value skips one value and returns its text.
func (s *scan) value() ([]byte, bool) {
	s.space()
	start, depth := s.i, 0
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch c {
		case '"':
			s.i++
			for s.i < len(s.b) && s.b[s.i] != '"' {
				if s.b[s.i] == '\\' {
					s.i++
				}
				s.i++
			}
			if s.i >= len(s.b) {
				return nil, false
			}
			s.i++
		case '{', '[':
			depth++
			s.i++
		case '}', ']':
			if depth == 0 {
				return s.b[start:s.i], s.i > start
			}
			depth--
			s.i++
		case ',':
			if depth == 0 {
				return s.b[start:s.i], s.i > start
			}
			s.i++
		default:
			s.i++
		}
		if depth == 0 && s.i > start && (c == '"' || c == '}' || c == ']') {
			return s.b[start:s.i], true
		}
	}
	return s.b[start:s.i], depth == 0 && s.i > start
}
