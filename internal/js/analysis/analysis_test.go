package analysis

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/fault"
)

// names renders refs compactly for comparison.
func names(refs []Ref) []string {
	out := make([]string, 0, len(refs))
	for _, r := range refs {
		out = append(out, r.FullName())
	}
	return out
}

func TestMCPReferences(t *testing.T) {
	tests := []struct {
		name    string
		code    string
		want    []string
		dynamic bool
	}{
		{"dot", `const a = await mcp.demo.echo({x:1}); return a`, []string{"demo:echo"}, false},
		{"brackets", `return await mcp["demo"]["echo"]()`, []string{"demo:echo"}, false},
		{"single quotes", `return mcp['demo']['echo']()`, []string{"demo:echo"}, false},
		{"mixed non-identifier tool", `return mcp.ev["get-sum"]({a:1})`, []string{"ev:get-sum"}, false},
		{"non-identifier server", `return mcp["my-server"].run()`, []string{"my-server:run"}, false},
		{"optional chaining", `return mcp?.demo?.echo?.()`, []string{"demo:echo"}, false},
		{"optional brackets", `return mcp?.["demo"]?.["echo"]?.()`, []string{"demo:echo"}, false},
		{"template key", "return mcp[`demo`][`get-sum`]()", []string{"demo:get-sum"}, false},
		{"escaped string", `return mcp["d\x65mo"]["\u0065cho"]()`, []string{"demo:echo"}, false},
		{"escaped identifier", `return mcp.d\u0065mo.echo()`, []string{"demo:echo"}, false},
		{"astral escape", `return mcp.s["\u{1F600}"]()`, []string{"s:\U0001F600"}, false},
		{"parenthesised", `return (mcp).demo.echo()`, []string{"demo:echo"}, false},
		{"via globalThis", `return globalThis.mcp.demo.echo()`, []string{"demo:echo"}, false},
		{"deeper member", `return mcp.demo.echo.call(null, {})`, []string{"demo:echo"}, false},
		{"sorted and unique",
			`await mcp.b.y(); await mcp.a.z(); await mcp.a.x(); await mcp.b.y(); await mcp.a.z()`,
			[]string{"a:x", "a:z", "b:y"}, false},
		{"arrow functions and Promise.all",
			`const xs = [1,2,3];
			 const r = await Promise.all(xs.map(async (x) => mcp.math.square({x})));
			 const f = () => () => mcp.math.sum({xs: r});
			 return f()()`,
			[]string{"math:square", "math:sum"}, false},
		{"loops, try, classes, switch",
			`for (const x of [1]) { await mcp.a.loop(x) }
			 for (let i = 0; i < 2; i++) while (false) mcp.a.while();
			 try { mcp.a.try() } catch (e) { mcp.a.catch() } finally { mcp.a.finally() }
			 class C { f = mcp.a.field(); static s = mcp.a.static(); m() { return mcp.a.method() } static { mcp.a.block() } }
			 switch (1) { case mcp.a.case(): break; default: mcp.a.default() }
			 for await (const y of [mcp.a.forawait()]) {}
			 async function* g() { yield mcp.a.yield() }
			 const {k = mcp.a.dflt()} = {};
			 label: { mcp.a.label(); break label }
			 return ` + "`${mcp.a.template()}`",
			[]string{"a:block", "a:case", "a:catch", "a:default", "a:dflt", "a:field", "a:finally", "a:forawait",
				"a:label", "a:loop", "a:method", "a:static", "a:template", "a:try", "a:while", "a:yield"}, false},
		{"computed key holding a reference", `return mcp.a[mcp.b.name()]()`, []string{"b:name"}, true},
		{"call result chained", `return mcp.a.b().mcp.c.d`, []string{"a:b"}, false},
		{"strings and comments do not count",
			`// mcp.x.comment()
			 /* mcp.x.block() */
			 const s = "mcp.x.string()" + 'mcp.x.single()' + ` + "`mcp.x.template()`" + `;
			 const re = /mcp.x.regex/;
			 return s`,
			[]string{}, false},
		{"property named mcp is not the global", `const o = {mcp: {a: {b(){}}}}; return o.mcp.a.b()`, []string{}, false},

		// Shadowing: a local mcp is not the namespace.
		{"shadowed by const", `const mcp = {a: {b: () => 1}}; return mcp.a.b()`, []string{}, false},
		{"shadowed by parameter", `function f(mcp) { return mcp.a.b() } return mcp.real.one()`, []string{"real:one"}, false},
		{"shadowed in block only", `{ let mcp = 1; mcp.a.b } return mcp.c.d()`, []string{"c:d"}, false},
		{"shadowed by hoisted var", `mcp.a.b(); { var mcp = {} }`, []string{}, false},
		{"shadowed by catch", `try {} catch (mcp) { mcp.a.b() }`, []string{}, false},

		// Dynamic access is flagged, not rejected.
		{"computed server", `const name = "demo"; return mcp[name].echo()`, []string{}, true},
		{"computed tool", `const k = "echo"; return mcp.demo[k]()`, []string{}, true},
		{"template with substitution", "const k = 'o'; return mcp.demo[`ech${k}`]()", []string{}, true},
		{"alias", `const m = mcp; return m.demo.echo()`, []string{}, true},
		{"destructuring", `const {demo} = mcp; return demo.echo()`, []string{}, true},
		{"server object as value", `const s = mcp.demo; return s.echo()`, []string{}, true},
		{"passed as argument", `Object.keys(mcp); return mcp.demo.echo()`, []string{"demo:echo"}, true},
		{"numeric key", `return mcp[0].x()`, []string{}, true},
		{"eval", `return eval("mcp.demo.echo()")`, []string{}, true},
		{"Function", `return new Function("return mcp")()`, []string{}, true},
		{"globalThis computed", `return globalThis["m" + "cp"].demo.echo()`, []string{}, true},
		{"none", `return 1 + 1`, []string{}, false},
		{"empty", ``, []string{}, false},
		{"top-level return and await without tools", "return await Promise.resolve(args)", []string{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			refs, err := MCPReferences(tc.code)
			if err != nil {
				t.Fatalf("MCPReferences: %v", err)
			}
			if got := names(refs.Tools); !slices.Equal(got, tc.want) {
				t.Errorf("tools = %q, want %q", got, tc.want)
			}
			if refs.Dynamic != tc.dynamic {
				t.Errorf("dynamic = %v, want %v", refs.Dynamic, tc.dynamic)
			}
		})
	}
}

