package argcheck

import (
	"encoding/json"
	"testing"
)

// flatSchemas are schemas parseFlat takes, over which the fuzz target
// holds accepts to the validator.
var flatSchemas = []string{
	`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`,
	`{"type":"object","properties":{"n":{"type":"integer","description":"d"},"x":{"type":"number"},"b":{"type":"boolean"},"any":{},"t":true},"additionalProperties":false}`,
	`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"n":{"type":"integer"}},"required":["n","m"]}`,
	`{"$schema":"http://json-schema.org/draft-04/schema#","type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`,
	`{"properties":{"s":{"type":"string","title":"t","default":"x","examples":["y"]}},"additionalProperties":true}`,
}

func TestParseFlat(t *testing.T) {
	for _, s := range flatSchemas {
		if parseFlat(json.RawMessage(s)) == nil {
			t.Errorf("not flat: %s", s)
		}
	}
	for _, s := range []string{
		`{"type":["object","null"]}`,
		`{"type":"object","properties":{"a":{"type":"string","minLength":1}}}`,
		`{"type":"object","properties":{"a":{"type":["string","null"]}}}`,
		`{"type":"object","properties":{"a":{"type":"array"}}}`,
		`{"type":"object","properties":{"a":false}}`,
		`{"type":"object","additionalProperties":{"type":"string"}}`,
		`{"type":"object","properties":{"a":{"$ref":"#/$defs/x"}},"$defs":{"x":{}}}`,
		`{"type":"object","minProperties":1}`,
		`{"type":"object","properties":{"a":{"type":"string","enum":["x"]}}}`,
		`not json`,
	} {
		if parseFlat(json.RawMessage(s)) != nil {
			t.Errorf("flat: %s", s)
		}
	}
}

func TestFlatAccepts(t *testing.T) {
	f := parseFlat(json.RawMessage(flatSchemas[1]))
	for _, tc := range []struct {
		args string
		want bool
	}{
		{`{}`, true},
		{`{"n":1,"x":1.5,"b":false,"any":[1,{"a":2}],"t":null}`, true},
		{`{"n":-3}`, true},
		{`{"n":1.5}`, false},
		{`{"n":1.0}`, false}, // the validator's to say
		{`{"n":1e2}`, false},
		{`{"n":"1"}`, false},
		{`{"x":"1"}`, false},
		{`{"b":"true"}`, false},
		{`{"b":null}`, false},
		{`{"other":1}`, false}, // additionalProperties: false
		{`{"n":1,"n":2}`, false},
		{" {\n \"n\" : 1 ,\t\"x\":2e3 , \"b\" :true } ", true},
		{`{"any":"}{,\"]","n":1,"t":[{"n":"x"},"]"]}`, true},
		{`{"any":{"n":"x","b":[[]]},"n":"1"}`, false},
		{`{"\u006e":"x"}`, false}, // an escaped name: the validator decodes it
		{`{"n\u00e9":1}`, false},
		{`{"x":-0.5,"n":-0}`, true},
	} {
		if got := f.accepts([]byte(tc.args)); got != tc.want {
			t.Errorf("%s: accepts %v, want %v", tc.args, got, tc.want)
		}
	}
	req := parseFlat(json.RawMessage(flatSchemas[0]))
	if req.accepts([]byte(`{}`)) || req.accepts([]byte(`{"text":1}`)) || !req.accepts([]byte(`{"text":"a","more":[]}`)) {
		t.Error("required or open properties misread")
	}
	many := []byte(`{`)
	for i := range maxFlatMembers + 1 {
		if i > 0 {
			many = append(many, ',')
		}
		many = append(many, []byte(`"k`+string(rune('a'+i%26))+string(rune('a'+i/26))+`":1`)...)
	}
	many = append(many, '}')
	if req.accepts(many) {
		t.Error("more members than maxFlatMembers were read")
	}
}

// FuzzFlatAgreesWithValidator: whatever accepts vouches for, the validator
// accepts too; a failure still reads as the validator writes it.
func FuzzFlatAgreesWithValidator(f *testing.F) {
	for i, s := range []string{`{}`, `{"text":"a"}`, `{"n":1,"x":2,"b":true}`, `{"n":1.0}`, `{"text":1}`, `{"n":1,"m":2}`, `{"s":"\ud800"}`, `{"n":12345678901234567890}`} {
		f.Add(uint8(i), []byte(s))
	}
	validators := make([]*Validator, len(flatSchemas))
	for i, s := range flatSchemas {
		validators[i] = New(json.RawMessage(s))
		if _, err := validators[i].compiled(); err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, args []byte) {
		v := validators[int(which)%len(validators)]
		if !json.Valid(args) || len(args) == 0 || args[0] != '{' {
			return
		}
		if !v.flat.accepts(args) {
			return
		}
		inst, err := decodeArgs(args)
		if err != nil {
			t.Fatalf("%s: accepted, but not decodable: %v", args, err)
		}
		if err := v.schema.Validate(inst); err != nil {
			t.Fatalf("%s against %s: accepted, the validator says %v", args, v.raw, err)
		}
	})
}
