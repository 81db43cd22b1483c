// Package analysis inspects a script before it runs: it parses the code with
// a real JavaScript parser and lists every `mcp.<server>.<tool>` it names, so
// the executor can resolve each name (MCP tool first, then capability) and fail
// fast with suggestions instead of starting a sandbox for a doomed script.
//
// # Parser
//
// The parser is github.com/tdewolff/parse/v2/js (pinned in go.mod). It was
// chosen over github.com/dop251/goja/parser after running both on modern
// samples and comparing them with V8 (node's vm.Script) as the reference:
//
//   - goja's parser rejects valid ES2018+ code that QuickJS runs: `for await`,
//     async generators, dynamic `import()`, and HTML-like comments; it also
//     accepts `let a; let a;` and `const x;`. Rejecting valid code here would
//     refuse scripts the sandbox would have run.
//   - tdewolff handles async/await, optional chaining, class fields, private
//     names, static blocks, numeric separators, BigInt, `??=`, and reports
//     redeclarations; its few lapses are leniencies (`let let`, a tagged
//     template on an optional chain, `await` in a nested non-async function)
//     which QuickJS still reports when the script runs.
//   - tdewolff resolves scopes: every identifier use links to its
//     declaration, so a local variable or parameter named `mcp` shadows the
//     global for free. Analysis of 100 KB takes a few milliseconds.
//
// Its AST carries no positions. Its tokens are sub-slices of the input
// buffer, though, so a token's offset is recovered from its address (see
// offsetOf); a token that was not found in the buffer reports line 0.
//
// # What is seen
//
// The code is the body of an async function, wrapped as the guest wraps it
// (`(async function () {` + code + `\n})`), so top-level `await` and
// `return` are legal and line numbers are the user's. The guest binds
// `args` as the function's parameter unless the script declares its own
// (see TopLevel); the analysis reads it without, as a name from outside,
// which is what it is either way. Static names are `mcp.x.y`, `mcp["x"]["y"]`, `mcp.x["y-z"]`,
// `mcp?.x?.y`, template literals without substitutions, and the same through
// `globalThis.mcp`. Access that cannot be resolved statically (`mcp[name]`,
// `mcp.x[k]`, `const m = mcp`, `const {x} = mcp`, passing `mcp` or `mcp.x` as
// a value, `eval`, `Function`) sets Refs.Dynamic: it is allowed at run time,
// where an unknown name still fails at once with TOOL_NOT_FOUND.
package analysis

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"
	"unsafe"

	"github.com/tdewolff/parse/v2"
	"github.com/tdewolff/parse/v2/js"

	"github.com/pml-sandbox/pml/internal/fault"
)

// The wrapper must match guest-runtime/glue.c but for the parameter:
// analysis and execution have to agree on what the code means (which names
// are bound, whether an extra `}` escapes the function body). The guest's
// `args` parameter binds no name the analysis looks at, and reading the
// body without it accepts a script that declares its own `args`, which the
// guest then runs without the parameter (see TopLevel.ArgsDeclared).
const (
	wrapHead = "(async function () {"
	wrapTail = "\n})"
)

// Ref is one tool a script names statically.
type Ref struct {
	Server string `json:"server"`
	Tool   string `json:"tool"`
	// Line and Column (1-based, columns in characters) locate the server
	// name of the first occurrence in the user's code; 0 when unknown.
	Line   int `json:"line"`
	Column int `json:"column"`
}

// FullName is "server:tool", the form used by the catalog and in errors.
func (r Ref) FullName() string { return r.Server + ":" + r.Tool }

// Refs is what a script names through `mcp`.
type Refs struct {
	// Tools are the distinct (server, tool) pairs, sorted by server then
	// tool, each with the position of its first occurrence.
	Tools []Ref `json:"tools"`
	// Dynamic reports access the analysis cannot resolve; such calls are
	// checked only when they happen.
	Dynamic bool `json:"dynamic"`
}

// UnreadableError is the error of code the parser cannot read. It is not a
// verdict: the parser is stricter than QuickJS in places (sloppy-mode
// `for (var k = 2 in o)`), so a caller that can let the engine judge should
// (see internal/js/script). Fault is the ScriptError a caller that cannot
// reports, "SyntaxError: … (line L, column C)" in the user's coordinates.
type UnreadableError struct {
	Fault *fault.Error
}

func (e *UnreadableError) Error() string { return e.Fault.Error() }

// Unwrap lets fault.As find the ScriptError.
func (e *UnreadableError) Unwrap() error { return e.Fault }

