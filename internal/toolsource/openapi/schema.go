package openapi

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

// componentPrefix starts every reference to a component schema; those are
// the only schema references a tool's schema may make (they become
// "#/$defs/NAME"). A reference elsewhere in the document, or outside it,
// is refused: following one would mean reading another file or URL.
const componentPrefix = "#/components/schemas/"

// placeholderPrefix starts the references that stand for the document's
// schemas in the skeleton kin-openapi reads (see extractSchemas).
const placeholderPrefix = "#/x-pml-schema/"

// errRef is wrapped by the errors of references that cannot be followed.
var errRef = errors.New("unsupported $ref")

// componentName is the OpenAPI specification's rule for component names;
// it also makes a name its own JSON pointer token and URI fragment.
var componentName = regexp.MustCompile(`^[a-zA-Z0-9._-]+$`)

// schemas converts one document's schemas, as decoded JSON, to JSON Schema
// 2020-12 (the dialect argcheck validates and tsdecl reads), each
// component once.
type schemas struct {
	// v30: the document is OpenAPI 3.0, whose nullable and boolean
	// exclusiveMinimum/Maximum have JSON Schema forms to be rewritten.
	v30 bool
	// inline are the schemas taken out of the skeleton, by placeholder
	// number; components the component schemas by name.
	inline     []any
	components map[string]any
	done       map[string]convDef
}

// convDef is one converted component: its JSON Schema and the components
// it references.
type convDef struct {
	schema any
	refs   []string
	// same are the components it references at its own instance
	// location (through $ref, allOf, not, if...): a ring of those never
	// reaches a value, and the validator refuses every instance that
	// meets it.
	same []string
	err  error
}

// tree is a schema being built for one tool: the components it has
// referenced so far.
type tree struct {
	refs map[string]bool
	same map[string]bool
}

func newTree() *tree { return &tree{refs: map[string]bool{}, same: map[string]bool{}} }

// extractSchemas takes every schema out of the decoded document doc (each
// value of a "schema" member, and components.schemas), leaving in its
// place a reference to a placeholder, so that kin-openapi reads only the
// document's skeleton: its decoder re-reads a schema's subtree at every
// level of nesting, which makes deep schemas cost the square of their
// depth (a 190 KB document of 50-deep schemas took 1.9 s). Schemas are
// converted from the decoded JSON here instead, in one pass.
func extractSchemas(doc map[string]any, v30 bool) *schemas {
	s := &schemas{v30: v30, components: map[string]any{}, done: map[string]convDef{}}
	if comps, ok := doc["components"].(map[string]any); ok {
		if cs, ok := comps["schemas"].(map[string]any); ok {
			s.components = cs
		}
		delete(comps, "schemas")
	}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if k == "schema" {
					x[k] = map[string]any{"$ref": placeholderPrefix + strconv.Itoa(len(s.inline))}
					s.inline = append(s.inline, e)
					continue
				}
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(doc)
	return s
}

// convert returns the schema r stands for as JSON Schema, noting in t the
// components it references.
func (s *schemas) convert(r *openapi3.SchemaRef, t *tree) (any, error) {
	if r == nil {
		return map[string]any{}, nil
	}
	if n, ok := strings.CutPrefix(r.Ref, placeholderPrefix); ok {
		i, err := strconv.Atoi(n)
		if err != nil || i < 0 || i >= len(s.inline) {
			return nil, fmt.Errorf("%w %q", errRef, r.Ref)
		}
		return s.value(s.inline[i], t, false)
	}
	return nil, fmt.Errorf("%w %q", errRef, r.Ref)
}

