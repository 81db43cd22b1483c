package prescan

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/fault"
)

const levels = 500_000 // what brought `pml serve` down

var rep = strings.Repeat

// names returns n distinct names, comma-separated.
func names(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "a%d,", i)
	}
	return b.String()
}

// hostile are shapes a recursive parser recurses on once per level (each
// was measured to overflow esbuild's or the analysis' Go stack at a few
// hundred thousand levels, or to cost it seconds long before).
var hostile = []struct {
	name string
	code func(n int) string
}{
	{"parentheses", func(n int) string { return "return " + rep("(", n) + "1" + rep(")", n) }},
	{"brackets", func(n int) string { return "return " + rep("[", n) + rep("]", n) }},
	{"braces", func(n int) string { return rep("{", n) + rep("}", n) }},
	{"objects", func(n int) string { return "return " + rep("{a:", n) + "1" + rep("}", n) }},
	{"member chain", func(n int) string { return "return a" + rep(".a", n) }},
	{"member chain of a number", func(n int) string { return "return 1." + rep(".a", n) }},
	{"calls", func(n int) string { return "return a" + rep("()", n) }},
	{"indexes", func(n int) string { return "return a" + rep("[0]", n) }},
	{"tagged templates", func(n int) string { return "return a" + rep("``", n) }},
	{"optional chain", func(n int) string { return "return a" + rep("?.a", n) }},
	{"template literals", func(n int) string { return "return " + rep("`${", n) + "1" + rep("}`", n) }},
	{"not", func(n int) string { return "return " + rep("!", n) + "a" }},
	{"minus", func(n int) string { return "return " + rep("- ", n) + "a" }},
	{"prefix decrements", func(n int) string { return "return " + rep("--", n) + "a" }},
	{"postfix decrements", func(n int) string { return "return a" + rep("--", n) }},
	{"typeof", func(n int) string { return "return " + rep("typeof ", n) + "a" }},
	{"await", func(n int) string { return "return " + rep("await ", n) + "a" }},
	{"new", func(n int) string { return "return " + rep("new ", n) + "a" }},
	{"spread", func(n int) string { return "return [" + rep("...[", n) + rep("]", n) + "]" }},
	{"arrows", func(n int) string { return "return " + rep("a=>", n) + "a" }},
	{"async arrows", func(n int) string { return "return " + rep("async a=>", n) + "a" }},
	{"ternaries", func(n int) string { return "return " + rep("a?b:", n) + "c" }},
	{"nested ternaries", func(n int) string { return "return " + rep("a?", n) + "b" + rep(":c", n) }},
	{"assignments", func(n int) string { return rep("a=", n) + "1" }},
	{"shift assignments", func(n int) string { return rep("a>>=", n) + "1" }},
	{"unsigned shift assignments", func(n int) string { return rep("a>>>=", n) + "1" }},
	{"compound assignments", func(n int) string { return rep("a**=a||=a??=a&&=a|=", n) + "1" }},
	{"exponents", func(n int) string { return "return " + rep("a**", n) + "a" }},
	{"commas", func(n int) string { return "return " + rep("a,", n) + "a" }},
	{"ifs", func(n int) string { return rep("if(a)", n) + ";" }},
	{"ifs on lines", func(n int) string { return rep("if (a)\n", n) + ";" }},
	{"else ifs", func(n int) string { return "if(a){}" + rep("else if(a){}", n) }},
	{"else ifs without braces", func(n int) string { return "if(a)x;" + rep("else if(a)x;", n) }},
	{"labels", func(n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "l%d:", i)
		}
		return b.String() + ";"
	}},
	{"labels named as keywords", func(n int) string { return "interface" + rep(": T", n) }},
	{"labels named let", func(n int) string { return rep("let:", n) + ";" }},
	{"labels with type arguments", func(n int) string { return rep("a<b>:", n) + ";" }},
	{"labels after one with type arguments", func(n int) string { return "a<b>" + rep(": T", n) + ";" }},
	{"labels after yield and line breaks", func(n int) string { return "yield " + rep("\u2028", 100) + rep("l:", n) + ";" }},
	{"labels after return", func(n int) string { return "return\n" + rep("l:", n) + ";" }},
	{"ifs in a block after return", func(n int) string { return "return\n{" + rep("if(a)", n) + ";}" }},
	{"awaits across lines", func(n int) string { return "return " + rep("await\n", n) + "a" }},
	{"whiles", func(n int) string { return rep("while(a)", n) + ";" }},
	{"fors", func(n int) string { return rep("for(;;)", n) + ";" }},
	{"dos", func(n int) string { return rep("do ", n) + ";" + rep("while(a)", n) }},
	{"functions", func(n int) string { return rep("(function(){", n) + rep("})", n) }},
	{"arrow blocks", func(n int) string { return rep("()=>{", n) + rep("}", n) }},
	{"classes", func(n int) string { return rep("(class{m(){", n) + rep("}})", n) }},
	{"class heritage", func(n int) string { return "return " + rep("class extends ", n) + "A" + rep("{}", n) }},
	{"yields", func(n int) string { return "return function*(){" + rep("yield ", n) + "a}" }},
	{"type arguments", func(n int) string { return "let x: A" + rep("<A", n) + rep(">", n) }},
	{"type assertions", func(n int) string { return "return " + rep("<A>", n) + "a" }},
	{"type assertions after type arguments", func(n int) string { return "return a" + rep("<T>", n) }},
	{"non-null assertions", func(n int) string { return "return a" + rep("!", n) }},
	{"tuple types", func(n int) string { return "let x: " + rep("[", n) + rep("]", n) }},
	{"function types", func(n int) string { return "let x: " + rep("()=>", n) + "A" }},
	{"keyof", func(n int) string { return "let x: " + rep("keyof ", n) + "A" }},
	{"conditional types", func(n int) string { return "let x: " + rep("A extends B ? C : ", n) + "A" }},
	{"comparisons", func(n int) string { return "return " + rep("a<", n) + "a" }},
	{"shifts", func(n int) string { return "return " + rep("a<<", n) + "a" }},
	{"type parameter defaults", func(n int) string { return "let f = " + rep("<A = ", n) + "B" }},
	{"negative literal types", func(n int) string { return "let x: " + rep("A<-1, ", n) + "B" }},
	{"default parameters", func(n int) string { return "return " + rep("(a=", n) + "1" + rep(")=>a", n) }},
	{"destructuring", func(n int) string { return "let " + rep("{a:", n) + "b" + rep("}", n) + "=c" }},
	{"method parameters", func(n int) string { return rep("({m(a=", n) + "1" + rep("){}})", n) }},
	{"lets", func(n int) string { return "let a" + rep("=(let,", n) + "1" + rep(")", n) }},
	{"newline parentheses", func(n int) string { return "return " + rep("(\n", n) + "1" + rep(")", n) }},
}