// MCPReferences parses code (the body of an async function) and returns the
// tools it names. Code the parser cannot read is an *UnreadableError; code
// that reads but closes the function body and goes on at top level is a
// *fault.Error with code ScriptError. Both carry a message
// "SyntaxError: … (line L, column C)" in the user's coordinates.
func MCPReferences(code string) (Refs, error) {
	p, err := Parse(code)
	if err != nil {
		return Refs{}, err
	}
	return p.Refs, nil
}

// Parsed is code as the parser read it: the tools it names and the tree,
// for a caller that reads more of the code than its tool names (the
// learning loop, internal/learn) without parsing it again.
type Parsed struct {
	Refs Refs
	// Top is what its top level declares (what a session keeps).
	Top TopLevel
	// Sites are where the code calls the tools it names statically, in
	// the order of the code (at most maxSites of them).
	Sites []Site
	// AST is the wrapped program: one expression statement holding the
	// async function (Body) whose body is the user's code.
	AST *js.AST
	src []byte
}

// Body is the wrapper function (no parameters: args is a global), its body the
// user's code.
func (p *Parsed) Body() *js.FuncDecl {
	for _, s := range p.AST.List {
		if es, ok := s.(*js.ExprStmt); ok {
			if g, ok := es.Value.(*js.GroupExpr); ok {
				if f, ok := g.X.(*js.FuncDecl); ok {
					return f
				}
			}
		}
	}
	return nil // not reached: Parse checks the wrapper is intact
}

// Offset returns the offset in the user's code of a token of the tree (a
// literal's Data, a name), or -1 when the token is not a slice of the
// code (the parser built it).
func (p *Parsed) Offset(tok []byte) int {
	w := walker{src: p.src}
	return w.offsetOf(tok)
}

// Code is the user's code the tree was parsed from.
func (p *Parsed) Code() string {
	return string(p.src[len(wrapHead) : len(p.src)-len(wrapTail)])
}

// Parse parses code (the body of an async function) as MCPReferences
// does, and keeps the tree.
func Parse(code string) (*Parsed, error) {
	src := make([]byte, 0, len(wrapHead)+len(code)+len(wrapTail)+1)
	src = append(src, wrapHead...)
	src = append(src, code...)
	src = append(src, wrapTail...)
	// Capacity for the NUL tdewolff appends keeps its buffer our buffer, so
	// token addresses can be mapped back to offsets.
	ast, err := js.Parse(parse.NewInputBytes(src), js.Options{})
	if err != nil {
		return nil, &UnreadableError{Fault: syntaxError(code, err)}
	}
	body := wrapperBody(ast)
	if body == nil {
		// The code closed the function body and went on at top level
		// (`}); evil(); (function(){`). QuickJS would run that, but it is
		// never what a script body means; the wrapper-free parse locates the
		// stray brace.
		return nil, locateEscape(code)
	}
	w := &walker{src: src, lines: newLineIndex(code), seen: map[[2]string]Ref{}}
	js.Walk(w, ast)
	refs := Refs{Dynamic: w.dynamic, Tools: make([]Ref, 0, len(w.seen))}
	for _, r := range w.seen {
		refs.Tools = append(refs.Tools, r)
	}
	slices.SortFunc(refs.Tools, func(a, b Ref) int {
		return cmp.Or(cmp.Compare(a.Server, b.Server), cmp.Compare(a.Tool, b.Tool))
	})
	slices.SortFunc(w.sites, func(a, b Site) int { return a.Offset - b.Offset })
	return &Parsed{Refs: refs, Top: w.topLevel(body), Sites: w.sites, AST: ast, src: src}, nil
}

// wrapperBody returns the wrapper function when the whole program is that
// one function expression, else nil.
func wrapperBody(ast *js.AST) *js.FuncDecl {
	var stmts []js.IStmt
	for _, s := range ast.List {
		if _, ok := s.(*js.Comment); !ok {
			stmts = append(stmts, s)
		}
	}
	if len(stmts) != 1 {
		return nil
	}
	es, ok := stmts[0].(*js.ExprStmt)
	if !ok {
		return nil
	}
	g, ok := es.Value.(*js.GroupExpr)
	if !ok {
		return nil
	}
	f, ok := g.X.(*js.FuncDecl)
	if !ok || !f.Async || f.Generator || len(f.Params.List) > 0 || f.Params.Rest != nil {
		return nil
	}
	return f
}

