package argcheck

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/fault"
)

const createSchema = `{
  "type": "object",
  "properties": {
    "user": {
      "type": "object",
      "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
      "required": ["name"]
    },
    "tags": {"type": "array", "items": {"type": "string"}}
  },
  "required": ["user"],
  "additionalProperties": false
}`

func TestSchemaValidation(t *testing.T) {
	v := New(json.RawMessage(createSchema))
	cases := []struct {
		args  string
		paths []string
	}{
		{`{"user":{"name":"a"}}`, nil},
		{`{"user":{"name":"a","age":1.5}}`, []string{"/user/age"}},
		{`{"user":{}}`, []string{"/user"}},
		{`{"user":{"name":"a"},"tags":[1,"x",{}]}`, []string{"/tags/0", "/tags/2"}},
		{`{"user":{"name":"a"},"nope":1}`, []string{""}},
	}
	for _, tc := range cases {
		errs, err := v.validate(json.RawMessage(tc.args))
		if err != nil {
			t.Fatal(err)
		}
		var paths []string
		for _, e := range errs {
			paths = append(paths, e.Path)
		}
		if strings.Join(paths, ",") != strings.Join(tc.paths, ",") {
			t.Errorf("%s: paths %q (%+v); want %q", tc.args, paths, errs, tc.paths)
		}
	}
	if !strings.Contains(summarize([]Error{{Path: "", Message: "m"}}), "(root): m") {
		t.Error("summarize lost the root")
	}
}

func TestSchemaRefusesExternalRefs(t *testing.T) {
	for _, schema := range []string{
		`{"$ref":"file:///etc/passwd"}`,
		`{"type":"object","properties":{"a":{"$ref":"other.json"}}}`,
		`{"$ref":"https://example.com/schema.json"}`,
		`not json`,
	} {
		v := New(json.RawMessage(schema))
		if _, err := v.validate(json.RawMessage(`{"a":1}`)); err == nil {
			t.Errorf("schema %s compiled", schema)
		}
	}
	// A schema that only names a draft still works offline.
	v := New(json.RawMessage(`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","required":["x"]}`))
	errs, err := v.validate(json.RawMessage(`{}`))
	if err != nil || len(errs) != 1 {
		t.Errorf("draft-07 schema: %v, %v", errs, err)
	}
}

func TestCheck(t *testing.T) {
	v := New(json.RawMessage(`{"type":"object","properties":{"n":{"type":"number"}},"required":["n"]}`))
	tests := []struct {
		args, want string
		code       fault.Code
	}{
		{`{"n": 1}`, `{"n": 1}`, ""},
		{``, "", fault.InvalidArguments},
		{`null`, "", fault.InvalidArguments},
		{`[1]`, "", fault.InvalidArguments},
		{`{"n": "x"}`, "", fault.InvalidArguments},
		{`{bad`, "", fault.InvalidArguments},
	}
	for _, tt := range tests {
		got, err := v.Check(json.RawMessage(tt.args))
		if tt.code != "" {
			if err == nil || err.Code != tt.code {
				t.Errorf("%q: err %v, want %s", tt.args, err, tt.code)
			}
			continue
		}
		if err != nil || string(got) != tt.want {
			t.Errorf("%q: %s %v", tt.args, got, err)
		}
	}
	if got, err := New(nil).Check(nil); err != nil || string(got) != "{}" {
		t.Errorf("no schema: %s %v", got, err)
	}
	if _, err := New(json.RawMessage(`{"type": 5}`)).Check(json.RawMessage(`{}`)); err == nil || err.Code != fault.ToolError {
		t.Errorf("unusable schema: %v", err)
	}
}

// TestAnyObject: only schemas that accept every object skip the
// validator, and Check answers for them as the validator does.
func TestAnyObject(t *testing.T) {
	for _, tc := range []struct {
		schema string
		want   bool
	}{
		{`{"type":"object"}`, true},
		{`{"type": "object", "title": "t", "description": "d", "$comment": "c", "$schema": "https://json-schema.org/draft/2020-12/schema"}`, true},
		{`{}`, true}, // accepts every value, and Check has required an object
		{`{"type":"object","properties":{"a":{"type":"string"}}}`, false},
		{`{"type":"object","required":["a"]}`, false},
		{`{"type":"object","additionalProperties":false}`, false},
		{`{"type":"object","maxProperties":1}`, false},
		{`{"type":["object","null"]}`, false},
		{`{"type":"object","type":"string"}`, false},
		{`{"type":"object","not":{}}`, false},
	} {
		v := New(json.RawMessage(tc.schema))
		if _, err := v.compiled(); err != nil {
			t.Fatalf("%s: %v", tc.schema, err)
		}
		if v.anyObject != tc.want {
			t.Errorf("%s: anyObject %v, want %v", tc.schema, v.anyObject, tc.want)
		}
		slow := &Validator{raw: v.raw}
		slow.once.Do(func() { slow.schema, slow.err = compileSchema(slow.raw) })
		for _, args := range []string{`{}`, `{"a":1}`, `{"a":"x","b":[1,2]}`, `[1]`, `"s"`, `null`, `{`} {
			_, fast := v.Check(json.RawMessage(args))
			_, want := slow.Check(json.RawMessage(args))
			if (fast == nil) != (want == nil) || (fast != nil && fast.Code != want.Code) {
				t.Errorf("%s with %s: %v, the validator says %v", tc.schema, args, fast, want)
			}
		}
	}
}
