// Package samtemplate checks the SAM template offline, since neither the SAM
// CLI nor AWS can be reached from CI: it parses the template with
// goformation, validates it against goformation's SAM JSON Schema (with the
// schema's known false positives allowed by name), checks that every
// reference resolves, and checks that each function's code and build target
// exist in the repository.
package samtemplate

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/awslabs/goformation/v7"
	"github.com/awslabs/goformation/v7/intrinsics"
	"github.com/awslabs/goformation/v7/schema"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Problem is one thing wrong with the template.
type Problem struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

func (p Problem) String() string { return p.Path + ": " + p.Message }

// pseudoParameters are always defined by CloudFormation.
var pseudoParameters = []string{
	"AWS::AccountId", "AWS::NotificationARNs", "AWS::NoValue", "AWS::Partition",
	"AWS::Region", "AWS::StackId", "AWS::StackName", "AWS::URLSuffix",
}

// falsePositive is a schema complaint we know to be wrong.
type falsePositive struct {
	path   *regexp.Regexp // instance location
	reason string
}

// knownFalsePositives lists, by instance location, what goformation v7.14.9's
// schema rejects although CloudFormation accepts it. Anything else the schema
// rejects is a problem.
var knownFalsePositives = []falsePositive{
	{regexp.MustCompile(`^/Resources/[^/]+/Properties/FunctionResponseTypes(/.*)?$`),
		"the schema's AWS::Lambda::EventSourceMapping lacks FunctionResponseTypes (ReportBatchItemFailures), which Lambda supports"},
	{regexp.MustCompile(`^/Globals/Function/LoggingConfig(/.*)?$`),
		"the schema's SAM Globals predate the LoggingConfig property SAM accepts"},
	{regexp.MustCompile(`^/Globals/Function/MemorySize$`),
		"the schema's Globals want a literal number where CloudFormation resolves a Ref to a Number parameter first"},
}

// Check returns every problem found in the template at path; none means it
// passed.
func Check(path string) []Problem {
	data, err := os.ReadFile(path)
	if err != nil {
		return []Problem{{Path: path, Message: err.Error()}}
	}
	// Long-form JSON with the intrinsic functions left in place.
	raw, err := intrinsics.ProcessYAML(data, &intrinsics.ProcessorOptions{NoProcess: true})
	if err != nil {
		return []Problem{{Path: path, Message: "not valid YAML: " + err.Error()}}
	}
	// goformation's typed model needs intrinsics resolved (with parameter
	// defaults); that it parses at all proves the resources are well formed.
	tmpl, err := goformation.ParseYAML(data)
	if err != nil {
		return []Problem{{Path: path, Message: "goformation cannot parse it: " + err.Error()}}
	}
	if len(tmpl.Resources) == 0 {
		return []Problem{{Path: path, Message: "the template has no resources"}}
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return []Problem{{Path: path, Message: err.Error()}}
	}
	var problems []Problem
	problems = append(problems, validateSchema(doc)...)
	problems = append(problems, checkReferences(doc)...)
	problems = append(problems, checkFunctions(doc, filepath.Dir(path))...)
	sort.Slice(problems, func(i, j int) bool { return problems[i].String() < problems[j].String() })
	return problems
}

// validateSchema checks each resource against the schema's definition of
// its type, and the Globals section, after replacing intrinsic functions by
// a placeholder string: the schema describes literal values, and the
// reference check validates the intrinsics themselves. Validating resource
// by resource (instead of the schema's anyOf over ~1,000 types) keeps the
// errors specific and the check fast.
func validateSchema(doc map[string]any) []Problem {
	var full map[string]any
	if err := json.Unmarshal([]byte(schema.SamSchema), &full); err != nil {
		return []Problem{{Path: "schema", Message: err.Error()}}
	}
	resources, _ := doc["Resources"].(map[string]any)
	var roots []string
	for _, r := range resources {
		if t := typeOf(r); t != "" && !strings.HasPrefix(t, "Custom::") {
			roots = append(roots, t)
		}
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft4)
	// The full schema is ~10 MB; the compiler checks a document against the
	// metaschema before use, which takes ~15 s for all of it. Only the
	// definitions this template reaches are loaded.
	if err := c.AddResource("sam.schema.json", schemaSubset(full, roots)); err != nil {
		return []Problem{{Path: "schema", Message: err.Error()}}
	}
	var out []Problem
	validate := func(loc, ref string, v any) {
		compiled, err := c.Compile("sam.schema.json#" + ref)
		if err != nil {
			out = append(out, Problem{Path: loc, Message: "the schema has no definition " + ref})
			return
		}
		intrinsicAt := map[string]bool{}
		err = compiled.Validate(placeholders(v, loc, intrinsicAt))
		ve, ok := err.(*jsonschema.ValidationError)
		if err != nil && !ok {
			out = append(out, Problem{Path: loc, Message: err.Error()})
		}
		if !ok {
			return
		}
		for _, leaf := range leaves(ve) {
			at := loc + "/" + strings.Join(leaf.InstanceLocation, "/")
			at = strings.TrimSuffix(at, "/")
			// A value given by an intrinsic function is checked by the
			// reference check, not against the literal's schema.
			if !allowed(at) && !intrinsicAt[at] {
				out = append(out, Problem{Path: at, Message: "schema: " + leaf.Error()})
			}
		}
	}
	ids := make([]string, 0, len(resources))
	for id := range resources {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		t := typeOf(resources[id])
		if t == "" || strings.HasPrefix(t, "Custom::") {
			continue
		}
		validate("/Resources/"+id, "/definitions/"+escapePointer(t), resources[id])
	}
	if g, ok := doc["Globals"]; ok {
		validate("/Globals", "/properties/Globals", g)
	}
	return dedupe(out)
}

