package executor_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/trace"
	"github.com/pml-sandbox/pml/internal/tsdecl"
)

// TestTypeScriptAndUnreadableCode: TypeScript runs with positions in its
// own coordinates, and code the analysis parser cannot read still runs
// (the engine judges it, tool names are checked as they are called).
func TestTypeScriptAndUnreadableCode(t *testing.T) {
	svc := demoService(nil)
	tests := []struct {
		name, code, lang string
		want             string         // JSON result when ok
		code2            fault.Code     // else the error code
		message, stack   string         // and text the message and stack contain
		details          map[string]int // and its line and column
	}{
		{name: "annotation", code: "const n: number = 41; return n + 1", want: "42"},
		{name: "lang ts", lang: "ts", code: "function id<T>(x: T): T { return x }\nreturn id<number>(42)", want: "42"},
		{name: "enum and interface", code: "interface P { c: Color }\nenum Color { Red = 'r', Green = 'g' }\nconst p: P = {c: Color.Green};\nreturn p.c", want: `"g"`},
		{name: "typed tool call", code: "type Sum = number;\nconst s = await mcp.demo.add({a: 1, b: 2}) as Sum;\nreturn s", want: "3"},
		{name: "tool not found at the TypeScript's position", code: "const a: number = 1;\n\nconst  x: unknown = await mcp.demo.ad({a, b: 2});",
			code2: fault.ToolNotFound, message: "(line 3)", details: map[string]int{"line": 3, "column": 31}},
		{name: "stack frame at the TypeScript's position", code: "const a: number = 1;\ninterface I {}\nconst o: any = null;   o.foo",
			code2: fault.ScriptError, message: "TypeError", stack: "main.ts:3:25"},
		{name: "for-in initializer runs", code: "var t=[]; for (var k = 2 in {x:1}) t.push(k); return t", want: `["x"]`},
		{name: "for-in initializer runs as js", lang: "js", code: "var t=[]; for (var k = 2 in {x:1}) t.push(k); return t", want: `["x"]`},
		{name: "unread code checks names at call time", lang: "js", code: "for (var k = 2 in {}) ;\nreturn await mcp.demo.nope({})",
			code2: fault.ToolNotFound, message: "mcp.demo.nope is not a tool"},
		{name: "the engine's SyntaxError", code: "const a = 1;\nreturn (", code2: fault.ScriptError, message: "SyntaxError",
			details: map[string]int{"line": 2, "column": 9}},
		{name: "TypeScript SyntaxError", lang: "ts", code: "const a: number = 1;\nreturn (", code2: fault.ScriptError, message: "SyntaxError",
			details: map[string]int{"line": 2, "column": 9}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := svc.Execute(context.Background(), execution.Request{Code: tc.code, Lang: tc.lang})
			if tc.code2 == "" {
				if !r.OK || string(r.Result) != tc.want {
					t.Fatalf("result = %s, %+v; want %s", r.Result, r.Error, tc.want)
				}
				return
			}
			if r.OK || r.Error.Code != tc.code2 {
				t.Fatalf("got ok=%v %+v, want %s", r.OK, r.Error, tc.code2)
			}
			if !strings.Contains(r.Error.Message, tc.message) || !strings.Contains(r.Error.Stack, tc.stack) {
				t.Errorf("error = %q, stack %q; want %q and %q", r.Error.Message, r.Error.Stack, tc.message, tc.stack)
			}
			if tc.details != nil {
				raw, _ := json.Marshal(r.Error.Details)
				var d map[string]any
				_ = json.Unmarshal(raw, &d)
				for k, v := range tc.details {
					if d[k] != float64(v) {
						t.Errorf("details = %s, want %s = %d", raw, k, v)
					}
				}
			}
		})
	}
}

