package execution

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"sync"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/pml-sandbox/pml/internal/fault"
)

// DecodeStrict decodes one JSON document into v as strictly as this
// package's requests (decodeStrict), for a front end's other documents (a
// capability to save). Errors are INVALID_REQUEST.
func DecodeStrict(data []byte, v any, what string) *fault.Error { return decodeStrict(data, v, what) }

// decodeStrict decodes one JSON value into v: exact, case-sensitive field
// names, no unknown or repeated fields, nothing after the value, valid
// UTF-8, nesting bounded by the decoder (10,000 levels). what names the
// document in the error ("an execute request").
//
// encoding/json matches field names case-insensitively and keeps the last
// of repeated names: {"ALLOW_DESTRUCTIVE": true} would be read as
// allow_destructive while a proxy looking for the real name saw nothing.
// The decoder here is the JSON v2 prototype maintained by the Go team
// (github.com/go-json-experiment/json), which is strict in exactly these
// ways; encoding/json still writes every answer.
func decodeStrict(data []byte, v any, what string) *fault.Error {
	err := jsonv2.Unmarshal(data, v, jsonv2.RejectUnknownMembers(true))
	if err == nil {
		return nil
	}
	if trailing(data) {
		return fault.New(fault.InvalidRequest, "the body is not %s: it has data after the JSON value", what)
	}
	return fault.New(fault.InvalidRequest, "the body is not %s: %s", what, explain(err, v))
}

// trailing reports whether data is one whole JSON value followed by
// something else (asked only once decoding has failed).
func trailing(data []byte) bool {
	dec := jsontext.NewDecoder(bytes.NewReader(data))
	if _, err := dec.ReadValue(); err != nil {
		return false
	}
	_, err := dec.ReadToken()
	return !errors.Is(err, io.EOF)
}

// explain rewords the decoder's error for a caller: an unknown field is
// named, with the field it is probably meant to be.
func explain(err error, v any) string {
	var se *jsonv2.SemanticError
	if errors.As(err, &se) && errors.Is(err, jsonv2.ErrUnknownName) {
		name := se.JSONPointer.LastToken()
		msg := fmt.Sprintf("unknown field %q", name)
		if where := string(se.JSONPointer.Parent()); where != "" {
			msg += " in " + where
		}
		for _, known := range fieldNames(reflect.TypeOf(v)) {
			if strings.EqualFold(known, name) {
				return msg + fmt.Sprintf(" (field names are exact: %q)", known)
			}
		}
		return msg
	}
	return err.Error()
}

var fieldCache sync.Map // reflect.Type → []string

// fieldNames lists the JSON names of a struct's fields (through pointers).
func fieldNames(t reflect.Type) []string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	if v, ok := fieldCache.Load(t); ok {
		return v.([]string)
	}
	var names []string
	for f := range t.Fields() {
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case tag == "-" || !f.IsExported():
		case f.Anonymous && tag == "":
			names = append(names, fieldNames(f.Type)...)
		case tag != "":
			names = append(names, tag)
		default:
			names = append(names, f.Name)
		}
	}
	slices.Sort(names)
	fieldCache.Store(t, names)
	return names
}