// schemaSubset copies the definitions of the given resource types, the
// Globals section, and everything they reference, out of the full schema.
func schemaSubset(full map[string]any, types []string) map[string]any {
	defs, _ := full["definitions"].(map[string]any)
	props, _ := full["properties"].(map[string]any)
	out := map[string]any{}
	queue := append([]string(nil), types...)
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
	collect(props["Globals"])
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		if _, done := out[name]; done {
			continue
		}
		d, ok := defs[name]
		if !ok {
			continue
		}
		out[name] = d
		collect(d)
	}
	return map[string]any{"definitions": out, "properties": map[string]any{"Globals": props["Globals"]}}
}

func escapePointer(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

// placeholders returns v with every intrinsic function object replaced by a
// string, recording where (as /-joined locations under loc).
func placeholders(v any, loc string, at map[string]bool) any {
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = placeholders(e, fmt.Sprintf("%s/%d", loc, i), at)
		}
		return out
	case map[string]any:
		if len(x) == 1 {
			for k := range x {
				if k == "Ref" || strings.HasPrefix(k, "Fn::") {
					at[loc] = true
					return "{" + k + "}"
				}
			}
		}
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = placeholders(e, loc+"/"+k, at)
		}
		return out
	}
	return v
}

// leaves returns the most specific validation errors.
func leaves(ve *jsonschema.ValidationError) []*jsonschema.ValidationError {
	if len(ve.Causes) == 0 {
		return []*jsonschema.ValidationError{ve}
	}
	var out []*jsonschema.ValidationError
	for _, c := range ve.Causes {
		out = append(out, leaves(c)...)
	}
	return out
}

func allowed(loc string) bool {
	for _, fp := range knownFalsePositives {
		if fp.path.MatchString(loc) {
			return true
		}
	}
	return false
}

func dedupe(ps []Problem) []Problem {
	seen := map[string]bool{}
	var out []Problem
	for _, p := range ps {
		if !seen[p.String()] {
			seen[p.String()] = true
			out = append(out, p)
		}
	}
	return out
}

// samGenerated are the resources SAM adds for a function or API, which a
// template may reference before the transform runs.
func samGenerated(resources map[string]any) map[string]bool {
	out := map[string]bool{}
	for id, r := range resources {
		switch typeOf(r) {
		case "AWS::Serverless::Function":
			out[id+"Role"] = true
			out[id+".Version"] = true
			out[id+".Alias"] = true
		case "AWS::Serverless::HttpApi", "AWS::Serverless::Api":
			out[id+".Stage"] = true
		}
	}
	out["ServerlessHttpApi"] = true
	out["ServerlessRestApi"] = true
	return out
}

func typeOf(r any) string {
	m, _ := r.(map[string]any)
	t, _ := m["Type"].(string)
	return t
}

var subRef = regexp.MustCompile(`\$\{([^}!][^}]*)\}`)

