package samcheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/awslabs/goformation/v7/schema"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// allowedFalsePositive is a complaint of goformation v7.14.9's SAM schema
// about something CloudFormation and the SAM translator accept.
type allowedFalsePositive struct {
	// Path is the JSON pointer of the complaint; "*" stands for one
	// segment (e.g. a function's logical id).
	Path string
	// Keyword is the schema keyword that complains.
	Keyword string
	// Got, for a "type" complaint, is the only JSON type allowed through
	// (e.g. a number where the schema wants a string); "" allows any.
	Got    string
	Reason string
}

// allowedFalsePositives is the complete list: any other schema complaint
// is a problem. Each entry was checked against the SAM translator and
// cfn-lint, which accept what the schema rejects.
var allowedFalsePositives = []allowedFalsePositive{
	{
		Path:    "/Rules",
		Keyword: "additionalProperties",
		Reason:  "the schema's top level lacks the Rules section (parameter assertions), a standard CloudFormation section the SAM transform passes through",
	},
	{
		Path:    "/Parameters/*/Default",
		Keyword: "type",
		Got:     "number",
		Reason:  "the schema types every Default as a string; CloudFormation takes a number for a Number parameter, and goformation's parser then resolves Refs to it as numbers (a string default would break its typed parse of MemorySize, Timeout...)",
	},
	{
		Path:    "/Parameters/*/MinValue",
		Keyword: "type",
		Got:     "number",
		Reason:  "the schema types MinValue as a string, but goformation's own Parameter type (float64) refuses a string, and CloudFormation documents a number",
	},
	{
		Path:    "/Parameters/*/MaxValue",
		Keyword: "type",
		Got:     "number",
		Reason:  "the schema types MaxValue as a string, but goformation's own Parameter type (float64) refuses a string, and CloudFormation documents a number",
	},
	{
		Path:    "/Resources/*/Properties/Events/*/Properties/FunctionResponseTypes",
		Keyword: "additionalProperties",
		Reason:  "the schema's SAM SQS event lacks FunctionResponseTypes (ReportBatchItemFailures), which SAM supports",
	},
}

func (a allowedFalsePositive) matches(p, keyword, gotType string) bool {
	if keyword != a.Keyword || (a.Got != "" && gotType != a.Got) {
		return false
	}
	want := strings.Split(a.Path, "/")
	got := strings.Split(p, "/")
	if len(want) != len(got) {
		return false
	}
	for i := range want {
		if want[i] != "*" && want[i] != got[i] {
			return false
		}
	}
	return true
}

// validateSchema validates the template twice: once with every Fn::If
// taking its first branch and once its second, so both branches meet the
// schema. Intrinsic functions are replaced by stand-in values of the type
// they produce (the schema describes literal values).
func (t *template) validateSchema() ([]Problem, []allowedFalsePositive) {
	var full struct {
		Definitions map[string]any `json:"definitions"`
		Properties  map[string]any `json:"properties"`
		Required    []any          `json:"required"`
	}
	if err := json.Unmarshal([]byte(schema.SamSchema), &full); err != nil {
		return []Problem{{Path: "/", Message: "goformation's SAM schema does not parse: " + err.Error()}}, nil
	}
	c, types, problems := compileSubset(full.Definitions, full.Properties, full.Required, t.resources)
	if c == nil {
		return problems, nil
	}
	var allowed []allowedFalsePositive
	for _, branch := range []int{1, 2} {
		st := &standIns{params: t.parameters, branch: branch, scalar: map[string]bool{}, origin: map[string]string{}}
		// Conditions and Rules are made of condition functions: they stay
		// as written (the schema only wants objects there).
		m := map[string]any{}
		for k, v := range t.doc {
			if k == "Conditions" || k == "Rules" {
				m[k] = v
				continue
			}
			if r, ok := st.value("/"+escape(k), "/"+escape(k), v); ok {
				m[k] = r
			}
		}
		// The top level (sections, parameters, Globals, outputs) against
		// the schema's root, whose Resources only needs to be an object;
		// each resource against its type's definition, which keeps errors
		// specific (the real root's Resources is an anyOf over ~1,000 types).
		validate := func(ref, at string, v any) {
			sch, err := c.Compile("sam.schema.json#" + ref)
			if err != nil {
				problems = append(problems, Problem{Path: at, Message: "compiling the schema: " + err.Error()})
				return
			}
			err = sch.Validate(v)
			var ve *jsonschema.ValidationError
			if err == nil {
				return
			}
			if !errors.As(err, &ve) {
				problems = append(problems, Problem{Path: at, Message: "schema: " + err.Error()})
				return
			}
			bad, ok := st.explain(at, ve)
			for _, a := range ok {
				if !slices.Contains(allowed, a) {
					allowed = append(allowed, a)
				}
			}
			problems = append(problems, bad...)
		}
		validate("", "", m)
		res, _ := m["Resources"].(map[string]any)
		for _, id := range sortedKeys(res) {
			tp := typeOf(res[id])
			if !types[tp] {
				continue // reported by compileSubset
			}
			validate("/definitions/"+escape(tp), "/Resources/"+escape(id), res[id])
		}
	}
	return problems, allowed
}

