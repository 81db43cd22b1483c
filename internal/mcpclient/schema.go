package mcpclient

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// ArgError is one reason the arguments failed the input schema; a list of
// them is the Details of an INVALID_ARGUMENTS error.
type ArgError struct {
	// Path is the JSON pointer of the failing value ("" is the whole
	// arguments object).
	Path    string `json:"path"`
	Message string `json:"message"`
}

// maxArgErrors bounds the details of one INVALID_ARGUMENTS error.
const maxArgErrors = 20

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

// inputValidator compiles one tool's input schema on first use and keeps it.
type inputValidator struct {
	raw    json.RawMessage
	once   sync.Once
	schema *jsonschema.Schema
	err    error
}

func (v *inputValidator) compiled() (*jsonschema.Schema, error) {
	v.once.Do(func() { v.schema, v.err = compileSchema(v.raw) })
	return v.schema, v.err
}

func compileSchema(raw json.RawMessage) (*jsonschema.Schema, error) {
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

// validate checks args (already known to be a JSON object) against the
// schema. It returns nil or the failures, sorted by path.
func (v *inputValidator) validate(args json.RawMessage) ([]ArgError, error) {
	sch, err := v.compiled()
	if err != nil {
		return nil, err
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return []ArgError{{Path: "", Message: "arguments are not valid JSON"}}, nil
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
func flattenValidation(ve *jsonschema.ValidationError) []ArgError {
	out := ve.BasicOutput()
	seen := map[ArgError]bool{}
	var errs []ArgError
	for _, u := range out.Errors {
		if u.Error == nil {
			continue
		}
		e := ArgError{Path: u.InstanceLocation, Message: u.Error.String()}
		if seen[e] || strings.HasPrefix(e.Message, "validation failed") {
			continue
		}
		seen[e] = true
		errs = append(errs, e)
	}
	if len(errs) == 0 {
		errs = []ArgError{{Path: "", Message: ve.Error()}}
	}
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].Path < errs[j].Path })
	if len(errs) > maxArgErrors {
		errs = errs[:maxArgErrors]
	}
	return errs
}

// summarize renders failures as one line for the error message.
func summarize(errs []ArgError) string {
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
