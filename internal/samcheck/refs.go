package samcheck

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// pseudoParameters are defined by CloudFormation in every stack.
var pseudoParameters = []string{
	"AWS::AccountId", "AWS::NotificationARNs", "AWS::NoValue", "AWS::Partition",
	"AWS::Region", "AWS::StackId", "AWS::StackName", "AWS::URLSuffix",
}

// samGenerated returns the resources the SAM transform adds, which a
// template may name before the transform runs, each with the condition it
// inherits ("" for none). Only what this project can meet is listed:
//
//   - <Function>Role: the execution role of an AWS::Serverless::Function
//     without a Role property;
//   - <Function>.Version and <Function>.Alias: with AutoPublishAlias;
//   - <Function>Url: with FunctionUrlConfig;
//   - ServerlessHttpApi / ServerlessRestApi: the implicit API of functions
//     with an HttpApi / Api event that names no ApiId / RestApiId;
//   - <HttpApi>.Stage / <Api>.Stage: the stage of an explicit SAM API.
func samGenerated(resources map[string]any) map[string]string {
	out := map[string]string{}
	for _, id := range sortedKeys(resources) {
		r := resources[id]
		m, _ := r.(map[string]any)
		cond, _ := m["Condition"].(string)
		props := propertiesOf(r)
		switch typeOf(r) {
		case "AWS::Serverless::Function":
			if _, ok := props["Role"]; !ok {
				out[id+"Role"] = cond
			}
			if _, ok := props["AutoPublishAlias"]; ok {
				out[id+".Version"] = cond
				out[id+".Alias"] = cond
			}
			if _, ok := props["FunctionUrlConfig"]; ok {
				out[id+"Url"] = cond
			}
			events, _ := props["Events"].(map[string]any)
			for _, e := range events {
				em, _ := e.(map[string]any)
				ep, _ := em["Properties"].(map[string]any)
				switch em["Type"] {
				case "HttpApi":
					if _, ok := ep["ApiId"]; !ok {
						out["ServerlessHttpApi"] = ""
					}
				case "Api":
					if _, ok := ep["RestApiId"]; !ok {
						out["ServerlessRestApi"] = ""
					}
				}
			}
		case "AWS::Serverless::HttpApi", "AWS::Serverless::Api":
			out[id+".Stage"] = cond
		}
	}
	return out
}

// subVariable matches ${Name} and ${Name.Attribute}; ${!Literal} is an
// escape and names nothing.
var subVariable = regexp.MustCompile(`\$\{([^}]*)\}`)

// refChecker walks the template checking names.
type refChecker struct {
	t         *template
	generated map[string]string
	problems  []Problem
}

func (t *template) checkReferences() []Problem {
	rc := &refChecker{t: t, generated: samGenerated(t.resources)}
	for _, name := range sortedKeys(t.conditions) {
		rc.walk("/Conditions/"+escape(name), t.conditions[name], nil, true)
	}
	rules, _ := t.doc["Rules"].(map[string]any)
	for _, name := range sortedKeys(rules) {
		rc.walk("/Rules/"+escape(name), rules[name], nil, true)
	}
	if g, ok := t.doc["Globals"]; ok {
		rc.walk("/Globals", g, nil, false)
	}
	for _, id := range sortedKeys(t.resources) {
		at := "/Resources/" + escape(id)
		m, _ := t.resources[id].(map[string]any)
		guards := rc.attributeCondition(at, m)
		for _, k := range sortedKeys(m) {
			if k == "Condition" || k == "Type" {
				continue
			}
			if k == "DependsOn" {
				for i, dep := range dependsOn(m[k]) {
					depAt := fmt.Sprintf("%s/DependsOn/%d", at, i)
					if !rc.resource(depAt, dep, fmt.Sprintf("DependsOn %q", dep), guards) {
						rc.bad(depAt, "DependsOn %q names no resource of the template", dep)
					}
				}
				continue
			}
			rc.walk(at+"/"+escape(k), m[k], guards, false)
		}
	}
	outputs, _ := t.doc["Outputs"].(map[string]any)
	for _, name := range sortedKeys(outputs) {
		at := "/Outputs/" + escape(name)
		m, _ := outputs[name].(map[string]any)
		guards := rc.attributeCondition(at, m)
		for _, k := range sortedKeys(m) {
			if k != "Condition" {
				rc.walk(at+"/"+escape(k), m[k], guards, false)
			}
		}
	}
	return rc.problems
}

