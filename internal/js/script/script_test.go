package script

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/js/analysis"
)

func TestPrepareLanguages(t *testing.T) {
	tests := []struct {
		name, code, lang string
		ts, checked      bool   // what Prepare decides
		same             bool   // the code runs unchanged
		absent           string // text that must not survive
		errLine, errCol  int    // a syntax error at this position
	}{
		{name: "plain JavaScript", code: "const n = 41;\nreturn n + 1", checked: true, same: true},
		{name: "annotation", code: "const n: number = 41; return n + 1", ts: true, checked: true, absent: ": number"},
		{name: "interface and as", code: "interface P { x: number }\nconst p = {x: 1} as P;\nreturn p.x", ts: true, checked: true, absent: "interface"},
		{name: "generics", code: "function id<T>(x: T): T { return x }\nreturn id<number>(42)", lang: LangTS, ts: true, checked: true, absent: "<number>"},
		{name: "enum", code: "enum Color { Red, Green }\nreturn Color.Green", ts: true, checked: true, absent: "enum "},
		{name: "type-only declarations", code: "type A = string; declare const x: A;\nreturn 1", ts: true, checked: true, absent: "declare"},
		{name: "top-level await and return in TypeScript", code: "const r: unknown = await Promise.resolve(1);\nreturn r", ts: true, checked: true},
		{name: "lang ts on plain JavaScript", code: "return 1", lang: LangTS, ts: true, checked: true},
		// Valid sloppy-mode JavaScript the analysis parser rejects: it
		// must run (esbuild reads it; as JavaScript only, unchanged).
		{name: "for-in initializer", code: "var t=[]; for (var k = 2 in {x:1}) t.push(k); return t", ts: true, checked: true},
		{name: "for-in initializer as js", code: "var t=[]; for (var k = 2 in {x:1}) t.push(k); return t", lang: LangJS, same: true},
		// Nobody reads it: the engine judges, unchanged.
		{name: "syntax error", code: "return (", same: true},
		{name: "syntax error as js", code: "return (", lang: LangJS, same: true},
		{name: "syntax error as ts", code: "const a: number = 1;\nreturn (", lang: LangTS, errLine: 2, errCol: 9},
		{name: "unclosed block as ts", code: "if (x) {\n  return 1", lang: LangTS, errLine: 2, errCol: 11},
		{name: "non-ASCII before the error", code: "const é: string = 'é'; )", lang: LangTS, errLine: 1, errCol: 24},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Prepare(tc.code, tc.lang)
			if tc.errLine > 0 {
				fe := fault.As(err)
				if fe == nil || fe.Code != fault.ScriptError || !strings.HasPrefix(fe.Message, "SyntaxError: ") {
					t.Fatalf("err = %v, want a SyntaxError", err)
				}
				if d, _ := fe.Details.(map[string]int); d["line"] != tc.errLine || d["column"] != tc.errCol {
					t.Errorf("details = %v, want line %d column %d (%s)", fe.Details, tc.errLine, tc.errCol, fe.Message)
				}
				return
			}
			if err != nil {
				t.Fatalf("Prepare: %v", err)
			}
			if p.TypeScript != tc.ts || p.Checked != tc.checked {
				t.Errorf("TypeScript, Checked = %v, %v; want %v, %v\n%s", p.TypeScript, p.Checked, tc.ts, tc.checked, p.Code)
			}
			if unread := tc.same && !tc.checked; (p.Unread != nil) != unread {
				t.Errorf("Unread = %v, want it set: %v", p.Unread, unread)
			}
			if tc.same && p.Code != tc.code {
				t.Errorf("Code = %q, want it unchanged", p.Code)
			}
			if tc.absent != "" && strings.Contains(p.Code, tc.absent) {
				t.Errorf("Code still has %q:\n%s", tc.absent, p.Code)
			}
		})
	}
}

func TestPrepareRefusesAnEscape(t *testing.T) {
	for _, lang := range []string{LangAuto, LangJS, LangTS} {
		_, err := Prepare("}); globalThis.x = 1; (function(){", lang)
		var ue *analysis.UnreadableError
		if fault.CodeOf(err) != fault.ScriptError || errors.As(err, &ue) {
			t.Errorf("lang %q: err = %v, want a ScriptError verdict", lang, err)
		}
	}
	if _, err := Prepare("return 1", "python"); fault.CodeOf(err) != fault.InvalidRequest {
		t.Errorf("unknown lang: err = %v, want INVALID_REQUEST", err)
	}
}