// ref converts a reference to a component ("#/components/schemas/Pet",
// or a pointer inside one) into its $defs form.
func (s *schemas) ref(ref string, t *tree, same bool) (string, error) {
	rest, ok := strings.CutPrefix(ref, componentPrefix)
	if !ok || rest == "" {
		return "", fmt.Errorf("%w %q: only references to #/components/schemas are followed", errRef, ref)
	}
	name, _, _ := strings.Cut(rest, "/")
	if !componentName.MatchString(name) {
		return "", fmt.Errorf("%w %q: a component's name is letters, digits, '.', '-' and '_'", errRef, ref)
	}
	if _, ok := s.components[name]; !ok {
		return "", fmt.Errorf("%w %q: no such component", errRef, ref)
	}
	t.refs[name] = true
	if same && name == rest {
		t.same[name] = true
	}
	return "#/$defs/" + rest, nil
}

// dropped are keywords a tool's schema leaves out: OpenAPI's own that only
// annotate (example, xml, externalDocs, discriminator), and those that
// would move a nested schema's base URI, dialect or definitions, so that
// references no longer resolve against the tool's schema.
var dropped = map[string]bool{"example": true, "xml": true, "externalDocs": true, "discriminator": true,
	"nullable": true, "$id": true, "$schema": true, "$dynamicRef": true, "$dynamicAnchor": true,
	"$anchor": true, "$recursiveRef": true, "$recursiveAnchor": true, "$defs": true, "definitions": true}

// Keywords whose values are schemas: one, a list, or a map of them.
var (
	oneSchema = map[string]bool{"not": true, "items": true, "contains": true, "propertyNames": true,
		"if": true, "then": true, "else": true, "additionalProperties": true, "additionalItems": true,
		"unevaluatedItems": true, "unevaluatedProperties": true, "contentSchema": true}
	listSchema = map[string]bool{"allOf": true, "anyOf": true, "oneOf": true, "prefixItems": true}
	mapSchema  = map[string]bool{"properties": true, "patternProperties": true, "dependentSchemas": true}
	// sameLocation are the keywords whose subschemas apply to the
	// instance itself rather than to a part of it.
	sameLocation = map[string]bool{"not": true, "if": true, "then": true, "else": true, "allOf": true,
		"anyOf": true, "oneOf": true, "dependentSchemas": true}
)

// value converts one schema (decoded JSON) into a new value, its
// subschemas with it; same says it applies at the instance location of
// the component being converted.
func (s *schemas) value(v any, t *tree, same bool) (any, error) {
	switch x := v.(type) {
	case bool:
		return x, nil
	case nil:
		return map[string]any{}, nil
	case map[string]any:
		out := make(map[string]any, len(x))
		var errs []error
		for k, e := range x {
			switch {
			case k == "$ref":
				r, ok := e.(string)
				if !ok {
					return nil, fmt.Errorf("%w: not a string", errRef)
				}
				ref, err := s.ref(r, t, same)
				if err != nil {
					return nil, err
				}
				out[k] = ref
			case strings.HasPrefix(k, "x-") || dropped[k]:
			case oneSchema[k]:
				if list, ok := e.([]any); ok && k == "items" {
					// Draft 4's tuple form.
					c, err := s.list(list, t, false)
					errs = append(errs, err)
					out["prefixItems"] = c
					continue
				}
				c, err := s.value(e, t, same && sameLocation[k])
				errs = append(errs, err)
				out[k] = c
			case listSchema[k]:
				list, ok := e.([]any)
				if !ok {
					return nil, fmt.Errorf("%s is not a list", k)
				}
				c, err := s.list(list, t, same && sameLocation[k])
				errs = append(errs, err)
				out[k] = c
			case mapSchema[k]:
				m, ok := e.(map[string]any)
				if !ok {
					return nil, fmt.Errorf("%s is not an object", k)
				}
				c := make(map[string]any, len(m))
				for name, sub := range m {
					cs, err := s.value(sub, t, same && sameLocation[k])
					errs = append(errs, err)
					c[name] = cs
				}
				out[k] = c
			default:
				out[k] = e
			}
		}
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		if s.v30 {
			from30(x, out)
		}
		return out, nil
	}
	return nil, fmt.Errorf("a schema is an object or a boolean, not %T", v)
}