func TestPositions(t *testing.T) {
	code := "const a = 1;\n" +
		"  await mcp.demo.echo();\n" +
		"const é = 'ü'; await mcp[\"x\"].y();\r\n" +
		"await mcp.demo.echo(); await mcp?.[`t`].u()"
	refs, err := MCPReferences(code)
	if err != nil {
		t.Fatal(err)
	}
	want := []Ref{
		{Server: "demo", Tool: "echo", Line: 2, Column: 13}, // first occurrence wins
		{Server: "t", Tool: "u", Line: 4, Column: 36},
		{Server: "x", Tool: "y", Line: 3, Column: 26}, // columns count characters, not bytes
	}
	if !slices.Equal(refs.Tools, want) {
		t.Errorf("refs = %+v\nwant   %+v", refs.Tools, want)
	}

	// Line 1 shares its line with the wrapper head in the parsed source.
	refs, err = MCPReferences(`return mcp.a.b()`)
	if err != nil {
		t.Fatal(err)
	}
	if r := refs.Tools[0]; r.Line != 1 || r.Column != 12 {
		t.Errorf("line 1 position = %d:%d, want 1:12", r.Line, r.Column)
	}
}

func TestSyntaxErrors(t *testing.T) {
	tests := []struct {
		name         string
		code         string
		line, column int
		contains     string
	}{
		{"first line", `const a = ;`, 1, 11, "unexpected ;"},
		{"later line", "const a = 1;\nconst b = 2;\n\nlet c = = 3;", 4, 9, "unexpected ="},
		{"after CRLF", "const a = 1;\r\nlet c = = 3;", 2, 9, "unexpected ="},
		{"unterminated string", "return 1;\nconst s = 'abc", 2, 11, "unterminated string"},
		{"unclosed block", "if (x) {\n  return 1", 2, 11, "EOF"},
		{"unclosed call", "f(", 1, 3, "EOF"},
		{"stray brace", "return 1 }", 1, 10, "unexpected }"},
		{"wrapper escape", "}); globalThis.x = 1; (function(){", 1, 1, "unexpected }"},
		{"redeclared", "let a;\nlet a;", 2, 5, "already been declared"},
		{"unterminated comment", "/* open", 1, 8, "EOF"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := MCPReferences(tc.code)
			var fe *fault.Error
			if !errors.As(err, &fe) {
				t.Fatalf("err = %v, want *fault.Error", err)
			}
			if fe.Code != fault.ScriptError {
				t.Errorf("code = %s, want %s", fe.Code, fault.ScriptError)
			}
			suffix := fmt.Sprintf("(line %d, column %d)", tc.line, tc.column)
			if !strings.HasPrefix(fe.Message, "SyntaxError: ") || !strings.HasSuffix(fe.Message, suffix) {
				t.Errorf("message = %q, want SyntaxError: … %s", fe.Message, suffix)
			}
			if !strings.Contains(fe.Message, tc.contains) {
				t.Errorf("message = %q, want it to mention %q", fe.Message, tc.contains)
			}
			if strings.Contains(fe.Message, "async function (args)") {
				t.Errorf("message leaks the wrapper: %q", fe.Message)
			}
			// Only code that parses but leaves the function body is a
			// verdict; the rest is the parser's opinion, the engine's to
			// confirm.
			var ue *UnreadableError
			if got, want := errors.As(err, &ue), tc.name != "wrapper escape"; got != want {
				t.Errorf("UnreadableError = %v, want %v", got, want)
			}
		})
	}
}

