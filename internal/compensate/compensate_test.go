package compensate_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/compensate"
)

func TestCompileRefuses(t *testing.T) {
	deep := strings.Repeat(`{"a":`, compensate.MaxTemplateDepth+2) + "1" + strings.Repeat("}", compensate.MaxTemplateDepth+2)
	var many []string
	for i := range compensate.MaxRefs + 1 {
		many = append(many, fmt.Sprintf(`"k%d":"$.args.a"`, i))
	}
	for _, tc := range []struct {
		name, tool, args, want string
	}{
		{"no tool", "", `{}`, "needs the tool"},
		{"not JSON", "t", `{`, "not JSON"},
		{"two values", "t", `{} {}`, "more than one"},
		{"not an object", "t", `["$.args.a"]`, "must be an object"},
		{"a string", "t", `"$.args"`, "must be an object"},
		{"another root", "t", `{"a":"$.env.HOME"}`, "only args and result"},
		{"a root that only starts alike", "t", `{"a":"$.argsx"}`, "only args and result"},
		{"no dot", "t", `{"a":"$args.a"}`, "must start with $.args"},
		{"recursive descent", "t", `{"a":"$..id"}`, "only args and result"},
		{"a filter", "t", `{"a":"$.result[?(@.id)]"}`, "index"},
		{"a wildcard", "t", `{"a":"$.result.*"}`, "empty name"},
		{"a script", "t", `{"a":"$.result.items[(@.length-1)]"}`, "index"},
		{"a negative index", "t", `{"a":"$.result.items[-1]"}`, "index"},
		{"a huge index", "t", `{"a":"$.result.items[12345678]"}`, "index"},
		{"a padded index", "t", `{"a":"$.result.items[01]"}`, "index"},
		{"an unclosed quote", "t", `{"a":"$.result[\"id]"}`, "closing"},
		{"interpolation", "t", `{"a":"$.result.id-suffix and more"}`, "unexpected"},
		{"a bare dollar", "t", `{"a":"$"}`, "must start"},
		{"too deep", "t", deep, "deeper"},
		{"too many refs", "t", "{" + strings.Join(many, ",") + "}", "more than 64"},
		{"too many steps", "t", `{"a":"$.args` + strings.Repeat(".a", compensate.MaxSteps+1) + `"}`, "steps"},
		{"too big", "t", `{"a":"` + strings.Repeat("x", compensate.MaxTemplateBytes) + `"}`, "at most"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := compensate.Compile(tc.tool, json.RawMessage(tc.args))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Compile(%q, %s) = %v, want an error containing %q", tc.tool, tc.args, err, tc.want)
			}
		})
	}
}