func (s *schemas) list(list []any, t *tree, same bool) ([]any, error) {
	out := make([]any, len(list))
	for i, e := range list {
		c, err := s.value(e, t, same)
		if err != nil {
			return nil, err
		}
		out[i] = c
	}
	return out, nil
}

// from30 rewrites OpenAPI 3.0's keywords that JSON Schema 2020-12 spells
// otherwise: nullable adds "null" to the type (and to the enum), and a
// boolean exclusiveMinimum/Maximum turns minimum/maximum into the
// exclusive bound.
func from30(in, out map[string]any) {
	if in["nullable"] == true {
		switch ty := out["type"].(type) {
		case string:
			out["type"] = []any{ty, "null"}
		case []any:
			out["type"] = append(ty, "null")
		}
		if e, ok := out["enum"].([]any); ok {
			out["enum"] = append(e, nil)
		}
	}
	for _, b := range [][2]string{{"exclusiveMinimum", "minimum"}, {"exclusiveMaximum", "maximum"}} {
		ex, ok := in[b[0]].(bool)
		if !ok {
			continue
		}
		delete(out, b[0])
		if bound, has := out[b[1]]; ex && has {
			out[b[0]] = bound
			delete(out, b[1])
		}
	}
}

// component converts a component schema once, remembering what it
// references.
func (s *schemas) component(name string) convDef {
	if d, ok := s.done[name]; ok {
		return d
	}
	t := newTree()
	c, err := s.value(s.components[name], t, true)
	d := convDef{schema: c, err: err, refs: sortedKeys(t.refs), same: sortedKeys(t.same)}
	s.done[name] = d
	return d
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// defs returns the $defs of a schema whose tree references t.refs: every
// component reachable from them, each once (recursive schemas included),
// stopping with an error past limit components.
func (s *schemas) defs(t *tree, limit int) (map[string]any, error) {
	if len(t.refs) == 0 {
		return nil, nil
	}
	out := map[string]any{}
	queue := sortedKeys(t.refs)
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		if _, ok := out[name]; ok {
			continue
		}
		if len(out) == limit {
			return nil, fmt.Errorf("the schema reaches more than %d components", limit)
		}
		d := s.component(name)
		if d.err != nil {
			return nil, fmt.Errorf("components.schemas.%s: %w", name, d.err)
		}
		out[name] = d.schema
		for _, r := range d.refs {
			if _, ok := out[r]; !ok {
				queue = append(queue, r)
			}
		}
	}
	if ring := s.ring(sortedKeysAny(out)); ring != nil {
		return nil, fmt.Errorf("components %s reference one another in a ring that never reaches a value", strings.Join(ring, " → "))
	}
	return out, nil
}

func sortedKeysAny(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// ring finds a cycle of same-location references among names, nil when
// there is none (a depth-first search with colours, iterative so that a
// long chain cannot exhaust the stack).
func (s *schemas) ring(names []string) []string {
	const (
		white = iota
		grey
		black
	)
	colour := map[string]int{}
	for _, start := range names {
		if colour[start] != white {
			continue
		}
		type frame struct {
			name string
			next int
		}
		stack := []frame{{name: start}}
		colour[start] = grey
		for len(stack) > 0 {
			f := &stack[len(stack)-1]
			same := s.done[f.name].same
			if f.next == len(same) {
				colour[f.name] = black
				stack = stack[:len(stack)-1]
				continue
			}
			n := same[f.next]
			f.next++
			switch colour[n] {
			case grey:
				var path []string
				for i := range stack {
					if stack[i].name == n || path != nil {
						path = append(path, stack[i].name)
					}
				}
				return append(path, n)
			case white:
				colour[n] = grey
				stack = append(stack, frame{name: n})
			}
		}
	}
	return nil
}