// TestRefsPointAtTheTypeScript: a tool's position is where the TypeScript
// names it, although the types before it were stripped and esbuild
// reprinted the lines.
func TestRefsPointAtTheTypeScript(t *testing.T) {
	code := "interface Row {\n  id: number;\n  name: string\n}\n" +
		"const rows: Row[] = [];   const  éλ: string = 'x';\n" +
		"const out = await mcp.demo.echo<Row>({rows} as any) as Row[];\n" +
		"return (await mcp.kv.get({key: éλ as string})) ?? out"
	p := mustPrepare(t, code, LangTS)
	for _, r := range p.Refs.Tools {
		wl, wc := positionOf(t, code, "mcp."+r.Server+"."+r.Tool)
		wc += len("mcp.") // refs point at the server name
		if r.Line != wl || r.Column != wc {
			t.Errorf("%s at %d:%d, want %d:%d", r.FullName(), r.Line, r.Column, wl, wc)
		}
	}
	if len(p.Refs.Tools) != 2 {
		t.Errorf("refs = %+v, want demo:echo and kv:get", p.Refs.Tools)
	}
}

// TestPositionMapsTokens: every identifier that survives stripping maps
// from its place in Code back to its place in the TypeScript.
func TestPositionMapsTokens(t *testing.T) {
	code := "const  alpha: number = 1;\n" +
		"type T = {a: string};\n" +
		"\tconst beta = (alpha as number) + 2; const gamma: T = {a: 'éλ'}; const delta = gamma;\n" +
		"\n" +
		"enum E { X }\n" +
		"const epsilon = E.X; throw new Error(String(beta + epsilon))"
	p := mustPrepare(t, code, LangTS)
	for _, tok := range []string{"alpha", "beta", "gamma", "delta", "epsilon", "Error"} {
		gl, gc := positionOf(t, p.Code, tok)
		wl, wc := positionOf(t, code, tok)
		if l, c := p.Position(gl, gc); l != wl || c != wc {
			t.Errorf("%s: Code %d:%d maps to %d:%d, want %d:%d\n%s", tok, gl, gc, l, c, wl, wc, p.Code)
		}
	}
}

func TestMapError(t *testing.T) {
	code := "const a: number = 1;\n\nconst b: string = 'x'; null.foo"
	p, err := Prepare(code, LangTS)
	if err != nil {
		t.Fatal(err)
	}
	gl, gc := positionOf(t, p.Code, "null")
	e := &fault.Error{Code: fault.ScriptError, Message: "TypeError: no", Stack: "    at <anonymous> (main.js:" + strconv.Itoa(gl) + ":" + strconv.Itoa(gc) + ")\n    at f (main.js:1:1)"}
	p.MapError(e)
	wl, wc := positionOf(t, code, "null")
	if want := "    at <anonymous> (main.ts:" + strconv.Itoa(wl) + ":" + strconv.Itoa(wc) + ")"; !strings.HasPrefix(e.Stack, want) {
		t.Errorf("stack = %q, want it to start %q", e.Stack, want)
	}
	if e.Details != nil {
		t.Errorf("details = %v on a checked run", e.Details)
	}

	// The engine's SyntaxError of code nobody else read gets the static
	// check's shape.
	p, err = Prepare("let x = 1;\nlet let = 2", LangAuto)
	if err != nil {
		t.Fatal(err)
	}
	p.Checked = false // as if the parser had not read it
	e = &fault.Error{Code: fault.ScriptError, Message: "SyntaxError: 'let' is not a valid lexical identifier", Stack: "    at main.js:2:5"}
	p.MapError(e)
	if d, _ := e.Details.(map[string]int); d["line"] != 2 || d["column"] != 5 || !strings.HasSuffix(e.Message, "(line 2, column 5)") {
		t.Errorf("error = %+v, want line 2 column 5", e)
	}
	p.MapError(nil) // no panic
}