// TestHostileShapesRefused: every shape, half a million levels deep, is
// refused as code_depth.
func TestHostileShapesRefused(t *testing.T) {
	for _, h := range hostile {
		t.Run(h.name, func(t *testing.T) {
			code := h.code(levels)
			e := Check(code, Limits{})
			if e == nil || e.Code != fault.LimitExceeded || e.Limit != fault.LimitCodeDepth {
				t.Fatalf("Check = %v, want LIMIT_EXCEEDED code_depth", e)
			}
			if !strings.Contains(e.Message, "line ") || !strings.Contains(e.Message, "column ") {
				t.Errorf("message %q does not say where", e.Message)
			}
			// No shape gets deeper than the depth bound by levels that
			// count for less (the first level of a few shapes is not one).
			lo, hi := 1, DefaultMaxDepth+3
			for lo < hi {
				mid := (lo + hi) / 2
				if Check(h.code(mid), Limits{}) != nil {
					hi = mid
				} else {
					lo = mid + 1
				}
			}
			if lo-1 > DefaultMaxDepth+1 {
				t.Fatalf("%d levels admitted", lo-1)
			}
		})
	}
}

// TestHostileShapesStatementsAfter: a statement after each level does not
// reset the count where the parser still recurses.
func TestHostileNestingAcrossStatements(t *testing.T) {
	for _, c := range []struct{ name, open, close string }{
		{"functions with statements", "(function(){x;", "})"},
		{"blocks with statements", "{x;", "}"},
		{"arrow blocks after newline", "f(()=>{\nx\n", "})"},
		{"objects with members", "x={a:1,b:", "}"},
		{"if bodies with statements", "if(a){x;", "}"},
		{"substitutions with commas", "`${a,", "}`"},
		{"type literals", "let x: {a: T;b:", "}"},
		{"declaration initializers", "var a=1,b=(", ")"},
		{"case blocks", "switch(x){case 1:", "}"},
		{"labels in blocks", "{l:", "}"},
		{"var after if", "if(a)var x:{}=(", ")"},
		{"else blocks", "if(a){}else{", "}"},
		{"do bodies", "do{", "}while(a)"},
		{"class bodies", "class A{m(){", "}}"},
		{"methods after a function", "function f(){}\n(function(){", "})"},
		{"new function bodies", "new function(){", "}"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code := rep(c.open, levels/10) + rep(c.close, levels/10)
			if e := Check(code, Limits{}); e == nil || e.Limit != fault.LimitCodeDepth {
				t.Fatalf("Check = %v, want code_depth", e)
			}
		})
	}
}

