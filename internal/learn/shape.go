package learn

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"slices"
	"strings"

	"github.com/tdewolff/parse/v2"
	"github.com/tdewolff/parse/v2/js"

	"github.com/pml-sandbox/pml/internal/analysis"
	"github.com/pml-sandbox/pml/internal/redact"
	"github.com/pml-sandbox/pml/internal/trace"
)

// Bounds on what one execution contributes, so that the trace item that
// carries it stays small (docs/TRACES.md) and a candidate stays bounded.
const (
	// MaxCodeBytes: longer code is not learned from. Programs worth
	// keeping as capabilities are short; the template a candidate keeps
	// is about this long.
	MaxCodeBytes = 16 << 10
	// MaxLiterals: code with more liftable literals is not learned from
	// (a table of constants is data, not a pattern).
	MaxLiterals = 32
	// MaxValueBytes: a longer literal's value is withheld (only its hash
	// is kept, to tell runs apart).
	MaxValueBytes = 64
	// maxComments and maxCommentBytes bound what a template keeps of the
	// comments, for a description.
	maxComments     = 4
	maxCommentBytes = 200
)

// fingerprintVersion is mixed into every fingerprint: a change to the
// normalisation must make new fingerprints rather than merge old and new
// candidates that mean different things.
const fingerprintVersion = "pml-learn-1\n"

// Shape is what the learning loop reads of one script's code: the same for
// every run of a pattern but for its literals.
type Shape struct {
	// Fingerprint identifies the code with comments, layout and local
	// names ignored and literals lifted (16 hex digits).
	Fingerprint string
	// Literals are this run's lifted literals, in the order of the code;
	// a secret-looking or long one is withheld.
	Literals []trace.Literal
	// ArgsKeys are the keys of args the code reads; ArgsWhole that it also
	// uses args as a whole.
	ArgsKeys  []string
	ArgsWhole bool
	// Template is the code with the literals cut out.
	Template *trace.Template
}