// walker collects references while js.Walk visits the AST.
type walker struct {
	src     []byte
	lines   lineIndex
	seen    map[[2]string]Ref
	dynamic bool
	// sites are the calls of tools named statically; loops counts the
	// loops around the node being walked.
	sites []Site
	loops int
}

// Enter implements js.IVisitor.
func (w *walker) Enter(n js.INode) js.IVisitor {
	if w.enterLoop(n) {
		return nil
	}
	switch n := n.(type) {
	case *js.Var:
		if name, global := globalName(n); global {
			switch name {
			case "mcp", "eval", "Function":
				// A bare `mcp` is the namespace escaping as a value; eval
				// and Function can name anything.
				w.dynamic = true
			}
		}
		return nil
	case *js.DotExpr:
		w.member(n)
		return nil
	case *js.IndexExpr:
		w.member(n)
		return nil
	}
	return w
}

// Exit implements js.IVisitor.
func (w *walker) Exit(js.INode) {}

// segment is one property access of a member chain.
type segment struct {
	key      js.IExpr // the property: a LiteralExpr after a dot, any expression in brackets
	computed bool
}

// memberChain unwinds x's member accesses: its segments from the root
// out, and the root. (mcp).x and (mcp.x).y mean the same as without
// parentheses.
func memberChain(x js.IExpr) ([]segment, js.IExpr) {
	var segs []segment
	for {
		switch t := x.(type) {
		case *js.DotExpr:
			segs = append(segs, segment{key: t.Y})
			x = t.X
		case *js.IndexExpr:
			segs = append(segs, segment{key: t.Y, computed: true})
			x = t.X
		case *js.GroupExpr:
			x = t.X
		default:
			slices.Reverse(segs)
			return segs, x
		}
	}
}

// member handles a whole member chain at once (its outermost node is visited
// first), which keeps long chains linear and lets it see `mcp.x.y` as one
// name rather than as `mcp.x` plus `.y`.
func (w *walker) member(e js.IExpr) {
	segs, x := memberChain(e)

	// Computed keys are ordinary expressions that may hold references of
	// their own (mcp.a[mcp.b.c()]).
	defer func() {
		for _, s := range segs {
			if s.computed {
				js.Walk(w, s.key)
			}
		}
	}()

	v, ok := x.(*js.Var)
	if !ok {
		js.Walk(w, x)
		return
	}
	root, global := globalName(v)
	if !global {
		return
	}
	if root == "globalThis" && len(segs) > 0 {
		name, _, ok := w.static(segs[0])
		switch {
		case !ok:
			// globalThis[k] may be mcp under another spelling.
			w.dynamic = true
			return
		case name == "mcp":
			root, segs = "mcp", segs[1:]
		}
	}
	switch root {
	case "mcp":
	case "eval", "Function":
		w.dynamic = true
		return
	default:
		return
	}
	if len(segs) < 2 {
		// `mcp` or `mcp.x` used as a value: whatever is done with it later
		// is out of sight.
		w.dynamic = true
		return
	}
	server, off, ok1 := w.static(segs[0])
	tool, _, ok2 := w.static(segs[1])
	if !ok1 || !ok2 {
		w.dynamic = true
		return
	}
	k := [2]string{server, tool}
	line, col := 0, 0
	if off >= 0 {
		line, col = w.lines.position(off)
	}
	if prev, dup := w.seen[k]; dup && (prev.Line < line || prev.Line == line && prev.Column <= col) {
		return
	}
	w.seen[k] = Ref{Server: server, Tool: tool, Line: line, Column: col}
}

// static returns the property name a segment names when it is a constant,
// and the offset of its token in the user's code (-1 if unknown).
func (w *walker) static(s segment) (name string, off int, ok bool) {
	var raw []byte
	switch k := s.key.(type) {
	case js.LiteralExpr:
		if s.computed {
			return "", -1, false
		}
		raw = k.Data
		name, ok = decodeIdent(raw)
	case *js.LiteralExpr:
		if k.TokenType != js.StringToken {
			return "", -1, false
		}
		raw = k.Data
		name, ok = decodeQuoted(raw)
	case *js.TemplateExpr:
		if k.Tag != nil || len(k.List) > 0 {
			return "", -1, false
		}
		raw = k.Tail
		name, ok = decodeQuoted(raw)
	default:
		return "", -1, false
	}
	if !ok {
		return "", -1, false
	}
	return name, w.offsetOf(raw), true
}