// TestCommaSequences: comma operators count (esbuild simplifies a
// sequence recursively, in quadratic time) wherever a block may hold one,
// and commas that separate items do not.
func TestCommaSequences(t *testing.T) {
	seq := rep("a,", 1000) + "a"
	for _, code := range []string{
		seq,
		"{" + seq + "}",
		"x={enum:1}\n{" + seq + "}",
		"interface = 1\n{" + seq + "}",
		"for (let x in " + seq + ");",
		"(" + seq + ")",
		"`${" + seq + "}`",
		"let = 1; let, " + seq,
	} {
		if e := Check(code, Limits{}); e == nil || e.Limit != fault.LimitCodeDepth {
			t.Errorf("Check(%.40q…) = %v, want code_depth", code, e)
		}
	}
	for _, code := range []string{
		"f(" + seq + ")",
		"[" + seq + "]",
		"({" + seq + "})",
		"var " + seq,
		"var x = 1, " + seq,
		"enum E {" + names(1000) + "}",
		"function f(" + seq + ") {}",
	} {
		if e := Check(code, Limits{}); e != nil {
			t.Errorf("Check(%.40q…) = %v, want nil", code, e)
		}
	}
}

// TestRepeatedDeclarations: a name a let, const or class declares again in
// its scope is a syntax error, which esbuild reports in quadratic time
// when there are many: past a few, Scan reports the first (for the code to
// be kept from esbuild), while Check, which judges cost only, passes it.
// Names declared again are counted; past 8, the code is kept from esbuild.
// Declarations that may repeat do not count.
func TestRepeatedDeclarations(t *testing.T) {
	for _, c := range []struct{ code, name string }{
		{rep("let a;\n", 20), "a"},
		{"let " + rep("a, ", 20) + "a", "a"},
		{rep("const a = 1;", 20), "a"},
		{"const [" + rep("a, ", 20) + "a] = x", "a"},
		{"let {" + rep("b: a, ", 20) + "} = x", "a"},
		{"let {" + rep("a, ", 20) + "} = x", "a"},
		{"let [{a}, [a], ...a] = x;" + rep("let a;", 10), "a"},
		{rep("class A {}\n", 20), "A"},
		{"switch (x) {" + rep("case 1: let a = 1;", 20) + "}", "a"},
		{"for (let " + rep("i = 0, ", 20) + "i = 0;;);", "i"},
		{"x = {" + rep("__proto__: 1, ", 20) + "}", "__proto__"},
		{"x = {" + rep("'__proto__': 1, ", 20) + "}", "__proto__"},
		{"enum E {" + rep("A,", 20) + "}", "A"},
		{rep("@a class A {}\n", 20), "A"},
		{"class A {" + rep("#a = 1;", 20) + "}", "#a"},
		{"class A {" + rep("static #a = 1;", 20) + "}", "#a"},
		{"class A {" + rep("get #a() {}", 20) + "}", "get #a"},
		{"class A {" + rep("@d #a;", 20) + "}", "#a"},
		{"class A {" + rep("#a() {}\n", 20) + "}", "#a"},
		{"class A {" + rep("async *#a() {}", 20) + "}", "#a"},
		{rep("let [a] = x;\n", 20), "a"},
		// A var or function of a let's name (esbuild notes each back to
		// the let: 36 KB of `var a;` took it 2.7 s).
		{"let a;" + rep("var a;", 20), "a"},
		{"let a;" + rep("{ var a }", 20), "a"},
		{"let a;" + rep("var [a] = x; var {b: a} = x;", 10), "a"},
		{"{ let a; " + rep("{ for (var a of x); }", 20) + "}", "a"},
		{"let a;" + rep("function a() {}", 20), "a"},
		{"class a {}" + rep("function* a() {}", 20), "a"},
		{"let a;" + rep("async function a() {}", 20), "a"},
		{rep("var a;", 20) + "let a;" + rep("let a;", 10), "a"},
		// esbuild declares await and yield as names, each an error.
		{"let " + rep("await, ", 20) + "a", "await"},
		{"let " + rep("yield, ", 20) + "a", "yield"},
		{rep("for (let [a] of x);\n", 1) + rep("let a;", 20), "a"},
	} {
		r, e := Scan(c.code, Limits{})
		if k := r.KeepFromEsbuild(); e != nil || k == nil || k.Code != fault.ScriptError ||
			!strings.Contains(k.Message, fmt.Sprintf("%q has already been declared", c.name)) {
			t.Errorf("Scan(%.50q…) = %v, %v; want a SyntaxError for %q", c.code, k, e, c.name)
		}
		if e := Check(c.code, Limits{}); e != nil {
			t.Errorf("Check(%.50q…) = %v, want nil: it judges cost, not syntax", c.code, e)
		}
	}
	r, _ := Scan("let x = 1;\n  let a;"+rep(" let a;", 20), Limits{})
	if d, _ := r.Repeated.Details.(map[string]int); d["line"] != 2 || d["column"] != 14 || r.Repeats != 20 {
		t.Errorf("%d repeats, the first at %v; want 20, the first at line 2 column 14", r.Repeats, r.Repeated.Details)
	}
	if _, e := Scan(rep("let a;\n", 20)+rep("(", 300), Limits{}); e == nil || e.Limit != fault.LimitCodeDepth {
		t.Errorf("Scan of repeats, then nesting past the bound = %v, want code_depth", e)
	}
	for _, code := range []string{
		rep("var a;\n", 1000),
		rep("for (let i = 0; i < 1; i++) {}\n", 1000),
		rep("{ let a = 1 }\n", 1000),
		rep("function f() {}\n", 1000),
		rep("function f(x: string): void;\n", 100) + "function f(x) {}",
		rep("const {a: b} = x; const {c: d} = x;", 1), // keys are not declarations
		"const {" + rep("a: {", 20) + "b" + rep("}", 20) + "} = x",
		"const [x = a + a + a + a + a + a + a + a + a + a] = y",
		rep("x = {a: 1, a: 2};\n", 100),
		rep("(a, a) => 1;\n", 100),
		"let a = class A {}; let b = class A {}" + rep("; x = class A {}", 20),
		rep("x = class extends B {}\n", 20),
		"x = {" + rep("__proto__, ", 20) + "}", // shorthand is not the prototype
		"class A {" + rep("get #a() {} set #a(v) {}", 1) + rep("m() { return this.#a + this.#a }", 20) + "}",
		rep("x = class { #a = 1; m() { return #a in this } }\n", 20),
		rep("{ const a = 1 }", 20),
		// Keywords are names where a property's name goes: in object
		// literals (test262's language/reserved-words/ident-name-keyword-accessor.js
		// was refused as "get" declared again), class bodies, patterns'
		// keys and TypeScript's member lists.
		"var o = {" + keywordAccessors + "}",
		"x = {const: 1, " + rep("a: 1, ", 20) + "}",
		"x = {let: 1, " + rep("a: 1, ", 20) + "}",
		"x = {get const() {}, " + rep("a: 1, ", 20) + "}",
		"x = {set let(v) {}, " + rep("get: 1, set: 1, ", 20) + "}",
		"x = {async *const() {}, *let() {}, " + rep("a: 1, ", 20) + "}",
		"class A {" + rep("const\n a() {}\n", 20) + "}",
		"class A {" + rep("class\n a() {}\n", 20) + "}",
		"class A {" + rep("let\n a() {}\n", 20) + "}",
		"class A {" + rep("static const() {} a() {}", 20) + "}",
		"class A { const() {} " + rep("a() {} ", 20) + "}",
		"class A { #a; " + rep("static b = #a in o; ", 20) + "}",
		"class A { #a; " + rep("c = d && #a in o\n", 20) + "}",
		numbered("const {[a]: b#} = x;\n", 20),
		numbered("let {[a]: {[a]: b#}} = x;\n", 20),
		"const {" + numbered("'__proto__': a#, ", 20) + "} = x",
		rep("const enum E {}\n", 20), // enums merge; "enum" is no name
		// Vars and functions may repeat; a var stays in its function.
		rep("var a; function a() {} var [a] = x; var {a} = x;\n", 20),
		"let a;" + rep("function f() { var a }", 20),
		"let a;" + rep("x = function () { var a }", 20),
		"let a;" + rep("x = () => { var a }", 20),
		"let a;" + rep("x = { m() { var a } }", 20),
		"let a;" + rep("x = class { m() { var a } };", 20),
		"let a;" + rep("x = function* () { var a };", 20),
		"let a;" + rep("x = async function f() { var a };", 20),
		"var a;" + rep("{ let a }", 20),
		rep("function f() { let a } function f() { var a }\n", 20),
		"let a;" + rep("x = function a() {};", 20),
		"let a;" + rep("{ function a() {} }", 20),
		"var let = [0];" + rep("x = let[a];\n", 20),
		"var let = [0];" + rep("f(let[a]);\n", 20),
		"interface I { const: number, " + rep("a: string, ", 20) + "}",
		"interface I { const: number; " + rep("a: string; ", 20) + "}",
		"type T = { const: number, " + rep("a: string, ", 20) + "}",
	} {
		if r, e := Scan(code, Limits{}); e != nil || r.Repeats != 0 {
			t.Errorf("Scan(%.60q…) = %v, %v; want nothing declared again", code, r.Repeated, e)
		}
	}
}