// Read computes the shape of a script from the analysis parser's tree,
// without parsing it again. It returns nil for code that is not learned
// from: longer than MaxCodeBytes, with more than MaxLiterals literals, or
// holding a secret-looking string the fingerprint cannot lift (a regular
// expression, part of a template with substitutions, a property name):
// no trace of such code may carry it. known, when not nil, masks the
// deployment's own secrets (the MCP pool's header values) as well.
//
// Read consumes the tree: it renames the local variables and blanks the
// literals in place to print the normalised program.
func Read(p *analysis.Parsed, known *redact.Redactor) *Shape {
	if p == nil || p.AST == nil {
		return nil
	}
	code := p.Code()
	if len(code) > MaxCodeBytes {
		return nil
	}
	body := p.Body()
	if body == nil {
		return nil
	}
	w := &shapeWalker{
		hints:      map[*js.LiteralExpr]string{},
		structural: map[*js.LiteralExpr]bool{},
		names:      map[*js.Var]string{},
		argsKeys:   map[string]bool{},
	}
	if len(body.Params.List) == 1 {
		if v, ok := body.Params.List[0].Binding.(*js.Var); ok {
			w.args = root(v)
		}
	}
	js.Walk(w, &body.Body)
	if len(w.lits) > MaxLiterals {
		return nil
	}

	// Where each literal stands in the code, in the order of the code.
	type slot struct {
		off, end int
		lit      lifted
	}
	slots := make([]slot, 0, len(w.lits))
	for _, l := range w.lits {
		raw := l.raw()
		off := p.Offset(raw)
		if off < 0 {
			return nil // a token the parser built: nothing to cut out
		}
		slots = append(slots, slot{off: off, end: off + len(raw), lit: l})
	}
	slices.SortFunc(slots, func(a, b slot) int { return a.off - b.off })
	regexps := map[int]bool{}
	for _, raw := range w.regexps {
		if off := p.Offset(raw); off >= 0 {
			regexps[off] = true
		}
	}

	// The template: the code with the literals cut out, comments kept
	// (secret-looking words masked). Every other token that holds text (a
	// regular expression, a property name, a piece of a template with
	// substitutions) must hold no secret, or nothing is learned.
	sh := &Shape{ArgsWhole: w.argsWhole}
	tpl := &trace.Template{}
	var b strings.Builder
	b.Grow(len(code))
	lex := js.NewLexer(parse.NewInputString(code))
	next, off := 0, 0
	for {
		tt, data := lex.Next()
		if tt == js.ErrorToken {
			if !errors.Is(lex.Err(), io.EOF) {
				return nil
			}
			break
		}
		if (tt == js.DivToken || tt == js.DivEqToken) && regexps[off] {
			tt, data = lex.RegExp()
			if tt == js.ErrorToken {
				return nil
			}
		}
		switch {
		case next < len(slots) && off == slots[next].off:
			if off+len(data) != slots[next].end {
				return nil // the lexer and the parser disagree: do not guess
			}
			tpl.Holes = append(tpl.Holes, b.Len())
			tpl.Names = append(tpl.Names, slots[next].lit.hint)
			next++
		case tt == js.CommentToken || tt == js.CommentLineTerminatorToken:
			text := maskSecrets(string(data), known)
			b.WriteString(text)
			if c := commentText(text); c != "" && len(tpl.Comments) < maxComments {
				tpl.Comments = append(tpl.Comments, c)
			}
		case tt == js.StringToken || tt == js.TemplateToken || tt == js.TemplateStartToken || tt == js.TemplateMiddleToken ||
			tt == js.TemplateEndToken || tt == js.RegExpToken:
			if LooksSecret(string(data), known) {
				return nil
			}
			b.Write(data)
		default:
			b.Write(data)
		}
		off += len(data)
	}
	if next != len(slots) || off != len(code) {
		return nil
	}
	tpl.Code = b.String()
	sh.Template = tpl

	for _, s := range slots {
		sh.Literals = append(sh.Literals, literalOf(s.lit, known))
	}
	for k := range w.argsKeys {
		sh.ArgsKeys = append(sh.ArgsKeys, k)
	}
	slices.Sort(sh.ArgsKeys)

	// The fingerprint: the program printed with every local renamed in
	// the order the walk first met it and every literal blanked, so that
	// layout, comments, local names and literal values do not count.
	for v, name := range w.names {
		v.Data = []byte(name)
	}
	for _, l := range w.lits {
		l.blank()
	}
	for _, c := range w.comments {
		c.Value = nil
	}
	var norm bytes.Buffer
	norm.WriteString(fingerprintVersion)
	p.AST.JS(&norm)
	sum := sha256.Sum256(norm.Bytes())
	sh.Fingerprint = hex.EncodeToString(sum[:8])
	return sh
}

// lifted is one liftable literal: a string or number expression, or a
// template literal without substitutions.
type lifted struct {
	expr *js.LiteralExpr
	tmpl *js.TemplateExpr
	hint string
}

func (l lifted) raw() []byte {
	if l.tmpl != nil {
		return l.tmpl.Tail
	}
	return l.expr.Data
}

func (l lifted) kind() string {
	if l.expr != nil && l.expr.TokenType != js.StringToken {
		return trace.LiteralNumber
	}
	return trace.LiteralString
}

// blank replaces the literal's text with its kind, for the fingerprint.
func (l lifted) blank() {
	if l.tmpl != nil {
		l.tmpl.Tail = []byte(`"§"`)
		return
	}
	if l.expr.TokenType == js.StringToken {
		l.expr.Data = []byte(`"§"`)
	} else {
		l.expr.Data = []byte("0")
	}
}