func TestModernSyntax(t *testing.T) {
	// Valid code the sandbox runs must never be rejected by analysis.
	valid := []string{
		`class A { #p = 1; static s = 2; get p() { return this.#p } static { this.q = 1 } static has(o) { return #p in o } }`,
		`let a = null; a ??= 3; a ||= 4; a &&= 5; return a ?? 1`,
		`return 10n ** 2n + 1_000_000n`,
		`async function* g() { yield 1 } for await (const x of g()) {} return 1`,
		`const {a, ...rest} = {a: 1, b: 2}; return [...Object.keys(rest)]`,
		`return /a(?<n>b)/dgsu.exec("ab")`,
		`try { throw 1 } catch { return 2 }`,
		`const f = async (x) => await x; return Promise.all([1, 2].map(async x => await f(x)))`,
		`return import("x").catch(() => 0)`,
		"x = 1 <!-- html comment\nreturn x",
		`return a?.b?.[c]?.(d)`,
		`label: for (const x of [1]) { for (;;) break label }`,
	}
	for _, code := range valid {
		if _, err := MCPReferences(code); err != nil {
			t.Errorf("%q: %v", code, err)
		}
	}
}

// bigScript builds about n bytes of realistic script text.
func bigScript(n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "// step %d: call mcp.fake.comment%d only in a comment\n", i, i)
		fmt.Fprintf(&b, "const r%d = await Promise.all([1, 2, 3].map(async (x) => mcp.srv%d.tool_%d({x, s: \"mcp.no.t%d\"})));\n", i, i%7, i%13, i)
		fmt.Fprintf(&b, "if (r%d.length > 2) { for (const y of r%d) { await mcp?.[\"other\"]?.[`t-%d`]?.(y) } }\n", i, i, i%5)
	}
	b.WriteString("return 1\n")
	return b.String()
}

func TestLargeInput(t *testing.T) {
	code := bigScript(100 << 10)
	start := time.Now()
	refs, err := MCPReferences(code)
	elapsed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	// 7 servers × 13 tools cycle together (lcm 91 < iterations), plus other:t-0..4.
	if len(refs.Tools) != 91+5 || refs.Dynamic {
		t.Errorf("got %d tools (dynamic %v), want 96 static", len(refs.Tools), refs.Dynamic)
	}
	// Generous: the parse takes a few milliseconds; this catches quadratic
	// behaviour (hours at this size), not noise on a shared machine or the
	// race detector's slowdown.
	if elapsed > 10*time.Second {
		t.Errorf("100 KB took %v", elapsed)
	}
}

func TestHostileNesting(t *testing.T) {
	// The parser caps nesting; hostile input must end in a SyntaxError,
	// never a crash or a long stall.
	for _, code := range []string{
		strings.Repeat("(", 100000),
		"return x" + strings.Repeat(".a", 50000),
		strings.Repeat("[", 100000),
		strings.Repeat("{", 100000),
		strings.Repeat("mcp.a.b(", 50000),
	} {
		start := time.Now()
		_, err := MCPReferences(code)
		if fault.CodeOf(err) != fault.ScriptError {
			t.Errorf("%.20q…: err = %v, want SCRIPT_ERROR", code, err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%.20q…: took %v", code, d)
		}
	}
	// A long but legal chain is analysed.
	refs, err := MCPReferences("return mcp.a.b" + strings.Repeat(".c", 500))
	if err != nil || len(refs.Tools) != 1 {
		t.Errorf("long chain: %+v, %v", refs, err)
	}
}

func BenchmarkMCPReferences100KB(b *testing.B) {
	code := bigScript(100 << 10)
	b.SetBytes(int64(len(code)))
	for b.Loop() {
		if _, err := MCPReferences(code); err != nil {
			b.Fatal(err)
		}
	}
}

func FuzzMCPReferences(f *testing.F) {
	for _, s := range []string{`return mcp.a.b()`, `mcp["x"][` + "`y`" + `]`, "})", `"\u{1F600}"`, `mcp.a["\uD83D\uDE00"]`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, code string) {
		refs, err := MCPReferences(code)
		if err != nil {
			if fault.CodeOf(err) != fault.ScriptError {
				t.Fatalf("error code %s: %v", fault.CodeOf(err), err)
			}
			return
		}
		for _, r := range refs.Tools {
			if r.Line < 0 || r.Column < 0 {
				t.Fatalf("bad position %+v", r)
			}
		}
	})
}