// numbered repeats s n times, with # in the i-th copy replaced by i.
func numbered(s string, n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(strings.ReplaceAll(s, "#", fmt.Sprint(i)))
	}
	return b.String()
}

// TestRepeatedParameters: a parameter list repeating a name thousands of
// times, far apart, is kept from esbuild (which measures each back to the
// first: quadratic) as LIMIT_EXCEEDED code_size; calls repeating names the
// way real code does are not.
func TestRepeatedParameters(t *testing.T) {
	for _, code := range []string{
		"function f(" + rep("a, ", 4000) + "a) {}",
		"x = {m(" + rep("a, ", 4000) + "a) {}}",
		"class A { m(" + rep("a, ", 4000) + "a): (x: T) => U {} }",
	} {
		r, e := Scan(code, Limits{})
		k := r.KeepFromEsbuild()
		if e != nil || k == nil || k.Code != fault.LimitExceeded || k.Limit != fault.LimitCodeSize || r.Repeats != 0 {
			t.Errorf("Scan(%.40q…) = %v, %v (%d repeats); want code_size, and no declaration repeated", code, k, e, r.Repeats)
		}
	}
	for _, code := range []string{
		rep("f(a, a, b, a);\n", 5000),
		"f(" + rep("a, ", 500) + "a)",
		rep("function f(a, b) {}\n", 2000),
		"x = [" + rep("{id: 1, name: 'x'}, ", 3000) + "]",
	} {
		if r, e := Scan(code, Limits{MaxBytes: 1 << 20}); e != nil || r.KeepFromEsbuild() != nil {
			t.Errorf("Scan(%.40q…) = %v, %v; want nothing", code, r.KeepFromEsbuild(), e)
		}
	}
}

