package argcheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"

	"github.com/go-json-experiment/json/jsontext"
)

// decodeArgs reads args (which json.Valid has passed) into the values
// jsonschema validates, as jsonschema.UnmarshalJSON would: objects as
// map[string]any (a name given twice: its last value), arrays as []any,
// numbers as json.Number (their text), strings (invalid UTF-8 as U+FFFD),
// booleans and nil. It reads tokens with jsontext rather than through
// encoding/json's reflection: this decode is half of a call's argument
// check (issue 43). FuzzDecodeArgs holds it to jsonschema's.
func decodeArgs(args []byte) (any, error) {
	d := jsontext.NewDecoder(bytes.NewBuffer(args), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	v, err := readValue(d)
	if err != nil {
		return nil, err
	}
	if _, err := d.ReadToken(); err != io.EOF {
		return nil, errors.New("invalid character after top-level value")
	}
	return v, nil
}

func readValue(d *jsontext.Decoder) (any, error) {
	tok, err := d.ReadToken()
	if err != nil {
		return nil, err
	}
	switch tok.Kind() {
	case 'n':
		return nil, nil
	case 'f', 't':
		return tok.Bool(), nil
	case '"':
		return tok.String(), nil
	case '0':
		return json.Number(tok.String()), nil
	case '{':
		m := map[string]any{}
		for d.PeekKind() != '}' {
			k, err := d.ReadToken()
			if err != nil {
				return nil, err
			}
			name := k.String()
			v, err := readValue(d)
			if err != nil {
				return nil, err
			}
			m[name] = v
		}
		_, err := d.ReadToken()
		return m, err
	case '[':
		a := []any{}
		for d.PeekKind() != ']' {
			v, err := readValue(d)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err := d.ReadToken()
		return a, err
	}
	return nil, errors.New("unexpected JSON token")
}
