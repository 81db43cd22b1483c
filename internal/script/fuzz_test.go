package script

import (
	"testing"

	"github.com/pml-sandbox/pml/internal/fault"
)

// FuzzPrepare: whatever a caller sends, Prepare answers (never panics),
// its errors are ScriptErrors, and every position it maps stays inside the
// source as written.
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
			if c := fault.CodeOf(err); c != fault.ScriptError {
				t.Fatalf("err = %v, want a SCRIPT_ERROR", err)
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