// keywordAccessors is the object test262's
// language/reserved-words/ident-name-keyword-accessor.js builds: a getter
// and a setter named by every keyword and reserved word.
var keywordAccessors = func() string {
	var b strings.Builder
	for _, k := range strings.Fields("await break case catch class const continue debugger default delete do else enum export " +
		"extends false finally for function if import in instanceof new null return super switch this throw true try typeof " +
		"var void while with yield let static implements interface package private protected public") {
		fmt.Fprintf(&b, "set %s(v) { test = %q }, get %s() { return %q },\n", k, k, k, k)
	}
	return b.String()
}()

// TestCommentsOnLongLines: esbuild scans back to a line's start for every
// block comment before an expression, so many on one long line cost it
// quadratic time; on lines of their own they cost nothing.
func TestCommentsOnLongLines(t *testing.T) {
	e := Check("return "+rep("/*c*/a+", 30_000)+"a", Limits{})
	if e == nil || e.Code != fault.LimitExceeded || e.Limit != fault.LimitCodeSize || !strings.Contains(e.Message, "block comments") {
		t.Fatalf("Check = %v, want code_size", e)
	}
	for _, code := range []string{
		"return " + rep("/*c*/a+\n", 30_000) + "a",
		"return " + rep("a+", 30_000) + rep("/*c*/", 100) + "a", // a few on a long line
		"x = `" + rep("a\n", 50_000) + "`" + rep("/*c*/a+", 1000) + "a",
	} {
		if e := Check(code, Limits{MaxBytes: 1 << 20}); e != nil {
			t.Errorf("Check(%.50q…) = %v, want nil", code, e)
		}
	}
}

// TestStringFolds: esbuild folds 'a' + 'b' into 'ab' whatever its
// options, each fold a new copy, so a long run of literals joined by +
// costs it quadratic time and memory; runs broken by other operands do
// not.
func TestStringFolds(t *testing.T) {
	for _, code := range []string{
		"return " + rep("'a'+", 60_000) + "'a'",
		"return " + rep("`a${1}`+", 20_000) + "1",
		"return " + rep("('a')+", 40_000) + "'a'",
		"return x+" + rep("'a'+", 60_000) + "'a'",
		"return " + rep("'a'+\n", 60_000) + "'a'",
	} {
		if e := Check(code, Limits{MaxBytes: 1 << 20}); e == nil || e.Code != fault.LimitExceeded || e.Limit != fault.LimitCodeSize ||
			!strings.Contains(e.Message, "string literal text") {
			t.Errorf("Check(%.40q…) = %v, want code_size", code, e)
		}
	}
	for _, code := range []string{
		"return " + rep("'a line of text of about fifty characters long...'+\n", 1500) + "''",
		"return " + rep("'a'+x+", 60_000) + "'a'",
		"return `" + rep("a", 200_000) + "`" + rep("+a", 1000),
		rep("x = 'a' + 'b' + 'c';\n", 20_000),
		"f(" + rep("'a' + 'b', ", 10_000) + ")",
	} {
		if e := Check(code, Limits{MaxBytes: 1 << 20}); e != nil {
			t.Errorf("Check(%.50q…) = %v, want nil", code, e)
		}
	}
}

