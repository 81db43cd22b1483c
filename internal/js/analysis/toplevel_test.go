package analysis

import (
	"reflect"
	"testing"
)

func TestTopLevel(t *testing.T) {
	b := func(name string, k Kind) Binding { return Binding{Name: name, Kind: k} }
	tests := []struct {
		name, code string
		want       TopLevel
	}{
		{"nothing declared", "return 1 + 2", TopLevel{}},
		{"every kind", "const a = 1; let b; var c = 2; function d() {} class E {}; async function* f() {}",
			TopLevel{Bindings: []Binding{b("a", KindConst), b("b", KindLet), b("c", KindVar), b("d", KindFunction), b("E", KindClass), b("f", KindFunction)}}},
		{"destructuring", "const {x, y: [z, ...rest], ...others} = o; let [p = 1, , q] = r",
			TopLevel{Bindings: []Binding{b("x", KindConst), b("z", KindConst), b("rest", KindConst), b("others", KindConst), b("p", KindLet), b("q", KindLet)}}},
		{"nested vars hoist, nested lets and functions' locals do not",
			"if (a) { var v = 1; let inner = 2 } for (var i = 0; i < 2; i++) {} for (let j of []) {} function f() { var local } try {} catch (err) {}",
			TopLevel{Bindings: []Binding{b("v", KindVar), b("i", KindVar), b("f", KindFunction)}}},
		{"a block's function is the top level's in sloppy code (Annex B)", "{ function blockFn() {} }",
			TopLevel{Bindings: []Binding{b("blockFn", KindFunction)}}},
		{"but not in strict code", "'use strict'; { function blockFn() {} } const s = 1",
			TopLevel{Bindings: []Binding{b("s", KindConst)}, Prologue: 12, Strict: true}},
		{"used before declared", "f(); x; function f() {} var x", TopLevel{Bindings: []Binding{b("f", KindFunction), b("x", KindVar)}}},
		{"escaped names are decoded", `const \u0061b = 1`, TopLevel{Bindings: []Binding{b("ab", KindConst)}}},
		{"args declared", "const args = {n: 1}; return args.n", TopLevel{Bindings: []Binding{b("args", KindConst)}, ArgsDeclared: true}},
		{"args as a class", "class args {}", TopLevel{Bindings: []Binding{b("args", KindClass)}, ArgsDeclared: true}},
		{"args as a var or function keeps the parameter", "var args = args || {}", TopLevel{Bindings: []Binding{b("args", KindVar)}}},
		{"args in a nested scope", "{ const args = 1 } function g(args) {}", TopLevel{Bindings: []Binding{b("g", KindFunction)}}},
		{"directive prologue", "\"use strict\"\n'another';\nconst a = 1",
			TopLevel{Bindings: []Binding{b("a", KindConst)}, Prologue: 22, Strict: true}},
		{"a directive after a comment", "// note\n\"use strict\"; let z", TopLevel{Bindings: []Binding{b("z", KindLet)}, Prologue: 20, Strict: true}},
		{"a string that is no directive", "\"use strict\".length; let w", TopLevel{Bindings: []Binding{b("w", KindLet)}}},
		{"use strict after another directive", "'first'\n'use strict'; let u", TopLevel{Bindings: []Binding{b("u", KindLet)}, Prologue: 20, Strict: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, err := Parse(tc.code)
			if err != nil {
				t.Fatal(err)
			}
			got := a.Top
			if got.Bindings == nil {
				got.Bindings = nil
			}
			if len(got.Bindings) == 0 && len(tc.want.Bindings) == 0 {
				got.Bindings, tc.want.Bindings = nil, nil
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("TopLevel = %+v\n          want %+v", got, tc.want)
			}
			if tc.want.Prologue > 0 {
				if d := tc.code[:got.Prologue]; d[len(d)-1] != '"' && d[len(d)-1] != '\'' {
					t.Errorf("Prologue %d ends inside %q", got.Prologue, d)
				}
			}
		})
	}
}
