package script

import (
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/fault"
)

// FuzzPrepare: whatever a caller sends, Prepare answers (never panics),
// its errors are ScriptErrors (or the pre-scan's bounds), and every
// position it maps stays inside the source as written.
func FuzzPrepare(f *testing.F) {
	for _, s := range []string{
		"const n: number = 41; return n + 1",
		"enum E { A }\nreturn E.A",
		"return (",
		"if (x) {\n  return 1",
		"}); x(); (function(){",
		"const é: string = 'é';\r\nreturn await mcp.a.b<string>({} as any)",
		"var t=[]; for (var k = 2 in {x:1}) t.push(k); return t",
		"\u2028return 1",
	} {
		f.Add(s, true)
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, code string, ts bool) {
		lang := LangAuto
		if ts {
			lang = LangTS
		}
		p, err := Prepare(code, lang)
		if err != nil {
			if fe := fault.As(err); fe.Code != fault.ScriptError &&
				(fe.Code != fault.LimitExceeded || fe.Limit != fault.LimitCodeDepth && fe.Limit != fault.LimitCodeSize) {
				t.Fatalf("err = %v, want a SCRIPT_ERROR or a code_depth or code_size LIMIT_EXCEEDED", err)
			}
			return
		}
		lines := len(splitLines(code))
		for _, r := range p.Refs.Tools {
			if r.Line < 0 || r.Line > lines || r.Column < 0 {
				t.Fatalf("ref %+v outside the code's %d lines", r, lines)
			}
		}
		for l := 1; l <= len(splitLines(p.Code)); l++ {
			if ml, mc := p.Position(l, 1); ml < 1 || ml > lines || mc < 1 {
				t.Fatalf("Position(%d, 1) = %d:%d, outside the code's %d lines", l, ml, mc, lines)
			}
		}
	})
}

// nestingTokens are the pieces FuzzPrepareNesting builds code from: the
// brackets, operators, keywords and lexical traps (regular expressions,
// quotes, comments, template text, HTML-like comments) the pre-scan has to
// read as the parsers do.
var nestingTokens = []string{
	"(", ")", "[", "]", "{", "}", "`", "${", "a", ".", "?.", "=>", "=", "?", ":", ",", ";", "!", "-", "+",
	"++", "<", ">", "<<", ">>", "/", "/'/", "'", "\"", "\n", " ", "if(a)", "else ", "while(a)", "for(;;)",
	"do ", "l:", "new ", "await ", "typeof ", "yield ", "class ", "extends ", "function", "return ", "let ",
	"var ", "case 1:", "switch(a)", "try", "catch(e)", ": T", " as T", "<T>", "...", "**", "&&", "|", "//c\n",
	"/*c*/", "<!--", "-->", " in ", " of ", "async ", "enum ", "interface ", "#p", "1", "1.", "@d ", "\u2028",
	"\\u0061", "=>{", "})", "*", "x", "0x1", "a<b>", "}\n/", "a\n/", "/[/]/", "<A,", "-1", "static ", "get ",
}

// tokens turns fuzz bytes into code, one token a byte.
func tokens(sel []byte) string {
	var b strings.Builder
	for _, c := range sel {
		b.WriteString(nestingTokens[int(c)%len(nestingTokens)])
	}
	return b.String()
}

// enc is the inverse of tokens, for seeds.
func enc(toks ...string) []byte {
	sel := make([]byte, len(toks))
	for i, tok := range toks {
		j := slices.Index(nestingTokens, tok)
		if j < 0 {
			panic("no token " + tok)
		}
		sel[i] = byte(j)
	}
	return sel
}