// TestAmbiguousSlashes: nesting behind a `/` that reads as a regular
// expression or a division (or behind an HTML-like comment) is counted in
// whichever reading holds it.
func TestAmbiguousSlashes(t *testing.T) {
	deep := rep("(", 400) + "1" + rep(")", 400)
	for _, code := range []string{
		"x = a\n/ " + deep + " / 2",    // division across a line
		"let a\n/'/.test(s); " + deep,  // a regexp after ASI, a quote in it
		"let a\n/`/.test(s);\n" + deep, // a backtick in it
		"if(a){}/'/.test(s); " + deep,  // after a block
		"x={}/" + deep,                 // after an object
		"async function f(){await /'/; " + deep + "}",
		"function f(){await / " + deep + " / 2}", // await as an identifier
		"x = a++ / " + deep,
		"x = a! / " + deep,
		"x = a\n!/'/.test(s); " + deep,
		"x = a<b> / " + deep,
		"for (x of /'/) " + deep,
		"x <!-- '\n" + deep,
		"x\n--> '\n" + deep,
		"x = y /* a comment */ / " + deep,
		"x = y // a comment\n / " + deep,
		"x = a\n/[/']/.test(s); " + deep,
		"x = (a) / " + deep,
		"x = a[0] / " + deep,
		"x = 1 / " + deep,
		"x = 'a' / " + deep,
	} {
		if e := Check(code, Limits{}); e == nil || e.Limit != fault.LimitCodeDepth {
			t.Errorf("Check(%.40q…) = %v, want code_depth", code, e)
		}
	}
}

// TestAmbiguityIsBounded: readings forked at every token of a long line,
// each reading the rest of it as a comment or a string, are refused before
// the scan turns quadratic (found by FuzzPrepareNesting: 98 KB took 1.7 s).
func TestAmbiguityIsBounded(t *testing.T) {
	code := "interface " + rep("/'//'/await ", 80_000)
	e := Check(code, Limits{MaxBytes: 1 << 20})
	if e == nil || e.Limit != fault.LimitCodeDepth || !strings.Contains(e.Message, "ambiguous") {
		t.Fatalf("Check = %v, want code_depth (ambiguous)", e)
	}
}

// TestNormalCodeAdmitted: brackets in strings, comments, regular
// expressions and templates do not count; long flat code is fine; what
// real code does is far inside the bounds.
func TestNormalCodeAdmitted(t *testing.T) {
	for _, code := range []string{
		`const s = "((((((((" + '[[[[[[' + "{{{{{{{{"; return s`,
		"// ((((((((((((\n/* [[[[[[[[[[[[ */ return 1",
		`return /((((((((((((\[\]\/[(\/]/.test(s)`,
		"return `((((((((${'))))'}[[[[[[`",
		"if (x) /'/.test(s); return `'`",
		"x = a / b / c; y = 'it''s'; return (a) / (b) / 2",
		"const re = /[/'\"`]/g; return s.replace(re, '')",
		"return a < b && c < d || e > f",
		"for (let i = 0; i < n; i++) for (let j = 0; j < i; j++) s += i << j",
		"const m: Map<string, Array<Promise<Record<string, number>>>> = new Map()",
		"function f<T extends object = {}>(x: T): Promise<T> { return Promise.resolve(x) }",
		"const v = <const T,>(x: T) => x; return (x as unknown as string).length",
		"const x = a?.b?.[c]?.(d) ?? e; return x!",
		"label: for (;;) { break label }",
		"switch (x) { case 1: case 2: { y(); break } default: z() }",
		"do x++; while (x < 10)\nreturn x",
		"try { a() } catch (e) { b() } finally { c() }",
		"return typeof a === 'string' ? a : void 0",
		"x = a\n++b\nreturn -->\n1",
		"return 1..toString() + 1.5.toFixed(1) + 0x1F + 1e+5 + 1_000n",
		"class A { #p = 1; static s = 2; get g() { return this.#p } set g(v) {} async *m() { yield* [] } }",
		"enum E { A, B, C }\ninterface I { a: string, b: number }\nreturn E.A",
		"@dec class X {}",
		"\u2028return 1\u2029",
		"const é = 'é'; return é",
		rep("if (a) { x() } else ", 200) + "{}", // long else-if chains are not nesting
		rep("while (a) { x() }\n", 500),
		rep("x = () => {}\n", 1000),
		rep("function f() {}\n", 1000),
		rep("a.b(c).d = e\n", 1000),
		"enum E {" + names(2000) + "}",
		"return [" + rep("a < b, ", 20) + "]", // esbuild retries each as type arguments: 4000 cost it 0.85 s
		"return a" + rep(" + a", 100_000),     // binary chains are parsed iteratively
		"return a" + rep(" as A", 100_000),
		"x = " + rep("a<a>", 10_000) + "a",
		"var {" + rep("a, ", 10_000) + "} = o",
		"f(" + rep("a, ", 10_000) + ")",
		"var " + rep("a = 1, ", 10_000) + "b",
	} {
		if e := Check(code, Limits{}); e != nil {
			t.Errorf("Check(%.60q…) = %v, want nil", code, e)
		}
	}
}