func TestDecodeVLQ(t *testing.T) {
	tests := []struct {
		in   string
		want []int
	}{
		{"A", []int{0}},
		{"C", []int{1}},
		{"D", []int{-1}},
		{"gB", []int{16}},
		{"AAgBC", []int{0, 0, 16, 1}},
		{"2Hx+B", []int{123, -1000}},
	}
	for _, tc := range tests {
		got, err := decodeVLQ(tc.in)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("decodeVLQ(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"g", "!", "gggggggggggA"} {
		if _, err := decodeVLQ(bad); err == nil {
			t.Errorf("decodeVLQ(%q) succeeded", bad)
		}
	}
}

func mustPrepare(t *testing.T, code, lang string) *Prepared {
	t.Helper()
	p, err := Prepare(code, lang)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// positionOf is the 1-based line and character column of the first tok in
// s.
func positionOf(t *testing.T, s, tok string) (int, int) {
	t.Helper()
	i := strings.Index(s, tok)
	if i < 0 {
		t.Fatalf("%q not in %q", tok, s)
	}
	before := s[:i]
	line := strings.Count(before, "\n") + 1
	return line, utf8.RuneCountInString(before[strings.LastIndex(before, "\n")+1:]) + 1
}

// TestPrepareBoundsFirst: Prepare refuses code over the size limit, and
// code nested deeper than the parsers may recurse, before any parser runs,
// in every language; TypeScript whose stripped JavaScript outgrows the
// limit is refused too.
func TestPrepareBoundsFirst(t *testing.T) {
	deep := func(open, close string, n int) string { return strings.Repeat(open, n) + strings.Repeat(close, n) }
	tests := []struct {
		name, code string
		limits     Limits
		limit      string
	}{
		{"brackets 500k deep", "return " + deep("[", "]", 500_000), Limits{CodeBytes: 2 << 20}, fault.LimitCodeDepth},
		{"parentheses 500k deep", "return " + deep("(", ")", 500_000), Limits{CodeBytes: 2 << 20}, fault.LimitCodeDepth},
		{"member chain 500k long", "return a" + strings.Repeat(".a", 500_000), Limits{CodeBytes: 2 << 20}, fault.LimitCodeDepth},
		{"braces 500k deep", deep("{", "}", 500_000), Limits{CodeBytes: 2 << 20}, fault.LimitCodeDepth},
		{"too large and too deep: size first", deep("(", ")", 500_000), Limits{}, fault.LimitCodeSize},
		{"over a lowered limit", "return 1 // " + strings.Repeat("x", 200), Limits{CodeBytes: 100}, fault.LimitCodeSize},
		// 30 nested blocks are admitted, but esbuild indents each of the
		// statements inside by 60 columns: 7 KB of TypeScript becomes 70.
		{"stripped output over the limit", "let a: number;" + deep("{", "}", 30)[:30] + strings.Repeat("a;", 3000) + strings.Repeat("}", 30), Limits{CodeBytes: 64 << 10}, fault.LimitCodeSize},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, lang := range []string{LangAuto, LangJS, LangTS} {
				_, err := PrepareWithLimits(tc.code, lang, tc.limits)
				fe := fault.As(err)
				if tc.limit == fault.LimitCodeSize && lang == LangJS && strings.HasPrefix(tc.name, "stripped") {
					// JavaScript is not stripped: it runs (and the engine
					// judges it).
					if err != nil {
						t.Fatalf("%s: %v", lang, err)
					}
					continue
				}
				if fe == nil || fe.Code != fault.LimitExceeded || fe.Limit != tc.limit {
					t.Fatalf("%q: err = %v, want LIMIT_EXCEEDED %s", lang, err, tc.limit)
				}
			}
		})
	}
	// Prepare is PrepareWithLimits under the engine's default size limit.
	if _, err := Prepare(strings.Repeat(" ", 300<<10)+"return 1", LangAuto); fault.As(err) == nil || fault.As(err).Limit != fault.LimitCodeSize {
		t.Fatalf("Prepare of 300 KiB: %v, want code_size", err)
	}
}

// TestRedeclarationsKeptFromEsbuild: code filled with names declared again
// (each of which esbuild reports with a note it measures back to the
// first: 36 KB of `let a; var a; var a…` took it 2.7 s, quadratic in the
// size), or with a parameter list repeating a name (12 KB took it 0.6 s),
// never reaches esbuild. As TypeScript it is refused by the pre-scan, not
// by esbuild; as JavaScript it is left, unread, to the engine, which stops
// at the first.
func TestRedeclarationsKeptFromEsbuild(t *testing.T) {
	const size = 64 << 10
	fill := func(head, unit, tail string) string {
		return head + strings.Repeat(unit, (size-len(head)-len(tail))/len(unit)) + tail
	}
	for _, code := range []string{
		fill("let a;", "let a;", ""),
		fill("let a;", "var a;", ""),
		fill("let a;", "{ var a }", ""),
		fill("let a;", "function a() {}", ""),
		fill("class a {}", "function* a() {}", ""),
		fill("let ", "await, ", "a"),
		fill("let ", "yield, ", "a"),
		fill("'use strict'; (function f(", "a, ", "a) {})"),
		fill("x = { m(", "a, ", "a) {} }"),
		fill("class A { m(", "a, ", "a): void {} }"),
		fill("class A {", "#a;", "}"),
		fill("x = {", "__proto__: 1, ", "}"),
	} {
		_, err := PrepareWithLimits(code, LangTS, Limits{CodeBytes: size})
		fe := fault.As(err)
		if fe == nil || strings.Contains(fe.Message, "The symbol") || strings.Contains(fe.Message, "cannot be bound") ||
			!(fe.Code == fault.ScriptError && strings.Contains(fe.Message, "has already been declared") ||
				fe.Code == fault.LimitExceeded && strings.Contains(fe.Message, "argument or parameter list")) {
			t.Errorf("TypeScript %.40q…: %v, want the pre-scan's SyntaxError", code, err)
		}
		// As JavaScript it runs as it is (the analysis parser reads some
		// of it: it is lenient with private names and __proto__).
		p, err := PrepareWithLimits(code, LangAuto, Limits{CodeBytes: size})
		if err != nil || p.TypeScript || p.Code != code {
			t.Errorf("%.40q…: %v (TypeScript %v), want it to run as it is", code, err, p != nil && p.TypeScript)
		}
	}
}