func TestBuild(t *testing.T) {
	deepValue := strings.Repeat("[", compensate.MaxValueDepth+1) + strings.Repeat("]", compensate.MaxValueDepth+1)
	for _, tc := range []struct {
		name, tmpl, args, result string
		want                     string // the built arguments, or
		err                      string // an error containing this
		missing, notKept         bool
	}{
		{name: "create and delete", tmpl: `{"order_id":"$.result.id"}`, result: `{"id":"o-17","total":3}`, want: `{"order_id":"o-17"}`},
		{name: "set and restore from the result", tmpl: `{"key":"$.args.key","value":"$.result.previous"}`,
			args: `{"key":"k","value":2}`, result: `{"previous":{"n":1}}`, want: `{"key":"k","value":{"n":1}}`},
		{name: "a whole root", tmpl: `{"original":"$.args"}`, args: `{"a":[1,2]}`, want: `{"original":{"a":[1,2]}}`},
		{name: "literals stay", tmpl: `{"n":1.50,"b":true,"z":null,"s":"plain","l":[1,"$$.args.x"]}`, args: `{}`,
			want: `{"b":true,"l":[1,"$.args.x"],"n":1.50,"s":"plain","z":null}`},
		{name: "indexes and quoted names", tmpl: `{"v":"$.result.items[1][\"odd key.x\"]"}`, result: `{"items":[{},{"odd key.x":"yes"}]}`, want: `{"v":"yes"}`},
		{name: "nested in the template", tmpl: `{"where":{"ids":["$.result.id","$.args.id"]}}`, args: `{"id":1}`, result: `{"id":2}`,
			want: `{"where":{"ids":[2,1]}}`},
		{name: "a result that looks like a reference is only data", tmpl: `{"v":"$.result.x"}`, args: `{"secret":"s"}`,
			result: `{"x":"$.args.secret","$.args":"$.args"}`, want: `{"v":"$.args.secret"}`},
		{name: "a scalar result", tmpl: `{"v":"$.result"}`, result: `"deleted k"`, want: `{"v":"deleted k"}`},
		{name: "no references need nothing", tmpl: `{"all":true}`, want: `{"all":true}`},
		{name: "a missing member", tmpl: `{"v":"$.result.id"}`, result: `{"ID":1}`, missing: true},
		{name: "a member of a scalar", tmpl: `{"v":"$.result.id.x"}`, result: `{"id":1}`, missing: true},
		{name: "an index past the end", tmpl: `{"v":"$.result[3]"}`, result: `[1,2]`, missing: true},
		{name: "an index into an object", tmpl: `{"v":"$.result[0]"}`, result: `{"0":1}`, missing: true},
		{name: "a result that is not JSON", tmpl: `{"v":"$.result.id"}`, result: `{"id":`, missing: true},
		{name: "arguments not kept", tmpl: `{"v":"$.args.key"}`, result: `{}`, notKept: true},
		{name: "a result not kept", tmpl: `{"v":"$.result.id"}`, args: `{}`, notKept: true},
		{name: "a value too deep", tmpl: `{"v":"$.result"}`, result: deepValue, err: "levels deep"},
		{name: "a result too deep to read", tmpl: `{"v":"$.result.a"}`, result: `{"a":1,"b":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}`, missing: true},
		{name: "amplified past the bound", tmpl: `{"a":"$.args","b":"$.args","c":"$.args"}`, args: `{"x":"` + strings.Repeat("y", 30<<10) + `"}`, err: "at most"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tpl, err := compensate.Compile("undo", json.RawMessage(tc.tmpl))
			if err != nil {
				t.Fatal(err)
			}
			var args, result json.RawMessage
			if tc.args != "" {
				args = json.RawMessage(tc.args)
			}
			if tc.result != "" {
				result = json.RawMessage(tc.result)
			}
			out, err := tpl.Build(args, result)
			var me *compensate.MissingError
			var nk *compensate.NotKeptError
			switch {
			case tc.missing:
				if !errors.As(err, &me) {
					t.Fatalf("Build = %s, %v; want a MissingError", out, err)
				}
			case tc.notKept:
				if !errors.As(err, &nk) {
					t.Fatalf("Build = %s, %v; want a NotKeptError", out, err)
				}
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Build = %s, %v; want an error containing %q", out, err, tc.err)
				}
			case err != nil:
				t.Fatal(err)
			case string(out) != tc.want:
				t.Fatalf("Build = %s, want %s", out, tc.want)
			}
		})
	}
}

func TestUsesAndArgsAsWritten(t *testing.T) {
	tpl, err := compensate.Compile("kv_delete", json.RawMessage(`{ "key" : "$.args.key" }`))
	if err != nil {
		t.Fatal(err)
	}
	if !tpl.Uses(compensate.RootArgs) || tpl.Uses(compensate.RootResult) {
		t.Fatalf("uses args %v, result %v", tpl.Uses(compensate.RootArgs), tpl.Uses(compensate.RootResult))
	}
	if string(tpl.Args) != `{"key":"$.args.key"}` || tpl.Tool != "kv_delete" {
		t.Fatalf("%s %s", tpl.Tool, tpl.Args)
	}
	empty, err := compensate.Compile("reset", nil)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := empty.Build(nil, nil); err != nil || string(out) != "{}" {
		t.Fatalf("%s %v", out, err)
	}
}

// FuzzBuild: whatever the result, Build answers (a value or an error)
// within its bounds, and never panics.
func FuzzBuild(f *testing.F) {
	f.Add(`{"id":"o-1"}`)
	f.Add(`{"id":{"$.args":"$.result"}}`)
	f.Add(`[[[[[[1]]]]]]`)
	tpl, err := compensate.Compile("undo", json.RawMessage(`{"a":"$.result.id","b":"$.result[0][0]","c":"$.result[\"id\"].x"}`))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, result string) {
		out, err := tpl.Build(json.RawMessage(`{}`), json.RawMessage(result))
		if err == nil && (len(out) > compensate.MaxBuiltBytes || !json.Valid(out)) {
			t.Fatalf("built %d bytes, valid %v", len(out), json.Valid(out))
		}
	})
}