// TestDeepestAdmitted: nesting right at the bound is admitted, one more is
// refused, and the error says where.
func TestDeepestAdmitted(t *testing.T) {
	deep := func(n int) string { return "return " + rep("[", n) + rep("]", n) }
	if e := Check(deep(DefaultMaxDepth), Limits{}); e != nil {
		t.Fatalf("%d levels: %v", DefaultMaxDepth, e)
	}
	e := Check("\n  "+deep(DefaultMaxDepth+1), Limits{})
	if e == nil || e.Limit != fault.LimitCodeDepth {
		t.Fatalf("%d levels: %v, want code_depth", DefaultMaxDepth+1, e)
	}
	col := len("  return ") + DefaultMaxDepth + 1
	want := map[string]int{"line": 2, "column": col, "bound": DefaultMaxDepth}
	if fmt.Sprint(e.Details) != fmt.Sprint(want) {
		t.Errorf("details = %v, want %v", e.Details, want)
	}
	if !strings.Contains(e.Message, fmt.Sprintf("line 2, column %d", col)) {
		t.Errorf("message = %q", e.Message)
	}

	scopes := func(n int) string { return rep("{", n) + rep("}", n) }
	if e := Check(scopes(DefaultMaxScopes), Limits{}); e != nil {
		t.Fatalf("%d blocks: %v", DefaultMaxScopes, e)
	}
	if e := Check(scopes(DefaultMaxScopes+1), Limits{}); e == nil || e.Limit != fault.LimitCodeDepth ||
		!strings.Contains(e.Message, "blocks, functions or type arguments") {
		t.Fatalf("%d blocks: %v, want code_depth", DefaultMaxScopes+1, e)
	}
}

// TestSizeFirst: code over the size bound is refused as code_size however
// it nests, and the count of functions is a size bound too.
func TestSizeFirst(t *testing.T) {
	e := Check(rep("(", 2000), Limits{MaxBytes: 1000})
	if e == nil || e.Limit != fault.LimitCodeSize || e.Message != "code is 2000 bytes; the limit is 1000" {
		t.Fatalf("Check = %v, want code_size", e)
	}
	if e := Check(rep("a", 1000), Limits{MaxBytes: 1000}); e != nil {
		t.Fatalf("at the bound: %v", e)
	}
	e = Check(rep("x=a=>a;", DefaultMaxScopeCount+1), Limits{})
	if e == nil || e.Limit != fault.LimitCodeSize || !strings.Contains(e.Message, "blocks and functions") {
		t.Fatalf("Check = %v, want code_size", e)
	}
	if e := Check(rep("x=a=>a;", DefaultMaxScopeCount), Limits{}); e != nil {
		t.Fatalf("at the bound: %v", e)
	}
}

// TestPosition counts lines as the parsers do.
func TestPosition(t *testing.T) {
	for _, c := range []struct {
		code      string
		off       int
		line, col int
	}{
		{"abc", 2, 1, 3},
		{"a\nb", 2, 2, 1},
		{"a\r\nb", 3, 2, 1},
		{"a\rb", 2, 2, 1},
		{"a\u2028b", 4, 2, 1},
		{"éé(", 4, 1, 3},
	} {
		if l, col := position(c.code, c.off); l != c.line || col != c.col {
			t.Errorf("position(%q, %d) = %d:%d, want %d:%d", c.code, c.off, l, col, c.line, c.col)
		}
	}
}

// TestUnterminated: what no parser reads ends the count without a panic.
func TestUnterminated(t *testing.T) {
	for _, code := range []string{"'abc", "\"a\nb\"", "`abc", "`${", "/* abc", "/abc", "x = /a\n/", "a\\", "\\u{", ")))", "}}}", "${",
		// Readings forked at the very end (found by FuzzPrepareNesting).
		"x <!--", "x\n-->", "await /", "}\n/", "x = {'", "x = {a: 1, '", rep("switch(a)", 201) + rep("await /<!--]", 200) + "switch(a)"} {
		_ = Check(code, Limits{})
		_ = Check(code+rep("(", 300), Limits{})
	}
}

