package argcheck

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// FuzzDecodeArgs: for every valid JSON text, decodeArgs gives what
// jsonschema.UnmarshalJSON gives (the values the validator reads).
func FuzzDecodeArgs(f *testing.F) {
	for _, s := range []string{
		`{}`, `[]`, `{"a":[]}`, `{"text":"one two three"}`, `null`, `true`, `"s"`, `0`, `-0`, `1e400`, `-1.5E-3`,
		`12345678901234567890123`, `{"a":1,"a":2}`, `{"a":{"a":{"b":[1,{"c":null}]}}}`,
		`{"s":"\u00e9\ud83d\ude00\n\t\\\"\/"}`, `{"lone":"\ud800"}`, `{"low":"\udc00x"}`, "{\"bad\":\"\xff\xfe\"}",
		"{\"cut\":\"\xe2\x82\"}", "{\"\xc0\xaf\":1}", ` { "a" : [ 1 , 2 ] } `, `[[[[[]]]]]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return
		}
		want, werr := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		got, gerr := decodeArgs(b)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("%q: error %v, jsonschema's %v", b, gerr, werr)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: %#v, jsonschema's %#v", b, got, want)
		}
	})
}
