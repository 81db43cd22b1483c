package analysis

import (
	"fmt"

	"github.com/tdewolff/parse/v2/js"
)

// Call sites. Besides the tools a script names, the analysis lists where it
// calls each one it names statically — every `mcp.x.y(…)` (and the tagged
// template mcp.x.y`…`) — and whether the call sits in a loop, so that a
// person can be shown the script's plan before deciding about one of its
// calls (internal/executor's grants). A site is identified as the engine
// identifies it when the call happens: QuickJS records a call's position
// as its opening parenthesis (a tagged template's backquote), counting
// lines at \n only and columns in characters; Site.Key is that position,
// and guest.Call carries the same for each call it makes.

// Site is one place where a script calls a tool it names statically.
type Site struct {
	Server string `json:"server"`
	Tool   string `json:"tool"`
	// Line and Column locate the call's opening parenthesis as Ref's
	// positions do (1-based, columns in characters).
	Line   int `json:"line"`
	Column int `json:"column"`
	// Offset is the byte offset of that parenthesis in the code.
	Offset int `json:"offset"`
	// InLoop: the call sits in the body (or the test, or the update) of
	// a for, for-in, for-of, while or do loop, or in a function passed to
	// an array's iterating method (map, forEach, filter, reduce…) —
	// where a script usually makes the same call many times. A call in a
	// function called from a loop elsewhere is not seen as one.
	InLoop bool `json:"in_loop,omitempty"`
}

// FullName is "server:tool".
func (s Site) FullName() string { return s.Server + ":" + s.Tool }

// maxSites bounds the sites a script's analysis lists: past it the rest
// are not listed (a plan shows a calls' site as it happens regardless).
const maxSites = 1000

// iterating are the methods whose function argument runs once per element.
var iterating = map[string]bool{
	"map": true, "forEach": true, "flatMap": true, "filter": true, "reduce": true, "reduceRight": true,
	"some": true, "every": true, "find": true, "findIndex": true, "findLast": true, "findLastIndex": true,
	"from": true, "sort": true, "toSorted": true,
}

// SiteKey is a call site as the engine reports it: "line:column" of the
// byte offset off in code, lines ended by \n alone and columns counted in
// characters (UTF-8 sequences), both from 1, as QuickJS counts them.
func SiteKey(code string, off int) string {
	line, col := 1, 1
	for i := 0; i < off && i < len(code); i++ {
		switch c := code[i]; {
		case c == '\n':
			line, col = line+1, 1
		case c < 0x80 || c >= 0xc0:
			col++
		}
	}
	return fmt.Sprintf("%d:%d", line, col)
}

// loopWalk walks the parts of a loop statement: those that run once
// outside the loop, then those that run on each iteration inside it.
func (w *walker) loopWalk(once []js.INode, each ...js.INode) {
	for _, n := range once {
		if n != nil {
			js.Walk(w, n)
		}
	}
	w.loops++
	for _, n := range each {
		if n != nil {
			js.Walk(w, n)
		}
	}
	w.loops--
}

// enterLoop handles the statements and calls that put code in a loop; it
// reports whether it walked n itself.
func (w *walker) enterLoop(n js.INode) bool {
	switch n := n.(type) {
	case *js.ForStmt:
		var body js.INode
		if n.Body != nil {
			body = n.Body
		}
		w.loopWalk([]js.INode{n.Init}, n.Cond, n.Post, body)
	case *js.ForInStmt:
		var body js.INode
		if n.Body != nil {
			body = n.Body
		}
		w.loopWalk([]js.INode{n.Value}, n.Init, body)
	case *js.ForOfStmt:
		var body js.INode
		if n.Body != nil {
			body = n.Body
		}
		w.loopWalk([]js.INode{n.Value}, n.Init, body)
	case *js.WhileStmt:
		w.loopWalk(nil, n.Cond, n.Body)
	case *js.DoWhileStmt:
		w.loopWalk(nil, n.Body, n.Cond)
	case *js.CallExpr:
		js.Walk(w, n.X)
		w.site(n.X)
		iter := false
		if d, ok := ungroup(n.X).(*js.DotExpr); ok {
			if name, ok := d.Y.(js.LiteralExpr); ok {
				iter = iterating[string(name.Data)]
			}
		}
		for i := range n.Args.List {
			v := n.Args.List[i].Value
			_, arrow := v.(*js.ArrowFunc)
			_, fn := v.(*js.FuncDecl)
			if iter && (arrow || fn) {
				w.loopWalk(nil, v)
			} else {
				js.Walk(w, v)
			}
		}
	case *js.TemplateExpr:
		if n.Tag == nil {
			return false
		}
		js.Walk(w, n.Tag)
		w.site(n.Tag)
		for i := range n.List {
			js.Walk(w, n.List[i].Expr)
		}
	default:
		return false
	}
	return true
}