// TestHostileInputsBounded: what an attacker can make the scan read, a MiB
// of it, costs time and memory in proportion to its size: nesting a
// million deep, literals and comments that never end, a line that makes
// the scan fork at every token.
func TestHostileInputsBounded(t *testing.T) {
	const n = 1 << 20
	for _, c := range []struct{ name, code string }{
		{"parentheses", rep("(", n)},
		{"substitutions", rep("`${", n/3)},
		{"unterminated string", "x = '" + rep("a", n)},
		{"unterminated template", "x = `" + rep("a(", n/2)},
		{"unterminated regular expression", "x = /" + rep("(", n)},
		{"unterminated comment", "/*" + rep("(\n", n/3)},
		{"unterminated substitution", "`${" + rep("a+", n/2)},
		{"strings cut by line breaks", rep("'(\n", n/3)},
		{"escapes", rep("\\();", n/4)},
		{"HTML-like comments on one line", "x" + rep("<!--", n/4)},
		{"closing HTML-like comments", rep("\n-->(", n/5)},
		{"slashes on one line", "interface " + rep("/'/", n/3)},
		// A reading that forks at each line and dies in a comment that
		// never ends, or a string a line break cuts (each the lexer's
		// error, were it let read them).
		{"forks into comments that never end", rep("x={}\n/[/*]/.test(s)\n", n/20)},
		{"forks into strings cut by line breaks", rep("x={}\n/[/']/.test(s)\n", n/20)},
		{"names after numbers", rep("1in;", n/4)},
		{"refused characters", rep("\x00?=~=@#\u00ff;", n/16)},
		{"bytes that are not UTF-8", rep("\xc3()\xe2@();", n/10)},
	} {
		t.Run(c.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			_, _ = Scan(c.code, Limits{})
			elapsed := time.Since(start)
			runtime.ReadMemStats(&after)
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > uint64(4*len(c.code)+1<<20) {
				t.Errorf("allocated %d bytes for %d bytes of code", alloc, len(c.code))
			}
			// A MiB takes milliseconds; seconds would be the quadratic
			// time this guards against (the race detector is slow, and
			// runs with -short).
			if !testing.Short() && elapsed > 2*time.Second {
				t.Errorf("took %v for %d bytes of code", elapsed, len(c.code))
			}
		})
	}
}

// scanTokens are the pieces FuzzScan builds code from: what tdewolff's
// lexer refuses or reads otherwise than the scan (literals and comments a
// line break or the end cuts, names right after numbers, escapes,
// characters no name holds, bytes that are not UTF-8, `?=`), with the
// brackets, keywords and tokens that fork the scan.
var scanTokens = strings.Fields("( ) [ ] { } ${ ` ' \" / /= /'/ /[/]/ /* */ // <!-- --> ? ?= ?. ?? ~= ~ @ # #a \\ \\u0061 " +
	"\\u{61} \\u{ 1 1. .5 010 08 1e 1e+ 0x 0b2 1in 1_e 1.e5 a in of if else let const class function return await " +
	"yield new typeof => = == : , ; . ... + ++ - -- ! < << > >> >>> >= >>>= * ** & && | || ^ % x é € \u00b7")

// FuzzScan: whatever the code, the scan ends (without a panic), and the
// lexer never reports an error: each costs it a copy of the whole code,
// and hostile code could make one at every token.
func FuzzScan(f *testing.F) {
	f.Add("x = a\n/ (1) / 2", []byte{0, 1})
	f.Add("\xc3(\xe2@(\x00", []byte{30, 31, 32, 40})
	f.Add("", []byte{8, 9, 10, 11, 12, 13, 14})
	extra := []string{"\n", " ", "\r\n", "\u00a0", "\u2028", "\x00", "\x01", "\x7f", "\xff", "\xc3", "\xe2\x80", "\\\n", "'\\\r\n'"}
	f.Fuzz(func(t *testing.T, text string, sel []byte) {
		var b strings.Builder
		b.WriteString(text)
		for _, c := range sel {
			if int(c) < len(scanTokens) {
				b.WriteString(scanTokens[c])
			} else {
				b.WriteString(extra[int(c)%len(extra)])
			}
		}
		code := b.String()
		r := scan(code, Limits{MaxDepth: DefaultMaxDepth, MaxScopes: DefaultMaxScopes, MaxScopeCount: DefaultMaxScopeCount})
		if r.unguarded != 0 {
			t.Fatalf("the lexer reported %d errors on %q", r.unguarded, code)
		}
	})
}

// BenchmarkCheck measures the scan of a MiB of real-looking code and of
// the worst-case slash ambiguity.
func BenchmarkCheck(b *testing.B) {
	unit := `// a comment with (brackets) and 'quotes'
function f(a, b) {
  const s = "a string with [brackets]" + a.b.c(d)[e] / 2;
  if (a < b && /re[gex]+/.test(s)) { return x => ({ y: ` + "`${x}`" + ` }) } else { return null }
}
`
	code := rep(unit, (1<<20)/len(unit))
	lim := Limits{MaxScopeCount: 1 << 30}
	b.Run("MiB of code", func(b *testing.B) {
		b.SetBytes(int64(len(code)))
		for b.Loop() {
			if e := Check(code, lim); e != nil {
				b.Fatal(e)
			}
		}
	})
	// Every line forks the scan in two readings that meet again.
	amb := rep("x = {}\n/a/g\n", (1<<20)/12)
	b.Run("MiB of ambiguous slashes", func(b *testing.B) {
		b.SetBytes(int64(len(amb)))
		for b.Loop() {
			if e := Check(amb, lim); e != nil {
				b.Fatal(e)
			}
		}
	})
}