func findAllowed(p, keyword, got string) (allowedFalsePositive, bool) {
	for _, a := range allowedFalsePositives {
		if a.matches(p, keyword, got) {
			return a, true
		}
	}
	return allowedFalsePositive{}, false
}

// compileSubset loads the schema's root and the definitions the template's
// resource types reach into a compiler. The full schema is ~7.7 MB; having
// the compiler check all of it against the metaschema takes many seconds.
func compileSubset(defs, props map[string]any, required []any, resources map[string]any) (*jsonschema.Compiler, map[string]bool, []Problem) {
	var problems []Problem
	types := map[string]bool{}
	var queue []string
	for _, id := range sortedKeys(resources) {
		tp := typeOf(resources[id])
		switch {
		case tp == "":
			problems = append(problems, Problem{Path: "/Resources/" + escape(id) + "/Type", Message: "the resource has no Type"})
		case strings.HasPrefix(tp, "Custom::"):
			// Custom resources take any properties.
		case defs[tp] == nil:
			problems = append(problems, Problem{Path: "/Resources/" + escape(id) + "/Type", Message: fmt.Sprintf("unknown resource type %q", tp)})
		default:
			types[tp] = true
			queue = append(queue, tp)
		}
	}
	rootProps := map[string]any{}
	for k, v := range props {
		rootProps[k] = v
	}
	// Resources are validated one by one against their own definitions.
	rootProps["Resources"] = map[string]any{"type": "object"}
	root := map[string]any{
		"type":                 "object",
		"additionalProperties": false,
		"properties":           rootProps,
		"required":             required,
	}
	out := map[string]any{}
	var collect func(v any)
	collect = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if ref, ok := x["$ref"].(string); ok {
				if name, ok := strings.CutPrefix(ref, "#/definitions/"); ok {
					queue = append(queue, name)
				}
			}
			for _, e := range x {
				collect(e)
			}
		case []any:
			for _, e := range x {
				collect(e)
			}
		}
	}
	collect(rootProps)
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		if _, done := out[name]; done || defs[name] == nil {
			continue
		}
		out[name] = defs[name]
		collect(defs[name])
	}
	root["definitions"] = out
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft4)
	if err := c.AddResource("sam.schema.json", root); err != nil {
		return nil, nil, append(problems, Problem{Path: "/", Message: "loading goformation's SAM schema: " + err.Error()})
	}
	return c, types, problems
}