// literalOf is the trace record of one literal's value.
func literalOf(l lifted, known *redact.Redactor) trace.Literal {
	raw := string(l.raw())
	out := trace.Literal{Kind: l.kind()}
	value := raw
	if out.Kind == trace.LiteralString {
		v, ok := analysis.StringValue(l.raw())
		if !ok {
			v = raw // kept as written; judged the same way
		}
		value = v
	}
	switch {
	case LooksSecret(value, known) || LooksSecret(raw, known) || out.Kind == trace.LiteralNumber && digits(value) > maxNumberDigits:
		out.Withheld = trace.WithheldSecret
	case len(value) > MaxValueBytes:
		sum := sha256.Sum256([]byte(value))
		out.Withheld, out.Hash = trace.WithheldLong, hex.EncodeToString(sum[:6])
	default:
		out.Value = value
	}
	return out
}

// maxNumberDigits: a number literal with more digits is withheld like a
// secret (an account or card number), never kept.
const maxNumberDigits = 12

func digits(s string) int {
	n := 0
	for _, r := range s {
		if r >= '0' && r <= '9' {
			n++
		}
	}
	return n
}

// commentText is a comment's text without its markers, on one line,
// bounded.
func commentText(c string) string {
	c = strings.TrimPrefix(c, "//")
	c = strings.TrimPrefix(c, "/*")
	c = strings.TrimSuffix(c, "*/")
	c = strings.Join(strings.Fields(strings.ReplaceAll(c, "*", " ")), " ")
	if len(c) > maxCommentBytes {
		c = c[:maxCommentBytes]
		for len(c) > 0 && c[len(c)-1]&0xC0 == 0x80 {
			c = c[:len(c)-1] // do not cut a character in two
		}
		if len(c) > 0 && c[len(c)-1]&0x80 != 0 {
			c = c[:len(c)-1]
		}
		c += "…"
	}
	return c
}

func root(v *js.Var) *js.Var {
	for v.Link != nil {
		v = v.Link
	}
	return v
}

// shapeWalker collects what Read needs in one walk of the tree.
type shapeWalker struct {
	args       *js.Var // the wrapper's parameter
	lits       []lifted
	regexps    [][]byte
	comments   []*js.Comment
	hints      map[*js.LiteralExpr]string
	tmplHints  map[*js.TemplateExpr]string
	structural map[*js.LiteralExpr]bool
	names      map[*js.Var]string // local variables, renamed v0, v1… in the order met
	argsKeys   map[string]bool
	argsWhole  bool
}