func (rc *refChecker) bad(at, format string, a ...any) {
	rc.problems = append(rc.problems, Problem{Path: at, Message: fmt.Sprintf(format, a...)})
}

// attributeCondition checks a resource's or output's Condition attribute
// and returns it as the guard of everything inside.
func (rc *refChecker) attributeCondition(at string, m map[string]any) []string {
	c, ok := m["Condition"]
	if !ok {
		return nil
	}
	if rc.condition(at+"/Condition", c) {
		return []string{c.(string)}
	}
	return nil
}

func (rc *refChecker) condition(at string, v any) bool {
	name, ok := v.(string)
	if !ok {
		rc.bad(at, "a condition name must be a string")
		return false
	}
	if _, ok := rc.t.conditions[name]; !ok {
		rc.bad(at, "unknown condition %q", name)
		return false
	}
	return true
}

// resource checks that id names a resource (or one SAM generates) and,
// when that resource exists only under a condition, that the reference is
// guarded by the same condition: otherwise the stack fails whenever the
// condition is false.
func (rc *refChecker) resource(at, id, how string, guards []string) bool {
	var cond string
	if r, ok := rc.t.resources[id]; ok {
		m, _ := r.(map[string]any)
		cond, _ = m["Condition"].(string)
	} else if c, ok := rc.generated[id]; ok {
		cond = c
	} else {
		return false
	}
	if cond != "" && !slices.Contains(guards, cond) {
		rc.bad(at, "%s: %s exists only when condition %s holds, and nothing guards this place by it (give it the same Condition, or use Fn::If)", how, id, cond)
	}
	return true
}

// ref checks the target of a Ref or a Fn::Sub variable without attribute.
// In Conditions and Rules only parameters (and pseudo parameters) exist.
func (rc *refChecker) ref(at, name, how string, guards []string, paramsOnly bool) {
	if _, ok := rc.t.parameters[name]; ok || slices.Contains(pseudoParameters, name) {
		return
	}
	if paramsOnly {
		rc.bad(at, "%s: only parameters and pseudo parameters can be named here", how)
		return
	}
	if !rc.resource(at, name, how, guards) {
		rc.bad(at, "%s names no parameter, resource, pseudo parameter or SAM-generated resource", how)
	}
}

func (rc *refChecker) getAtt(at, id, how string, guards []string, paramsOnly bool) {
	if paramsOnly {
		rc.bad(at, "%s: only parameters and pseudo parameters can be named here", how)
		return
	}
	if !rc.resource(at, id, how, guards) {
		rc.bad(at, "%s: %q is no resource of the template nor one SAM generates", how, id)
	}
}

// walk checks every intrinsic function under v. guards are the conditions
// known to hold at this point.
func (rc *refChecker) walk(at string, v any, guards []string, paramsOnly bool) {
	switch x := v.(type) {
	case []any:
		for i, e := range x {
			rc.walk(at+"/"+strconv.Itoa(i), e, guards, paramsOnly)
		}
		return
	case map[string]any:
		if len(x) == 1 {
			for k, arg := range x {
				if rc.intrinsic(at+"/"+escape(k), k, arg, guards, paramsOnly) {
					return
				}
			}
		}
		for _, k := range sortedKeys(x) {
			rc.walk(at+"/"+escape(k), x[k], guards, paramsOnly)
		}
	}
}