// offsetOf returns the offset in the user's code of a token the parser
// sliced out of w.src, or -1. tdewolff's AST has no positions but its tokens
// alias the input buffer; only addresses are compared (nothing is read
// through a computed pointer), and the result is verified before use.
func (w *walker) offsetOf(tok []byte) int {
	if len(tok) == 0 || len(w.src) == 0 {
		return -1
	}
	d := uintptr(unsafe.Pointer(unsafe.SliceData(tok))) - uintptr(unsafe.Pointer(unsafe.SliceData(w.src)))
	if d >= uintptr(len(w.src)) || int(d)+len(tok) > len(w.src) || &w.src[d] != &tok[0] {
		return -1
	}
	off := int(d) - len(wrapHead)
	if off < 0 {
		return -1
	}
	return off
}

// globalName returns the name of v and whether it is an undeclared (global)
// variable, following the links tdewolff keeps between uses in nested scopes.
func globalName(v *js.Var) (string, bool) {
	for v.Link != nil {
		v = v.Link
	}
	return string(v.Data), v.Decl == js.NoDecl
}

// lineIndex maps offsets in the user's code to 1-based lines and character
// columns, with the line terminators tdewolff counts (\n, \r\n, \r, U+2028,
// U+2029) so positions agree with its error messages.
type lineIndex struct {
	code   []byte
	starts []int
}

func newLineIndex(code string) lineIndex {
	b := []byte(code)
	starts := []int{0}
	for i := 0; i < len(b); {
		switch {
		case b[i] == '\n':
			i++
		case b[i] == '\r':
			i++
			if i < len(b) && b[i] == '\n' {
				i++
			}
		case b[i] == 0xE2 && (bytes.HasPrefix(b[i:], []byte("\u2028")) || bytes.HasPrefix(b[i:], []byte("\u2029"))):
			i += 3
		default:
			i++
			continue
		}
		starts = append(starts, i)
	}
	return lineIndex{code: b, starts: starts}
}

// lines is the number of lines of the code (at least 1).
func (l lineIndex) lines() int { return len(l.starts) }

func (l lineIndex) position(off int) (line, col int) {
	i, found := slices.BinarySearch(l.starts, off)
	if !found {
		i--
	}
	return i + 1, utf8.RuneCount(l.code[l.starts[i]:off]) + 1
}

// lineLen is the length in characters of line n (1-based), terminator
// excluded.
func (l lineIndex) lineLen(n int) int {
	end := len(l.code)
	if n < len(l.starts) {
		end = l.starts[n]
	}
	line := bytes.TrimRight(l.code[l.starts[n-1]:end], "\r\n")
	line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\u2028")), []byte("\u2029"))
	return utf8.RuneCount(line)
}

// syntaxError turns a parse error of the wrapped code into the user's
// coordinates.
func syntaxError(code string, err error) *fault.Error {
	var pe *parse.Error
	if !errors.As(err, &pe) {
		return fault.Wrap(fault.ScriptError, err, "SyntaxError")
	}
	li := newLineIndex(code)
	line, col := pe.Line, pe.Column
	if line == 1 {
		col -= utf8.RuneCountInString(wrapHead)
	}
	if line > li.lines() || col < 1 {
		// The parser tripped over the wrapper itself: the code left a
		// bracket open or closed one too many. Parsing the code alone
		// points at the user's own token instead of at our `})`.
		return locateEscape(code)
	}
	return SyntaxErrorAt(pe.Message, line, col)
}

// locateEscape finds the syntax error of code parsed on its own (statements
// with top-level return and await), used when the error involves the
// wrapper.
func locateEscape(code string) *fault.Error {
	li := newLineIndex(code)
	_, err := js.Parse(parse.NewInputString(code), js.Options{Inline: true})
	var pe *parse.Error
	if errors.As(err, &pe) && pe.Line >= 1 && pe.Line <= li.lines() && pe.Column >= 1 {
		return SyntaxErrorAt(pe.Message, pe.Line, pe.Column)
	}
	last := li.lines()
	return SyntaxErrorAt("unexpected end of input or unbalanced '}'", last, li.lineLen(last)+1)
}

// SyntaxErrorAt is the ScriptError of a syntax error at a 1-based line and
// character column, in the shape every static check reports:
// "SyntaxError: MSG (line L, column C)" with details {line, column}.
func SyntaxErrorAt(msg string, line, col int) *fault.Error {
	return &fault.Error{
		Code:    fault.ScriptError,
		Message: fmt.Sprintf("SyntaxError: %s (line %d, column %d)", msg, line, col),
		Details: map[string]int{"line": line, "column": col},
	}
}
