package script

import (
	"reflect"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/js/analysis"
)

func TestPersist(t *testing.T) {
	tests := []struct {
		name, code, lang string
		keep             []string // names kept; nil: Code unchanged
		added            string   // the statement Persist adds
		before           string   // what Code starts with before it
	}{
		{name: "declarations", code: "const a = 1; let b; function f() {}; class K {}",
			keep:  []string{"a", "b", "f", "K"},
			added: `;__pml_scope({"a":[()=>a],"b":[()=>b,(v)=>b=v],"f":[()=>f,(v)=>f=v],"K":[()=>K,(v)=>K=v]});`},
		{name: "after the directive prologue", code: "'use strict'; const s = 1",
			keep: []string{"s"}, added: `;__pml_scope({"s":[()=>s]});`, before: "'use strict'"},
		{name: "args and reserved names are never kept", code: "const args = 1; var eval2 = 2, arguments = 3",
			keep: []string{"eval2"}, added: `;__pml_scope({"eval2":[()=>eval2,(v)=>eval2=v]});`},
		{name: "TypeScript", code: "const n: number = 1;\ninterface I {}\nlet m: I", lang: LangTS,
			keep: []string{"n", "m"}, added: `;__pml_scope({"n":[()=>n],"m":[()=>m,(v)=>m=v]});`},
		{name: "nothing declared", code: "return 1"},
		{name: "only args declared", code: "const args = 1; return args"},
		{name: "the registrar's own name declared", code: "const __pml_scope = 1; let other"},
		{name: "code the parser cannot read", code: "var t = []; for (var k = 2 in {x: 1}) t.push(k); return t", lang: LangJS},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPrepare(t, tc.code, tc.lang)
			was := p.Code
			kept := p.Persist()
			var names []string
			for _, b := range kept {
				names = append(names, b.Name)
			}
			if !reflect.DeepEqual(names, tc.keep) {
				t.Fatalf("kept %v, want %v", names, tc.keep)
			}
			if tc.keep == nil {
				if p.Code != was {
					t.Fatalf("Code changed to %q", p.Code)
				}
				return
			}
			if !strings.HasPrefix(p.Code, tc.before+tc.added) {
				t.Fatalf("Code = %q\nwant it to start %q", p.Code, tc.before+tc.added)
			}
			if p.written() != was {
				t.Fatalf("written() = %q, want %q", p.written(), was)
			}
			if again := p.Persist(); again != nil {
				t.Fatalf("a second Persist added %v", again)
			}
			if _, err := analysis.Parse(p.Code); err != nil {
				t.Fatalf("the code with its statement does not parse: %v", err)
			}
		})
	}
}

// TestPersistKeepsPositions: positions in the code with the added
// statement map back to the code as written, in JavaScript and through
// TypeScript's source map, on the statement's line and after it.
func TestPersistKeepsPositions(t *testing.T) {
	tests := []struct{ code, lang string }{
		{"const alpha = 1; const beta = alpha + 1;\nthrow new Error(String(beta))", LangJS},
		{"\"use strict\"; const alpha = 1; const beta = alpha + 1;\nthrow new Error(String(beta))", LangJS},
		{"'use strict'\nconst alpha: number = 1; const beta = alpha + 1;\nthrow new Error(String(beta))", LangTS},
		{"const alpha = 'é'; let beta = alpha; throw new Error(String(beta))", LangJS},
	}
	for _, tc := range tests {
		p := mustPrepare(t, tc.code, tc.lang)
		if p.Persist() == nil {
			t.Fatalf("%q: nothing kept", tc.code)
		}
		for _, tok := range []string{"const alpha", "beta = alpha", "Error"} {
			gl, gc := positionOf(t, p.Code, tok)
			wl, wc := positionOf(t, tc.code, tok)
			if l, c := p.Position(gl, gc); l != wl || c != wc {
				t.Errorf("%q: %s: Code %d:%d maps to %d:%d, want %d:%d\n%s", tc.code, tok, gl, gc, l, c, wl, wc, p.Code)
			}
		}
	}
}