func ungroup(x js.IExpr) js.IExpr {
	for {
		g, ok := x.(*js.GroupExpr)
		if !ok {
			return x
		}
		x = g.X
	}
}

// site records the call whose callee is x when x names a tool statically.
func (w *walker) site(x js.IExpr) {
	if len(w.sites) >= maxSites {
		return
	}
	server, tool, end, ok := w.staticTool(ungroup(x))
	if !ok || end < 0 {
		return
	}
	off := openParen(w.code(), end)
	if off < 0 {
		return
	}
	line, col := w.lines.position(off)
	w.sites = append(w.sites, Site{Server: server, Tool: tool, Line: line, Column: col, Offset: off, InLoop: w.loops > 0})
}

// code is the user's code the walker reads.
func (w *walker) code() []byte { return w.src[len(wrapHead) : len(w.src)-len(wrapTail)] }

// staticTool reads x as mcp.<server>.<tool> with constant names (through
// globalThis.mcp too), and returns the offset in the user's code just past
// the tool name's token.
func (w *walker) staticTool(e js.IExpr) (server, tool string, end int, ok bool) {
	segs, x := memberChain(e)
	v, isVar := x.(*js.Var)
	if !isVar {
		return "", "", -1, false
	}
	root, global := globalName(v)
	if !global {
		return "", "", -1, false
	}
	if root == "globalThis" && len(segs) > 0 {
		if name, _, ok := w.static(segs[0]); ok && name == "mcp" {
			root, segs = "mcp", segs[1:]
		}
	}
	if root != "mcp" || len(segs) != 2 {
		return "", "", -1, false
	}
	server, _, ok1 := w.static(segs[0])
	tool, off, ok2 := w.static(segs[1])
	if !ok1 || !ok2 || off < 0 {
		return "", "", -1, false
	}
	return server, tool, off + len(rawOf(segs[1])), true
}

// rawOf is the token a constant segment was read from.
func rawOf(s segment) []byte {
	switch k := s.key.(type) {
	case js.LiteralExpr:
		return k.Data
	case *js.LiteralExpr:
		return k.Data
	case *js.TemplateExpr:
		return k.Tail
	}
	return nil
}

// openParen finds the call's opening parenthesis (or a tagged template's
// backquote) after a callee that ends at off: past blanks, comments, the
// closing ']' of a computed name or ')' of a parenthesised callee, and an
// optional call's "?."; -1 when something else stands there.
func openParen(code []byte, off int) int {
	for i := off; i < len(code); {
		switch c := code[i]; {
		case c == '(' || c == '`':
			return i
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' || c == ']' || c == ')':
			i++
		case c == '?' && i+1 < len(code) && code[i+1] == '.':
			i += 2
		case c == '/' && i+1 < len(code) && code[i+1] == '/':
			for i < len(code) && code[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(code) && code[i+1] == '*':
			j := indexFrom(code, i+2, "*/")
			if j < 0 {
				return -1
			}
			i = j + 2
		case c >= 0x80:
			// Other blanks and line terminators (U+00A0, U+2028…) are
			// rare enough between a callee and its arguments to leave
			// the site unlisted.
			return -1
		default:
			return -1
		}
	}
	return -1
}

func indexFrom(b []byte, from int, sub string) int {
	for i := from; i+len(sub) <= len(b); i++ {
		if string(b[i:i+len(sub)]) == sub {
			return i
		}
	}
	return -1
}
