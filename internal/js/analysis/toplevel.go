package analysis

import (
	"bytes"
	"slices"

	"github.com/tdewolff/parse/v2/js"
)

// A script's top level is the function scope of the body it is wrapped in.
// Two things depend on what it declares:
//
//   - `args`. The guest binds the input as the wrapper's parameter, and a
//     top-level `let`, `const` or `class` of the same name is a SyntaxError
//     there ("invalid redefinition of parameter name"). A script that
//     declares one runs in a wrapper without the parameter instead, and
//     its declaration shadows the input, which stays `globalThis.args`.
//   - Sessions. What a session's execution declares at its top level lives
//     on into the next (as in a REPL): the names are handed to the guest,
//     which, once the execution has succeeded, makes each a property of the
//     global object reading and writing the execution's own binding (see
//     internal/js/script's Persist and guest-runtime/prelude.js).
//
// Both need the same thing: the names the top level binds, and of what
// kind. tdewolff resolves scopes, so the wrapper function's scope lists
// them, hoisted `var`s in nested blocks included; the kinds come from the
// top-level statements.

// Kind is how a top-level name is declared.
type Kind string

// The kinds of top-level declaration.
const (
	KindVar      Kind = "var"
	KindLet      Kind = "let"
	KindConst    Kind = "const"
	KindClass    Kind = "class"
	KindFunction Kind = "function"
)

// Binding is one name the top level declares.
type Binding struct {
	// Name is the name (identifier escapes decoded), also a valid way to
	// write it in code.
	Name string `json:"name"`
	Kind Kind   `json:"kind"`
}

// TopLevel is what a script's top level declares.
type TopLevel struct {
	// Bindings are the names declared in the body's function scope, in
	// the order the parser met them: top-level let, const, class and
	// function declarations and every var not inside a nested function.
	// A block's function declaration is one only in sloppy code (Annex B
	// hoists it); in strict code it stays in its block and is left out.
	Bindings []Binding `json:"bindings"`
	// ArgsDeclared reports a top-level let, const or class named `args`:
	// the script must run without the `args` parameter.
	ArgsDeclared bool `json:"args_declared,omitempty"`
	// Prologue is the byte offset in the code just past its directive
	// prologue ("use strict"; 0 when it has none): the first place a
	// statement can be added without turning a directive into an
	// expression.
	Prologue int `json:"prologue"`
	// Strict reports a "use strict" directive.
	Strict bool `json:"strict,omitempty"`
}

// Names are the bindings' names.
func (t TopLevel) Names() []string {
	out := make([]string, len(t.Bindings))
	for i, b := range t.Bindings {
		out[i] = b.Name
	}
	return out
}

// topLevel reads f, the wrapper function, for its top-level declarations.
func (w *walker) topLevel(f *js.FuncDecl) TopLevel {
	var t TopLevel
	kinds := map[*js.Var]Kind{}
	// The directive prologue is every string-literal statement at the
	// start. tdewolff marks only a first "use strict" as one, so the
	// others are recognised here: `'a'; 'use strict'` is strict too.
prologue:
	for _, s := range f.Body.List {
		var v []byte
		switch s := s.(type) {
		case *js.Comment:
			continue
		case *js.DirectivePrologueStmt:
			v = s.Value
		case *js.ExprStmt:
			l, ok := s.Value.(*js.LiteralExpr)
			if !ok || l.TokenType != js.StringToken {
				break prologue
			}
			v = l.Data
		default:
			break prologue
		}
		off := w.offsetOf(v)
		if off < 0 {
			break
		}
		t.Prologue = off + len(v)
		t.Strict = t.Strict || isStrict(v)
	}
	for _, s := range f.Body.List {
		switch s := s.(type) {
		case *js.VarDecl:
			k := KindVar
			switch s.TokenType {
			case js.ConstToken:
				k = KindConst
			case js.LetToken:
				k = KindLet
			}
			for _, b := range s.List {
				bindingVars(b.Binding, func(v *js.Var) { kinds[v] = k })
			}
		case *js.ClassDecl:
			if s.Name != nil {
				kinds[s.Name] = KindClass
			}
		case *js.FuncDecl:
			if s.Name != nil {
				kinds[s.Name] = KindFunction
			}
		}
	}
	for _, v := range f.Body.Scope.Declared {
		name, ok := decodeIdent(v.Data)
		if !ok {
			continue
		}
		k, top := kinds[v]
		switch {
		case top:
		case v.Decl == js.VariableDecl:
			k = KindVar
		case v.Decl == js.FunctionDecl && !t.Strict:
			k = KindFunction // a block's function, hoisted by Annex B
		default:
			continue
		}
		if name == "args" && (k == KindLet || k == KindConst || k == KindClass) {
			t.ArgsDeclared = true
		}
		if slices.ContainsFunc(t.Bindings, func(b Binding) bool { return b.Name == name }) {
			continue
		}
		t.Bindings = append(t.Bindings, Binding{Name: name, Kind: k})
	}
	return t
}

// bindingVars calls fn for every name a binding pattern binds.
func bindingVars(b js.IBinding, fn func(*js.Var)) {
	switch b := b.(type) {
	case *js.Var:
		fn(b)
	case *js.BindingArray:
		for _, e := range b.List {
			bindingVars(e.Binding, fn)
		}
		if b.Rest != nil {
			bindingVars(b.Rest, fn)
		}
	case *js.BindingObject:
		for _, it := range b.List {
			bindingVars(it.Value.Binding, fn)
		}
		if b.Rest != nil {
			fn(b.Rest)
		}
	}
}

// isStrict reports whether a directive, as written, is "use strict" (an
// escaped spelling is not).
func isStrict(v []byte) bool {
	return bytes.Equal(v, []byte(`"use strict"`)) || bytes.Equal(v, []byte(`'use strict'`))
}
