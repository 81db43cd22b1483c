package tsdecl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// maxJSONDepth bounds the nesting of a schema document we read at all; the
// generator has its own, smaller, depth limit on what it renders.
const maxJSONDepth = 256

// jvalue is a JSON value that keeps the order of object members, so the
// declarations list properties in the order the schema's author chose.
type jvalue struct {
	kind  jkind
	keys  []string  // object member names, in order
	vals  []*jvalue // object member values, parallel to keys
	items []*jvalue // array elements
	str   string    // string value, or a number's literal text
	b     bool
}

type jkind uint8

const (
	jNull jkind = iota
	jBool
	jNumber
	jString
	jArray
	jObject
)

// parseJSON decodes one JSON document. It fails on trailing data and on
// nesting deeper than maxJSONDepth.
func parseJSON(raw []byte) (*jvalue, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data after JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder, depth int) (*jvalue, error) {
	if depth > maxJSONDepth {
		return nil, fmt.Errorf("JSON nested deeper than %d", maxJSONDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case nil:
		return &jvalue{kind: jNull}, nil
	case bool:
		return &jvalue{kind: jBool, b: t}, nil
	case json.Number:
		return &jvalue{kind: jNumber, str: t.String()}, nil
	case string:
		return &jvalue{kind: jString, str: t}, nil
	case json.Delim:
		switch t {
		case '{':
			v := &jvalue{kind: jObject}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				val, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				if i := v.index(k); i >= 0 {
					v.vals[i] = val // the last duplicate wins, as in encoding/json
					continue
				}
				v.keys = append(v.keys, k)
				v.vals = append(v.vals, val)
			}
			_, err := dec.Token() // '}'
			return v, err
		case '[':
			v := &jvalue{kind: jArray}
			for dec.More() {
				item, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				v.items = append(v.items, item)
			}
			_, err := dec.Token() // ']'
			return v, err
		}
	}
	return nil, fmt.Errorf("unexpected JSON token %v", tok)
}

func (v *jvalue) index(key string) int {
	for i, k := range v.keys {
		if k == key {
			return i
		}
	}
	return -1
}

// get returns an object member, or nil.
func (v *jvalue) get(key string) *jvalue {
	if v == nil || v.kind != jObject {
		return nil
	}
	if i := v.index(key); i >= 0 {
		return v.vals[i]
	}
	return nil
}

// getString returns a string member, or "".
func (v *jvalue) getString(key string) string {
	if m := v.get(key); m != nil && m.kind == jString {
		return m.str
	}
	return ""
}

// isTrue reports whether a member is the boolean true.
func (v *jvalue) isTrue(key string) bool {
	m := v.get(key)
	return m != nil && m.kind == jBool && m.b
}

// encode writes the value back as compact JSON.
func (v *jvalue) encode(w *bytes.Buffer) {
	switch v.kind {
	case jNull:
		w.WriteString("null")
	case jBool:
		if v.b {
			w.WriteString("true")
		} else {
			w.WriteString("false")
		}
	case jNumber:
		w.WriteString(v.str)
	case jString:
		w.WriteString(quote(v.str))
	case jArray:
		w.WriteByte('[')
		for i, it := range v.items {
			if i > 0 {
				w.WriteByte(',')
			}
			it.encode(w)
		}
		w.WriteByte(']')
	case jObject:
		w.WriteByte('{')
		for i, k := range v.keys {
			if i > 0 {
				w.WriteByte(',')
			}
			w.WriteString(quote(k))
			w.WriteByte(':')
			v.vals[i].encode(w)
		}
		w.WriteByte('}')
	}
}

// quote returns s as a double-quoted string literal valid in both JSON and
// TypeScript (line separators escaped, HTML characters left alone).
func quote(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return string(bytes.TrimRight(b.Bytes(), "\n"))
}