// checkReferences walks the template and checks every Ref, GetAtt, Sub
// variable and condition name.
func checkReferences(doc map[string]any) []Problem {
	params, _ := doc["Parameters"].(map[string]any)
	resources, _ := doc["Resources"].(map[string]any)
	conditions, _ := doc["Conditions"].(map[string]any)
	generated := samGenerated(resources)
	isResource := func(id string) bool {
		_, ok := resources[id]
		return ok || generated[id]
	}
	refOK := func(id string) bool {
		_, isParam := params[id]
		return isParam || isResource(id) || slices.Contains(pseudoParameters, id)
	}
	var out []Problem
	bad := func(path, format string, a ...any) {
		out = append(out, Problem{Path: path, Message: fmt.Sprintf(format, a...)})
	}
	checkCondition := func(path string, v any) {
		name, ok := v.(string)
		if !ok {
			bad(path, "condition name is not a string")
			return
		}
		if _, ok := conditions[name]; !ok {
			bad(path, "unknown condition %q", name)
		}
	}
	var walk func(path string, v any, subVars map[string]bool)
	walk = func(path string, v any, subVars map[string]bool) {
		switch x := v.(type) {
		case []any:
			for i, e := range x {
				walk(fmt.Sprintf("%s/%d", path, i), e, subVars)
			}
		case map[string]any:
			if len(x) == 1 {
				for k, arg := range x {
					switch k {
					case "Ref":
						if id, ok := arg.(string); !ok || !refOK(id) {
							bad(path, "Ref to %v resolves to no parameter, resource or pseudo parameter", arg)
						}
						return
					case "Fn::GetAtt":
						var id string
						switch a := arg.(type) {
						case []any:
							if len(a) > 0 {
								id, _ = a[0].(string)
							}
						case string:
							id, _, _ = strings.Cut(a, ".")
						}
						if !isResource(id) {
							bad(path, "Fn::GetAtt on %q, which is not a resource", id)
						}
						return
					case "Fn::Sub":
						text, vars := "", map[string]bool{}
						switch a := arg.(type) {
						case string:
							text = a
						case []any:
							if len(a) > 0 {
								text, _ = a[0].(string)
							}
							if len(a) > 1 {
								if m, ok := a[1].(map[string]any); ok {
									for name, val := range m {
										vars[name] = true
										walk(path+"/Fn::Sub/"+name, val, nil)
									}
								}
							}
						}
						for _, m := range subRef.FindAllStringSubmatch(text, -1) {
							name := m[1]
							if vars[name] {
								continue
							}
							id, attr, hasAttr := strings.Cut(name, ".")
							switch {
							case hasAttr && slices.Contains(pseudoParameters, name):
							case hasAttr && !isResource(id):
								bad(path, "Fn::Sub ${%s}: %q is not a resource", name, id)
							case !hasAttr && !refOK(id):
								bad(path, "Fn::Sub ${%s} resolves to no parameter, resource or pseudo parameter", name)
							}
							_ = attr
						}
						return
					case "Fn::If":
						if a, ok := arg.([]any); ok && len(a) == 3 {
							checkCondition(path+"/Fn::If/0", a[0])
							walk(path+"/Fn::If/1", a[1], subVars)
							walk(path+"/Fn::If/2", a[2], subVars)
						} else {
							bad(path, "Fn::If takes [condition, then, else]")
						}
						return
					case "Condition":
						if _, isStr := arg.(string); isStr && strings.HasPrefix(path, "/Conditions") {
							checkCondition(path, arg)
							return
						}
					}
				}
			}
			for k, e := range x {
				if k == "Condition" && (strings.Count(path, "/") == 2) {
					checkCondition(path+"/Condition", e)
					continue
				}
				walk(path+"/"+k, e, subVars)
			}
		}
	}
	for _, section := range []string{"Conditions", "Globals", "Resources", "Outputs"} {
		if v, ok := doc[section]; ok {
			walk("/"+section, v, nil)
		}
	}
	for id, r := range resources {
		m, _ := r.(map[string]any)
		for _, dep := range asStrings(m["DependsOn"]) {
			if !isResource(dep) {
				bad("/Resources/"+id+"/DependsOn", "depends on unknown resource %q", dep)
			}
		}
	}
	return out
}

func asStrings(v any) []string {
	switch x := v.(type) {
	case string:
		return []string{x}
	case []any:
		var out []string
		for _, e := range x {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

var makeTarget = regexp.MustCompile(`(?m)^([A-Za-z0-9_.-]+):`)

// checkFunctions checks each function's handler, code directory, Go main
// package and make target.
func checkFunctions(doc map[string]any, root string) []Problem {
	resources, _ := doc["Resources"].(map[string]any)
	globals, _ := doc["Globals"].(map[string]any)
	gfn, _ := globals["Function"].(map[string]any)
	makefile, _ := os.ReadFile(filepath.Join(root, "Makefile"))
	targets := map[string]bool{}
	for _, m := range makeTarget.FindAllStringSubmatch(string(makefile), -1) {
		targets[m[1]] = true
	}
	var out []Problem
	ids := make([]string, 0, len(resources))
	for id := range resources {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		r := resources[id]
		if typeOf(r) != "AWS::Serverless::Function" {
			continue
		}
		path := "/Resources/" + id
		m, _ := r.(map[string]any)
		props, _ := m["Properties"].(map[string]any)
		handler, _ := props["Handler"].(string)
		if handler == "" {
			handler, _ = gfn["Handler"].(string)
		}
		if handler != "bootstrap" {
			out = append(out, Problem{path + "/Properties/Handler", fmt.Sprintf("handler is %q; provided.al2023 functions run bootstrap", handler)})
		}
		codeURI, _ := props["CodeUri"].(string)
		if st, err := os.Stat(filepath.Join(root, codeURI)); codeURI == "" || err != nil || !st.IsDir() {
			out = append(out, Problem{path + "/Properties/CodeUri", fmt.Sprintf("code directory %q does not exist", codeURI)})
		}
		pkg := filepath.Join(root, "functions", strings.ToLower(strings.TrimSuffix(id, "Function")))
		if matches, _ := filepath.Glob(filepath.Join(pkg, "*.go")); len(matches) == 0 {
			out = append(out, Problem{path, fmt.Sprintf("no Go main package at %s", pkg)})
		}
		meta, _ := m["Metadata"].(map[string]any)
		if meta["BuildMethod"] == "makefile" && !targets["build-"+id] {
			out = append(out, Problem{path + "/Metadata/BuildMethod", fmt.Sprintf("the Makefile has no target build-%s, which sam build runs", id)})
		}
	}
	return out
}