// escape encodes a JSON pointer segment.
func escape(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

// explain returns the problems in a validation error and the allowed false
// positives it met. An anyOf or oneOf is satisfied when one alternative
// fails only by allowed false positives; otherwise the alternative with the
// fewest problems is reported (the others fail for being another kind of
// thing altogether, e.g. another event type).
func (st *standIns) explain(at string, ve *jsonschema.ValidationError) ([]Problem, []allowedFalsePositive) {
	if len(ve.Causes) == 0 {
		var bad []Problem
		var ok []allowedFalsePositive
		for _, c := range st.complaints(at, ve) {
			if a, found := findAllowed(c.Path, c.keyword, c.got); found {
				ok = append(ok, a)
				continue
			}
			bad = append(bad, c.Problem)
		}
		return bad, ok
	}
	switch ve.ErrorKind.(type) {
	case *kind.AnyOf, *kind.OneOf:
		var best []Problem
		var bestOK []allowedFalsePositive
		for i, c := range ve.Causes {
			bad, ok := st.explain(at, c)
			if len(bad) == 0 {
				return nil, ok
			}
			if i == 0 || len(bad) < len(best) {
				best, bestOK = bad, ok
			}
		}
		return best, bestOK
	}
	var bad []Problem
	var ok []allowedFalsePositive
	for _, c := range ve.Causes {
		b, o := st.explain(at, c)
		bad = append(bad, b...)
		ok = append(ok, o...)
	}
	return bad, ok
}

// complaint is a schema problem with the keyword that raised it and, for
// a type mismatch, the type found.
type complaint struct {
	Problem
	keyword string
	got     string
}

// complaints turns one schema error into problems at template paths: an
// additionalProperties error becomes one problem per extra property, at
// that property, so the allow list can name it exactly. A scalar type
// mismatch where an intrinsic function stands is dropped: CloudFormation
// converts between strings, numbers and booleans, and what a function
// returns is checked by the reference pass.
func (st *standIns) complaints(at string, leaf *jsonschema.ValidationError) []complaint {
	standLoc := at
	for _, seg := range leaf.InstanceLocation {
		standLoc += "/" + escape(seg)
	}
	loc := st.original(standLoc)
	keyword := strings.Join(leaf.ErrorKind.KeywordPath(), "/")
	switch k := leaf.ErrorKind.(type) {
	case *kind.AdditionalProperties:
		var out []complaint
		for _, p := range k.Properties {
			out = append(out, complaint{Problem{Path: loc + "/" + escape(p), Message: "schema: property not allowed here"}, keyword, ""})
		}
		return out
	case *kind.Type:
		if st.scalar[standLoc] && scalarType(k.Got) && allScalar(k.Want) {
			return nil
		}
		if st.scalar[standLoc] {
			return []complaint{{Problem{Path: loc, Message: fmt.Sprintf("schema: an intrinsic function returning %s stands where %s is wanted", k.Got, strings.Join(k.Want, " or "))}, keyword, k.Got}}
		}
		return []complaint{{Problem{Path: loc, Message: "schema: " + leaf.Error()}, keyword, k.Got}}
	}
	return []complaint{{Problem{Path: loc, Message: "schema: " + leaf.Error()}, keyword, ""}}
}

func scalarType(t string) bool {
	return t == "string" || t == "number" || t == "integer" || t == "boolean"
}

func allScalar(ts []string) bool {
	for _, t := range ts {
		if !scalarType(t) {
			return false
		}
	}
	return len(ts) > 0
}

// standIns replaces intrinsic functions by values of the type they return.
type standIns struct {
	params map[string]any
	// branch is the Fn::If branch taken: 1 (then) or 2 (else).
	branch int
	// scalar marks locations (in the stand-in document) holding a stand-in
	// for a scalar-valued function.
	scalar map[string]bool
	// origin maps an array element's location in the stand-in document to
	// its location in the template, where removed elements shifted it.
	origin map[string]string
}

// listFunctions return lists of strings.
var listFunctions = map[string]bool{"Fn::Split": true, "Fn::GetAZs": true, "Fn::Cidr": true}

// value returns v with intrinsics replaced; ok is false where the value is
// Ref AWS::NoValue (the key or element is then left out).
func (st *standIns) value(loc, orig string, v any) (any, bool) {
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 1 {
			for k, arg := range x {
				if k != "Ref" && !strings.HasPrefix(k, "Fn::") {
					break
				}
				switch {
				case k == "Ref" && arg == "AWS::NoValue":
					return nil, false
				case k == "Fn::If":
					a, _ := arg.([]any)
					if len(a) != 3 {
						st.scalar[loc] = true
						return "stand-in", true
					}
					return st.value(loc, orig, a[st.branch])
				case listFunctions[k] || (k == "Ref" && st.isListParameter(arg)):
					st.scalar[loc+"/0"] = true
					return []any{"stand-in"}, true
				default:
					st.scalar[loc] = true
					return "stand-in", true
				}
			}
		}
		out := make(map[string]any, len(x))
		for k, e := range x {
			if r, ok := st.value(loc+"/"+escape(k), orig+"/"+escape(k), e); ok {
				out[k] = r
			}
		}
		return out, true
	case []any:
		out := make([]any, 0, len(x))
		for i, e := range x {
			at := loc + "/" + strconv.Itoa(len(out))
			from := orig + "/" + strconv.Itoa(i)
			if at != from {
				st.origin[at] = from
			}
			if r, ok := st.value(at, from, e); ok {
				out = append(out, r)
			}
		}
		return out, true
	}
	return v, true
}

func (st *standIns) isListParameter(name any) bool {
	s, _ := name.(string)
	p, _ := st.params[s].(map[string]any)
	tp, _ := p["Type"].(string)
	return tp == "CommaDelimitedList" || strings.HasPrefix(tp, "List<") || strings.Contains(tp, "<List<")
}

// original maps a stand-in document location back to the template.
func (st *standIns) original(loc string) string {
	for p := loc; p != "" && p != "/"; p = path.Dir(p) {
		if o, ok := st.origin[p]; ok {
			return o + strings.TrimPrefix(loc, p)
		}
	}
	return loc
}