// FuzzPrepareNesting: a nesting the pre-scan admits never crashes a parser.
// The input is a structure, not text: a prefix, a unit repeated n times, a
// closer repeated n times and a suffix, each a sequence of tokens. A unit
// the pre-scan counts for less than a parser recurses on grows, repeated,
// into a nesting thousands of levels deeper than the bound, which
// overflows the stack limit lowered here (so an under-count crashes in a
// few thousand levels rather than a few hundred thousand). Refusals must
// be the pre-scan's own.
func FuzzPrepareNesting(f *testing.F) {
	old := debug.SetMaxStack(8 << 20)
	defer debug.SetMaxStack(old)
	seeds := []struct{ prefix, unit, closer, suffix []byte }{
		{enc("return "), enc("("), enc(")"), enc("1")},
		{enc("return "), enc("["), enc("]"), nil},
		{nil, enc("{"), enc("}"), nil},
		{enc("return ", "a"), enc(".", "a"), nil, nil},
		{enc("return "), enc("!"), nil, enc("a")},
		{enc("return "), enc("a", "=>"), nil, enc("a")},
		{enc("return "), enc("a", "?", "a", ":"), nil, enc("a")},
		{nil, enc("if(a)"), nil, enc(";")},
		{enc("if(a)", "{", "}"), enc("else ", "if(a)", "{", "}"), nil, nil},
		{enc("return "), enc("`", "${"), enc("}", "`"), enc("1")},
		{enc("return "), enc("<T>"), nil, enc("a")},
		{enc("let ", "a", ": T"), enc("<A,"), enc(">"), nil},
		{enc("a\n/", "/'/"), enc("("), enc(")"), nil},
		{nil, enc("}\n/", "/'/", "("), enc(")"), nil},
		{nil, enc("function", "(", ")", "{", "x", ";"), enc("}"), nil},
		{nil, enc("(", "=>{", "\n"), enc("})"), nil},
		{enc("return "), enc("a", ","), nil, enc("a")},
		{enc("return "), enc("new "), nil, enc("a")},
		{nil, enc("l:"), nil, enc(";")},
		// Names where keywords are names: class members, object keys.
		{nil, enc("class ", "{", "static ", "get ", "(", ")", "{", "return "), enc("}", "}"), nil},
		{enc("return "), enc("{", "get ", "new ", "(", ")", "{", "return "), enc("}", "}"), nil},
		{nil, enc("class ", "{", "a", "=", "(", ")", "=>", "{"), enc("}", "}"), nil},
		{nil, enc("class ", "{", "a", "(", ")", "{", "}", "typeof ", "=", "("), enc(")", "}"), nil},
		{enc("return "), enc("{", "let ", ":", "("), enc(")", "}"), nil},
	}
	for _, s := range seeds {
		f.Add(s.prefix, s.unit, s.closer, s.suffix, uint16(6000), false)
		f.Add(s.prefix, s.unit, s.closer, s.suffix, uint16(200), true)
	}
	f.Fuzz(func(t *testing.T, prefix, unit, closer, suffix []byte, n uint16, ts bool) {
		u, c := tokens(unit), tokens(closer)
		reps := int(n) % 8192
		if per := len(u) + len(c); per > 0 {
			reps = min(reps, (1<<20)/per)
		}
		code := tokens(prefix) + strings.Repeat(u, reps) + strings.Repeat(c, reps) + tokens(suffix)
		lang := LangAuto
		if ts {
			lang = LangTS
		}
		_, err := PrepareWithLimits(code, lang, Limits{CodeBytes: 2 << 20})
		if fe := fault.As(err); fe != nil && fe.Code != fault.ScriptError &&
			(fe.Code != fault.LimitExceeded || fe.Limit != fault.LimitCodeDepth && fe.Limit != fault.LimitCodeSize) {
			t.Fatalf("err = %v", err)
		}
	})
}

// TestCastLabelChains: a word esbuild reads as a label through TypeScript
// casts (`a as T:`, `a satisfies T:`, `a!:`) counts as a label does, so a
// chain of them is refused before esbuild recurses once per label (20,000
// of them took ~190 MB of stack before), and one of them still reads.
func TestCastLabelChains(t *testing.T) {
	for _, unit := range []string{"l:get  as T1.", "a!:", "a as T as U:", "a satisfies T:"} {
		code := strings.Repeat(unit, 10000) + "x"
		_, err := PrepareWithLimits(code, LangAuto, Limits{CodeBytes: 2 << 20})
		if fe := fault.As(err); fe == nil || fe.Code != fault.LimitExceeded || fe.Limit != fault.LimitCodeDepth {
			t.Errorf("%q × 10,000: %v, want LIMIT_EXCEEDED (code depth)", unit, err)
		}
	}
	for _, code := range []string{"a as T: b", "a!: 1", "a satisfies T: b", "a as T ? b : c", "let x = a as T; x ? 1 : 2"} {
		if _, err := PrepareWithLimits(code, LangAuto, Limits{}); err != nil {
			t.Errorf("%q: %v", code, err)
		}
	}
}
