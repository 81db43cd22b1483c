// Package argcheck validates tool arguments against a tool's JSON Schema
// before anything leaves the host, with santhosh-tekuri/jsonschema (a
// maintained validator supporting drafts 4 to 2020-12). MCP tools and
// capabilities share it, so both report failures the same way.
package argcheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/pml-sandbox/pml/internal/fault"
)

// Error is one reason the arguments failed the input schema; a list of them
// is the Details of an INVALID_ARGUMENTS error.
type Error struct {
	// Path is the JSON pointer of the failing value ("" is the whole
	// arguments object).
	Path    string `json:"path"`
	Message string `json:"message"`
}

// maxErrors bounds the details of one INVALID_ARGUMENTS error.
const maxErrors = 20

// schemaURL names the one resource each compiler holds. Relative $refs
// resolve against it and then fail in denyLoader, as intended.
const schemaURL = "https://pml.invalid/tool-input.json"

// denyLoader refuses every external $ref. jsonschema's default loader reads
// file:// URLs, which would let a remote server's schema make the host read
// its local files.
type denyLoader struct{}

func (denyLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external schema reference %q is not allowed", url)
}

// Validator compiles one tool's input schema on first use and keeps it. It
// is safe for concurrent use.
type Validator struct {
	raw    json.RawMessage
	once   sync.Once
	schema *jsonschema.Schema
	err    error
	// anyObject: the schema accepts every object (anyObject), so the
	// object check that comes first is the whole check.
	anyObject bool
	// flat: the schema is a flatSchema, whose accepts vouches for most
	// arguments without the validator.
	flat *flatSchema
}

func (v *Validator) compiled() (*jsonschema.Schema, error) {
	v.once.Do(func() {
		v.schema, v.err = compileSchema(v.raw)
		v.anyObject = v.err == nil && anyObject(v.raw)
		if v.err == nil && !v.anyObject {
			v.flat = parseFlat(v.raw)
		}
	})
	return v.schema, v.err
}

// anyObject reports whether raw (a schema that compiled) accepts every
// JSON object: {"type": "object"} and words that assert nothing. Any
// other keyword, or a type list, is left to the validator.
func anyObject(raw json.RawMessage) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return false
	}
	for k, val := range m {
		switch k {
		case "type":
			if string(bytes.TrimSpace(val)) != `"object"` {
				return false
			}
		case "title", "description", "$comment", "$schema":
		default:
			return false
		}
	}
	return true
}

func compileSchema(raw json.RawMessage) (*jsonschema.Schema, error) {
	// Every compile goes through here, so no path can reach the
	// uncancellable Compile with an unbounded schema.
	if err := CheckBounds(raw); err != nil {
		return nil, err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("input schema is not JSON: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(denyLoader{})
	// MCP 2025-11-25 makes 2020-12 the dialect of schemas without $schema.
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, err
	}
	return c.Compile(schemaURL)
}

// New returns a validator for the raw JSON Schema (compiled on first use).
func New(raw json.RawMessage) *Validator { return &Validator{raw: raw} }

// validate checks args (already known to be a JSON object) against the
// schema. It returns nil or the failures, sorted by path.
func (v *Validator) validate(args json.RawMessage) ([]Error, error) {
	sch, err := v.compiled()
	if err != nil || v.anyObject {
		return nil, err
	}
	if v.flat != nil && v.flat.accepts(args) {
		return nil, nil
	}
	inst, err := decodeArgs(args)
	if err != nil {
		return []Error{{Path: "", Message: "arguments are not valid JSON"}}, nil
	}
	err = sch.Validate(inst)
	if err == nil {
		return nil, nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return nil, err
	}
	return flattenValidation(ve), nil
}

// flattenValidation keeps the leaf failures: the container units ("allOf
// failed") only repeat what their children say.
func flattenValidation(ve *jsonschema.ValidationError) []Error {
	out := ve.BasicOutput()
	seen := map[Error]bool{}
	var errs []Error
	for _, u := range out.Errors {
		if u.Error == nil {
			continue
		}
		e := Error{Path: u.InstanceLocation, Message: u.Error.String()}
		if seen[e] || strings.HasPrefix(e.Message, "validation failed") {
			continue
		}
		seen[e] = true
		errs = append(errs, e)
	}
	if len(errs) == 0 {
		errs = []Error{{Path: "", Message: ve.Error()}}
	}
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].Path < errs[j].Path })
	if len(errs) > maxErrors {
		errs = errs[:maxErrors]
	}
	return errs
}

// summarize renders failures as one line for the error message.
func summarize(errs []Error) string {
	parts := make([]string, 0, min(len(errs), 3))
	for i, e := range errs {
		if i == 3 {
			parts = append(parts, fmt.Sprintf("and %d more", len(errs)-3))
			break
		}
		p := e.Path
		if p == "" {
			p = "(root)"
		}
		parts = append(parts, p+": "+e.Message)
	}
	return strings.Join(parts, "; ")
}

// Check normalises args (empty or null is {}), requires a JSON object and
// validates it. It returns the arguments to send, or INVALID_ARGUMENTS with
// the failing paths in Details; a schema that cannot be compiled is a
// TOOL_ERROR, since sending the call unchecked would defeat validation.
func (v *Validator) Check(args json.RawMessage) (json.RawMessage, *fault.Error) {
	trimmed := bytes.TrimSpace(args)
	if len(trimmed) == 0 || string(trimmed) == "null" {
		trimmed = []byte("{}")
	}
	if !json.Valid(trimmed) {
		return nil, &fault.Error{Code: fault.InvalidArguments, Message: "arguments are not valid JSON",
			Details: []Error{{Path: "", Message: "not valid JSON"}}}
	}
	if trimmed[0] != '{' {
		return nil, &fault.Error{Code: fault.InvalidArguments, Message: "arguments must be a JSON object",
			Details: []Error{{Path: "", Message: "must be an object"}}}
	}
	if len(bytes.TrimSpace(v.raw)) == 0 {
		return trimmed, nil
	}
	errs, err := v.validate(trimmed)
	if err != nil {
		return nil, fault.Wrap(fault.ToolError, err, "the tool's input schema is unusable")
	}
	if len(errs) > 0 {
		return nil, &fault.Error{Code: fault.InvalidArguments,
			Message: "arguments do not match the input schema: " + summarize(errs), Details: errs}
	}
	return trimmed, nil
}

// Compile reports whether raw is a usable schema (for checks at save time):
// within the bounds of CheckBounds and compilable.
func Compile(raw json.RawMessage) error {
	_, err := compileSchema(raw)
	return err
}

// Schema returns the raw schema the validator was made from.
func (v *Validator) Schema() json.RawMessage { return v.raw }