// intrinsic checks one function; false means k is no function name.
func (rc *refChecker) intrinsic(at, k string, arg any, guards []string, paramsOnly bool) bool {
	switch k {
	case "Ref":
		name, ok := arg.(string)
		if !ok {
			rc.bad(at, "Ref takes a name")
			return true
		}
		// SAM's "Function.Alias" / "Function.Version" are Ref targets too.
		rc.ref(at, name, fmt.Sprintf("Ref %q", name), guards, paramsOnly)
	case "Fn::GetAtt":
		id, attr := getAttArgs(arg)
		if id == "" || attr == "" {
			rc.bad(at, "Fn::GetAtt takes [resource, attribute] or \"resource.attribute\"")
			return true
		}
		rc.getAtt(at, id, fmt.Sprintf("Fn::GetAtt %q", id+"."+attr), guards, paramsOnly)
	case "Fn::Sub":
		rc.sub(at, arg, guards, paramsOnly)
	case "Fn::If":
		a, ok := arg.([]any)
		if !ok || len(a) != 3 {
			rc.bad(at, "Fn::If takes [condition, value if true, value if false]")
			return true
		}
		then := guards
		if rc.condition(at+"/0", a[0]) {
			then = append(slices.Clone(guards), a[0].(string))
		}
		rc.walk(at+"/1", a[1], then, paramsOnly)
		rc.walk(at+"/2", a[2], guards, paramsOnly)
	case "Condition":
		// {"Condition": name} is a function only inside Conditions (and
		// Rules); elsewhere it is an attribute handled by the caller.
		if !paramsOnly {
			return false
		}
		rc.condition(at, arg)
	case "Fn::FindInMap":
		a, _ := arg.([]any)
		if len(a) != 3 {
			rc.bad(at, "Fn::FindInMap takes [map, top-level key, second-level key]")
			return true
		}
		if name, ok := a[0].(string); ok {
			mappings, _ := rc.t.doc["Mappings"].(map[string]any)
			if _, found := mappings[name]; !found {
				rc.bad(at+"/0", "unknown mapping %q", name)
			}
		}
		rc.walk(at, a, guards, paramsOnly)
	default:
		if !strings.HasPrefix(k, "Fn::") {
			return false
		}
		rc.walk(at, arg, guards, paramsOnly)
	}
	return true
}

func getAttArgs(arg any) (id, attr string) {
	switch a := arg.(type) {
	case []any:
		if len(a) == 2 {
			id, _ = a[0].(string)
			attr, _ = a[1].(string) // an attribute given by a function stays ""
			if _, isFn := a[1].(map[string]any); isFn {
				attr = "(computed)"
			}
		}
	case string:
		id, attr, _ = strings.Cut(a, ".")
	}
	return id, attr
}

func (rc *refChecker) sub(at string, arg any, guards []string, paramsOnly bool) {
	var text string
	local := map[string]bool{}
	switch a := arg.(type) {
	case string:
		text = a
	case []any:
		if len(a) != 2 {
			rc.bad(at, "Fn::Sub takes a string or [string, variables]")
			return
		}
		text, _ = a[0].(string)
		vars, _ := a[1].(map[string]any)
		for _, name := range sortedKeys(vars) {
			local[name] = true
			rc.walk(at+"/1/"+escape(name), vars[name], guards, paramsOnly)
		}
	default:
		rc.bad(at, "Fn::Sub takes a string or [string, variables]")
		return
	}
	for _, m := range subVariable.FindAllStringSubmatch(text, -1) {
		name := m[1]
		if strings.HasPrefix(name, "!") || local[name] {
			continue
		}
		if slices.Contains(pseudoParameters, name) {
			continue
		}
		if id, _, hasAttr := strings.Cut(name, "."); hasAttr && !rc.isRefTarget(name) {
			rc.getAtt(at, id, "Fn::Sub variable ${"+name+"}", guards, paramsOnly)
			continue
		}
		rc.ref(at, name, "Fn::Sub variable ${"+name+"}", guards, paramsOnly)
	}
}

// isRefTarget tells a dotted SAM Ref target (Function.Alias) from an
// attribute reference.
func (rc *refChecker) isRefTarget(name string) bool {
	_, ok := rc.generated[name]
	return ok
}

func dependsOn(v any) []string {
	switch x := v.(type) {
	case string:
		return []string{x}
	case []any:
		out := make([]string, 0, len(x))
		for _, e := range x {
			s, _ := e.(string)
			out = append(out, s)
		}
		return out
	}
	return nil
}