// Enter implements js.IVisitor.
func (w *shapeWalker) Enter(n js.INode) js.IVisitor {
	switch n := n.(type) {
	case *js.Comment:
		w.comments = append(w.comments, n)
		return nil
	case *js.Var:
		r := root(n)
		switch {
		case r == w.args:
			// args used as a value, not through one of its keys.
			w.argsWhole = true
		case r.Decl != js.NoDecl:
			if _, ok := w.names[r]; !ok {
				w.names[r] = "v" + itoa(len(w.names))
			}
		}
		return nil
	case *js.PropertyName:
		// A property's name is the shape of the object, not a value.
		if n.Computed != nil {
			js.Walk(w, n.Computed)
		}
		return nil
	case *js.DotExpr:
		if v, ok := n.X.(*js.Var); ok && w.args != nil && root(v) == w.args {
			if lit, ok := n.Y.(js.LiteralExpr); ok {
				w.argsKeys[string(lit.Data)] = true
			}
			return nil
		}
		js.Walk(w, n.X) // n.Y is a name
		return nil
	case *js.IndexExpr:
		// obj["key"] and list[0] name a place, as a dot does: not lifted.
		if lit, ok := n.Y.(*js.LiteralExpr); ok {
			w.structural[lit] = true
			if v, ok := n.X.(*js.Var); ok && w.args != nil && root(v) == w.args && lit.TokenType == js.StringToken {
				if name, ok := analysis.StringValue(lit.Data); ok {
					w.argsKeys[name] = true
				}
				return nil
			}
		}
		return w
	case *js.ObjectExpr:
		for i := range n.List {
			p := &n.List[i]
			if p.Name == nil || p.Name.IsComputed() {
				continue
			}
			w.hint(p.Value, string(p.Name.Literal.Data))
		}
		return w
	case *js.VarDecl:
		for i := range n.List {
			e := &n.List[i]
			if v, ok := e.Binding.(*js.Var); ok {
				w.hint(e.Default, string(v.Data))
			}
			if bo, ok := e.Binding.(*js.BindingObject); ok && w.args != nil {
				if v, ok := e.Default.(*js.Var); ok && root(v) == w.args {
					// const {a, b} = args
					for _, item := range bo.List {
						if item.Key != nil && !item.Key.IsComputed() {
							w.argsKeys[propertyKey(item.Key.Literal)] = true
						} else if v, ok := item.Value.Binding.(*js.Var); ok {
							w.argsKeys[string(v.Data)] = true
						}
					}
					if bo.Rest != nil {
						w.argsWhole = true
					}
					js.Walk(w, e.Binding)
					continue
				}
			}
			js.Walk(w, e)
		}
		return nil
	case *js.BinaryExpr:
		if n.Op == js.EqToken {
			if v, ok := n.X.(*js.Var); ok {
				w.hint(n.Y, string(v.Data))
			}
		}
		return w
	case *js.CallExpr:
		// f("x"): the literal is named after what is called.
		name := ""
		switch x := n.X.(type) {
		case *js.DotExpr:
			if lit, ok := x.Y.(js.LiteralExpr); ok {
				name = string(lit.Data)
			}
		case *js.Var:
			name = string(x.Data)
		}
		if name != "" {
			for _, a := range n.Args.List {
				w.hint(a.Value, name)
			}
		}
		return w
	case *js.LiteralExpr:
		switch {
		case w.structural[n]:
		case n.TokenType == js.RegExpToken:
			w.regexps = append(w.regexps, n.Data)
		case n.TokenType == js.StringToken, isNumber(n):
			w.lits = append(w.lits, lifted{expr: n, hint: w.hints[n]})
		}
		return nil
	case *js.TemplateExpr:
		if n.Tag == nil && len(n.List) == 0 {
			w.lits = append(w.lits, lifted{tmpl: n, hint: w.tmplHints[n]})
			return nil
		}
		return w
	}
	return w
}

// Exit implements js.IVisitor.
func (w *shapeWalker) Exit(js.INode) {}

// hint names the literal e (if it is one) after where it stands: the
// first name given wins (a property's key over the call it is passed to).
func (w *shapeWalker) hint(e js.IExpr, name string) {
	name = identifier(name)
	if name == "" {
		return
	}
	switch l := e.(type) {
	case *js.LiteralExpr:
		if _, ok := w.hints[l]; !ok {
			w.hints[l] = name
		}
	case *js.TemplateExpr:
		if w.tmplHints == nil {
			w.tmplHints = map[*js.TemplateExpr]string{}
		}
		if _, ok := w.tmplHints[l]; !ok {
			w.tmplHints[l] = name
		}
	case *js.UnaryExpr:
		w.hint(l.X, name) // -5
	}
}

func propertyKey(l js.LiteralExpr) string {
	if l.TokenType == js.StringToken {
		if s, ok := analysis.StringValue(l.Data); ok {
			return s
		}
	}
	return string(l.Data)
}

// identifier is name as a JavaScript identifier an args key can be
// (quotes dropped, anything else replaced by _), or "".
func identifier(name string) string {
	if len(name) >= 2 && (name[0] == '"' || name[0] == '\'') {
		if s, ok := analysis.StringValue([]byte(name)); ok {
			name = s
		}
	}
	var b strings.Builder
	for i, r := range name {
		switch {
		case r == '_' || r == '$' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z':
			b.WriteRune(r)
		case r >= '0' && r <= '9':
			if i == 0 {
				b.WriteByte('_')
			}
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
		if b.Len() >= 40 {
			break
		}
	}
	return b.String()
}

// isNumber reports a numeric literal other than a BigInt (whose value a
// JSON argument cannot carry).
func isNumber(n *js.LiteralExpr) bool {
	if n.TokenType&0xFF00 != js.NumericToken {
		return false
	}
	return len(n.Data) > 0 && n.Data[len(n.Data)-1] != 'n'
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}