// TestToolSummaryShape: tools.list and tools.search return exactly the
// ToolSummary the declarations promise (search adds score): every
// declared key that is not optional is there, and no undeclared one.
func TestToolSummaryShape(t *testing.T) {
	src := fixedSource{name: "s", tools: []catalog.Tool{
		{Server: "kv", Name: "get-all", Title: "Get everything", Description: "all the keys", Kind: trace.KindMCP,
			InputSchema: json.RawMessage(`{"type":"object"}`)},
		{Server: "kv", Name: "bare", Kind: trace.KindMCP},
	}}
	svc := executor.New(engine, executor.Options{Sources: []execution.ToolSource{src}, Logger: slog.New(slog.DiscardHandler)})
	r := svc.Execute(context.Background(), execution.Request{Code: `return [await tools.list(), await tools.search("everything keys", 5)]`})
	if !r.OK {
		t.Fatal(r.Error)
	}
	var got [2][]map[string]json.RawMessage
	if err := json.Unmarshal(r.Result, &got); err != nil {
		t.Fatal(err)
	}
	required, optional := declaredSummary(t)
	for i, list := range got {
		if len(list) == 0 {
			t.Fatalf("result %d is empty: %s", i, r.Result)
		}
		for _, m := range list {
			for _, k := range required {
				if _, ok := m[k]; !ok {
					t.Errorf("%s lacks %q, which the declarations require", m["call"], k)
				}
			}
			for k := range m {
				if !slices.Contains(required, k) && !slices.Contains(optional, k) && !(i == 1 && k == "score") {
					t.Errorf("%s has %q, which the declarations do not declare", m["call"], k)
				}
			}
			if i == 1 {
				if _, ok := m["score"]; !ok {
					t.Errorf("a search hit without a score: %s", r.Result)
				}
			}
		}
	}
	if !strings.Contains(string(r.Result), `"call":"mcp.kv[\"get-all\"](args)"`) || !strings.Contains(string(r.Result), `"title":"Get everything"`) {
		t.Errorf("result lacks the call expression or the title: %s", r.Result)
	}
}

// declaredSummary reads the keys of the ToolSummary interface from the
// declarations the agents are given.
func declaredSummary(t *testing.T) (required, optional []string) {
	d := tsdecl.Declarations(nil)
	start := strings.Index(d, "interface ToolSummary {\n")
	if start < 0 {
		t.Fatalf("no ToolSummary in the declarations:\n%s", d)
	}
	body := d[start:]
	body = body[len("interface ToolSummary {\n"):strings.Index(body, "\n}")]
	key := regexp.MustCompile(`^\s+(\w+)(\??):`)
	for _, line := range strings.Split(body, "\n") {
		if m := key.FindStringSubmatch(line); m != nil {
			if m[2] == "?" {
				optional = append(optional, m[1])
			} else {
				required = append(required, m[1])
			}
		}
	}
	return required, optional
}

// TestScriptMayDeclareArgs: a script's own top-level `args` shadows the
// input (which the engine would otherwise refuse as a redefinition of the
// parameter), the input stays globalThis.args, and a script that only
// reads args, or redeclares it with var, sees the input as before.
func TestScriptMayDeclareArgs(t *testing.T) {
	svc := demoService(nil)
	tests := []struct{ name, code, lang, want string }{
		{"const", `const args = {mine: true}; return [args, globalThis.args]`, "", `[{"mine":true},{"n":1}]`},
		{"let, TypeScript", `let args: {n: number} = {n: 2}; return args.n + globalThis.args.n`, "ts", `3`},
		{"class", `class args { static n = 5 }; return args.n`, "", `5`},
		{"destructured", `const {n, args = n * 10} = {n: 4}; return [args, globalThis.args.n]`, "", `[40,1]`},
		{"read only", `return args.n`, "", `1`},
		{"var keeps the parameter", `var args = args || {}; return args.n`, "", `1`},
		{"nested scopes were always free to", `{ const args = 7; if (args !== 7) throw 1 } return args.n`, "", `1`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := svc.Execute(context.Background(), execution.Request{Code: tc.code, Lang: tc.lang, Args: json.RawMessage(`{"n":1}`)})
			if !r.OK || string(r.Result) != tc.want {
				t.Fatalf("result = %s, %+v; want %s", r.Result, r.Error, tc.want)
			}
		})
	}
}
