package learn

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/tdewolff/parse/v2"
	"github.com/tdewolff/parse/v2/js"

	"github.com/pml-sandbox/pml/internal/js/analysis"
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

	pieces []piece // the code, cut at its literals, comments and strings
	names  []string
	known  *redact.Redactor
}

// piece is a stretch of the code as the template needs it.
type piece struct {
	kind byte // pieceCode, pieceHole, pieceComment, pieceText
	text string
}

const (
	pieceCode    = iota // kept as it is
	pieceHole           // a lifted literal: cut out
	pieceComment        // kept with secret-looking words masked
	pieceText           // a string, template part or regular expression the fingerprint keeps: no secret may be in it
)

// Template is the code with its literals cut out and its comments' secret
// words masked, or nil when a string the fingerprint could not lift (a
// regular expression, part of a template with substitutions, a property
// name) looks like a secret: no template may carry it. It is the costly
// part of a shape (every string judged, every comment masked), so a
// Learner asks for it once per process and fingerprint.
func (sh *Shape) Template() *trace.Template {
	if sh == nil || sh.pieces == nil {
		return nil
	}
	tpl := &trace.Template{Names: slices.Clone(sh.names)}
	var b strings.Builder
	for _, pc := range sh.pieces {
		switch pc.kind {
		case pieceHole:
			tpl.Holes = append(tpl.Holes, b.Len())
		case pieceComment:
			text := maskSecrets(pc.text, sh.known)
			b.WriteString(text)
			if c := commentText(text); c != "" && len(tpl.Comments) < maxComments {
				tpl.Comments = append(tpl.Comments, c)
			}
		case pieceText:
			if LooksSecret(pc.text, sh.known) {
				return nil
			}
			b.WriteString(pc.text)
		default:
			b.WriteString(pc.text)
		}
	}
	tpl.Code = b.String()
	return tpl
}

// Read computes the shape of a script from the analysis parser's tree,
// without parsing it again: one walk of the tree and one pass of the
// lexer over the code. It returns nil for code that is not learned from:
// longer than MaxCodeBytes, with more than MaxLiterals literals, or
// reading an args key that looks like a secret. known, when not nil,
// withholds the deployment's own secrets (the MCP pool's header values)
// as well.
//
// The fingerprint is a hash of the code's tokens with comments and layout
// left out, each literal replaced by its kind, and each local variable
// (declared in the code) by its number in the order of first use; globals
// (mcp, args, Math), property names and object keys are kept, and the
// names of shorthand properties ({city}) are added.
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
		parsed:   p,
		locals:   map[string]bool{},
		argsKeys: map[string]bool{},
	}
	w.args = inputArgs(p.AST, body)
	js.Walk(w, &body.Body)
	if len(w.lits) > MaxLiterals {
		return nil
	}
	delete(w.locals, "args") // the input, whatever inner scopes call theirs
	sh := &Shape{ArgsWhole: w.argsWhole, known: known}
	for k := range w.argsKeys {
		if LooksSecret(k, known) {
			return nil // a key is kept as it is: it must hold no secret
		}
		sh.ArgsKeys = append(sh.ArgsKeys, k)
	}
	slices.Sort(sh.ArgsKeys)
	slots, regexps, ok := w.places()
	if !ok {
		return nil
	}
	slices.Sort(w.keys)

	// One pass of the lexer: the fingerprint's tokens, and the pieces of
	// the template.
	l := &lexPass{code: code, sh: sh, w: w, slots: slots, regexps: regexps, prev: js.ErrorToken}
	if !l.run() {
		return nil
	}
	// A shorthand {city} or const {city} = r names a key the tokens
	// number as a variable: the names, in the walk's order, keep {city}
	// and {town} apart.
	for _, n := range w.shorthands {
		l.token('S', n)
	}
	sum := sha256.Sum256(l.fp.Bytes())
	sh.Fingerprint = hex.EncodeToString(sum[:8])
	return sh
}

// slot is where a liftable literal stands in the code.
type slot struct {
	off, end int
	lit      lifted
}

// places returns where each literal the walk lifted stands in the code,
// in the order of the code, and where the regular expressions start;
// false when a literal is no token of the code (the parser built it).
func (w *shapeWalker) places() ([]slot, []int, bool) {
	slots := make([]slot, 0, len(w.lits))
	for _, l := range w.lits {
		raw := l.raw()
		off := w.parsed.Offset(raw)
		if off < 0 {
			return nil, nil, false // a token the parser built: nothing to cut out
		}
		slots = append(slots, slot{off: off, end: off + len(raw), lit: l})
	}
	slices.SortFunc(slots, func(a, b slot) int { return a.off - b.off })
	var regexps []int
	for _, raw := range w.regexps {
		if off := w.parsed.Offset(raw); off >= 0 {
			regexps = append(regexps, off)
		}
	}
	return slots, regexps, true
}

// lexPass is Read's one pass of the lexer over the code: the
// fingerprint's tokens (fp), and the template's pieces, cut at the
// literals (slots, the next one to meet at next), comments and strings.
type lexPass struct {
	code    string
	sh      *Shape
	w       *shapeWalker
	slots   []slot
	regexps []int // where the parser read regular expressions: the lexer cannot tell
	fp      bytes.Buffer
	canon   []string // locals in the order of first use: their number is their index
	next    int
	off     int // where the token being read starts
	start   int // where the piece being built starts
	prev    js.TokenType
}

// run reads every token of the code, and reports whether the lexer read
// it as the parser did (it does not guess where they disagree).
func (l *lexPass) run() bool {
	code := l.code
	l.fp.Grow(2*len(code) + len(fingerprintVersion))
	l.fp.WriteString(fingerprintVersion)
	// The lexer wants its input NUL-terminated: room for it saves a copy.
	src := make([]byte, len(code), len(code)+1)
	copy(src, code)
	lex := js.NewLexer(parse.NewInputBytes(src))
	for {
		tt, data := lex.Next()
		if tt == js.ErrorToken {
			if !errors.Is(lex.Err(), io.EOF) {
				return false
			}
			break
		}
		if (tt == js.DivToken || tt == js.DivEqToken) && slices.Contains(l.regexps, l.off) {
			tt, data = lex.RegExp()
			if tt == js.ErrorToken {
				return false
			}
		}
		end := l.off + len(data)
		if !l.read(tt, end) {
			return false
		}
		if tt != js.WhitespaceToken && tt != js.LineTerminatorToken && tt != js.CommentToken && tt != js.CommentLineTerminatorToken {
			l.prev = tt
		}
		l.off = end
	}
	if l.next != len(l.slots) || l.off != len(code) {
		return false
	}
	if l.start < l.off {
		l.sh.pieces = append(l.sh.pieces, piece{pieceCode, code[l.start:l.off]})
	}
	if l.sh.pieces == nil {
		l.sh.pieces = []piece{}
	}
	return true
}

// read adds the token tt, code[l.off:end], to the fingerprint and the
// template; false when the lexer and the parser disagree on a literal.
func (l *lexPass) read(tt js.TokenType, end int) bool {
	text := l.code[l.off:end]
	switch {
	case l.next < len(l.slots) && l.off == l.slots[l.next].off:
		s := l.slots[l.next]
		if end != s.end {
			return false // the lexer and the parser disagree: do not guess
		}
		l.cut(pieceHole, end)
		l.sh.names = append(l.sh.names, s.lit.hint)
		l.sh.Literals = append(l.sh.Literals, literalOf(s.lit, l.sh.known))
		l.token('L', s.lit.kind())
		l.next++
	case tt == js.WhitespaceToken:
	case tt == js.LineTerminatorToken || tt == js.CommentLineTerminatorToken:
		if tt == js.CommentLineTerminatorToken {
			l.cut(pieceComment, end)
		}
		// A line break ends a return, throw, break or continue
		// (automatic semicolon insertion): it changes the meaning.
		switch l.prev {
		case js.ReturnToken, js.ThrowToken, js.BreakToken, js.ContinueToken, js.YieldToken:
			l.token('N', "")
		}
	case tt == js.CommentToken:
		l.cut(pieceComment, end)
	case tt == js.IdentifierToken:
		switch {
		case l.prev == js.DotToken || l.prev == js.OptChainToken:
			l.token('P', text)
		case l.w.isKey(l.off):
			l.token('K', text)
		case l.w.locals[text]:
			l.token('V', l.local(text))
		default:
			l.token('G', text)
		}
	default:
		if tt == js.StringToken || tt == js.TemplateToken || tt == js.TemplateStartToken || tt == js.TemplateMiddleToken ||
			tt == js.TemplateEndToken || tt == js.RegExpToken {
			l.cut(pieceText, end)
		}
		l.token('T', text)
	}
	return true
}

// token adds a token of a kind to the fingerprint.
func (l *lexPass) token(kind byte, text string) {
	l.fp.WriteByte(kind)
	l.fp.WriteString(text)
	l.fp.WriteByte(0)
}

// local is the number of the local variable name, in the order of first
// use.
func (l *lexPass) local(name string) string {
	i := slices.Index(l.canon, name)
	if i < 0 {
		i = len(l.canon)
		l.canon = append(l.canon, name)
	}
	return strconv.Itoa(i)
}

// cut ends the template's piece of code before the token being read and
// adds the token, up to end, as a piece of a kind.
func (l *lexPass) cut(kind byte, end int) {
	if l.start < l.off {
		l.sh.pieces = append(l.sh.pieces, piece{pieceCode, l.code[l.start:l.off]})
	}
	l.sh.pieces = append(l.sh.pieces, piece{kind, l.code[l.off:end]})
	l.start = end
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
	case LooksSecret(value, known) || raw != value && LooksSecret(raw, known) || out.Kind == trace.LiteralNumber && digits(value) > maxNumberDigits:
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

// inputArgs is the variable through which body reads the caller's input:
// the global args (the wrapper has no parameters; the sandbox defines
// globalThis.args), unless the script's own top level declares a name
// args — then what it reads as args is its own, and nil.
func inputArgs(ast *js.AST, body *js.FuncDecl) *js.Var {
	for _, v := range body.Body.Scope.Declared {
		if string(v.Data) == "args" {
			return nil
		}
	}
	for _, v := range ast.Scope.Undeclared {
		if string(v.Data) == "args" {
			return root(v)
		}
	}
	return nil
}

// shapeWalker collects what Read needs in one walk of the tree.
type shapeWalker struct {
	parsed     *analysis.Parsed
	args       *js.Var // the global args the code reads its input through
	lits       []lifted
	regexps    [][]byte
	hints      []hinted          // the name each literal is given by where it stands
	structural []*js.LiteralExpr // literals that name a place (an index): not lifted
	locals     map[string]bool   // names the code declares
	keys       []int             // offsets of property names and object keys (sorted before the lexer's pass)
	shorthands []string          // the names of shorthand properties ({city}), in the walk's order
	argsKeys   map[string]bool
	argsWhole  bool
}

// Enter implements js.IVisitor: each kind of node the shape reads has a
// method of its own, which returns the visitor for its children (nil when
// it walked them itself, or they hold nothing the shape reads).
func (w *shapeWalker) Enter(n js.INode) js.IVisitor {
	switch n := n.(type) {
	case *js.Comment:
		return nil
	case *js.Var:
		w.variable(n)
		return nil
	case *js.PropertyName:
		w.propertyName(n)
		return nil
	case *js.BindingObjectItem:
		if v, ok := n.Value.Binding.(*js.Var); ok && n.Key != nil && n.Key.IsIdent(v.Data) {
			w.shorthand(n.Key)
		}
		return w
	case *js.DotExpr:
		w.dot(n)
		return nil
	case *js.IndexExpr:
		return w.index(n)
	case *js.ObjectExpr:
		w.object(n)
		return w
	case *js.VarDecl:
		w.varDecl(n)
		return nil
	case *js.BinaryExpr:
		if n.Op == js.EqToken {
			if v, ok := n.X.(*js.Var); ok {
				w.hint(n.Y, string(v.Data))
			}
		}
		return w
	case *js.CallExpr:
		w.call(n)
		return w
	case *js.LiteralExpr:
		w.literal(n)
		return nil
	case *js.TemplateExpr:
		if n.Tag == nil && len(n.List) == 0 {
			w.lits = append(w.lits, lifted{tmpl: n, hint: w.hintOf(n)})
			return nil
		}
		return w
	}
	return w
}

// variable notes a use of a variable: args used as a value, or a name the
// code declares.
func (w *shapeWalker) variable(n *js.Var) {
	r := root(n)
	switch {
	case r == w.args:
		// args used as a value, not through one of its keys.
		w.argsWhole = true
	case r.Decl != js.NoDecl && !w.locals[string(r.Data)]: // a lookup does not allocate
		w.locals[string(r.Data)] = true
	}
}

// propertyName notes where a property's name stands: it is the shape of
// the object, not a value.
func (w *shapeWalker) propertyName(n *js.PropertyName) {
	if n.Computed != nil {
		js.Walk(w, n.Computed)
	} else if off := w.parsed.Offset(n.Literal.Data); off >= 0 {
		w.keys = append(w.keys, off)
	}
}

// dot reads a member access: args.key is a key of the input; otherwise
// only the object is walked, the member being a name.
func (w *shapeWalker) dot(n *js.DotExpr) {
	if v, ok := n.X.(*js.Var); ok && w.args != nil && root(v) == w.args {
		if lit, ok := n.Y.(js.LiteralExpr); ok {
			w.argsKeys[string(lit.Data)] = true
		}
		return
	}
	js.Walk(w, n.X) // n.Y is a name
}

// index reads obj["key"] and list[0]: they name a place, as a dot does,
// so the literal is not lifted; args["key"] is a key of the input.
func (w *shapeWalker) index(n *js.IndexExpr) js.IVisitor {
	if lit, ok := n.Y.(*js.LiteralExpr); ok {
		w.structural = append(w.structural, lit)
		if v, ok := n.X.(*js.Var); ok && w.args != nil && root(v) == w.args && lit.TokenType == js.StringToken {
			if name, ok := analysis.StringValue(lit.Data); ok {
				w.argsKeys[name] = true
			}
			return nil
		}
	}
	return w
}

// object names each literal value after its key, and notes shorthand
// properties ({city}).
func (w *shapeWalker) object(n *js.ObjectExpr) {
	for i := range n.List {
		p := &n.List[i]
		if p.Name == nil || p.Name.IsComputed() {
			continue
		}
		if v, ok := p.Value.(*js.Var); ok && p.Name.IsIdent(v.Data) {
			w.shorthand(p.Name)
		}
		w.hint(p.Value, string(p.Name.Literal.Data))
	}
}

// varDecl names each initializer after its variable, and reads the keys
// of args a pattern takes (const {a, b} = args).
func (w *shapeWalker) varDecl(n *js.VarDecl) {
	for i := range n.List {
		e := &n.List[i]
		if v, ok := e.Binding.(*js.Var); ok {
			w.hint(e.Default, string(v.Data))
		}
		if bo, ok := e.Binding.(*js.BindingObject); ok && w.args != nil {
			if v, ok := e.Default.(*js.Var); ok && root(v) == w.args {
				w.argsPattern(bo)
				js.Walk(w, e.Binding)
				continue
			}
		}
		js.Walk(w, e)
	}
}

// argsPattern reads the keys of args the pattern bo takes; a rest element
// takes args as a whole.
func (w *shapeWalker) argsPattern(bo *js.BindingObject) {
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
}

// call names the literals passed to f("x") after what is called.
func (w *shapeWalker) call(n *js.CallExpr) {
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
}

// literal lifts a string or number literal (not one that names a place),
// and notes where a regular expression is, which the lexer cannot tell.
func (w *shapeWalker) literal(n *js.LiteralExpr) {
	switch {
	case slices.Contains(w.structural, n):
	case n.TokenType == js.RegExpToken:
		w.regexps = append(w.regexps, n.Data)
	case n.TokenType == js.StringToken, isNumber(n):
		w.lits = append(w.lits, lifted{expr: n, hint: w.hintOf(n)})
	}
}

// Exit implements js.IVisitor.
func (w *shapeWalker) Exit(js.INode) {}

// hinted is a literal and the name where it stands gives it.
type hinted struct {
	node js.IExpr
	name string
}

func (w *shapeWalker) hintOf(e js.IExpr) string {
	for _, h := range w.hints {
		if h.node == e {
			return h.name
		}
	}
	return ""
}

func (w *shapeWalker) isKey(off int) bool {
	_, found := slices.BinarySearch(w.keys, off)
	return found
}

// shorthand notes a property name that is also its value's variable
// ({city}): the tokens number the variable, the fingerprint keeps the
// name (the parser keeps no position for it).
func (w *shapeWalker) shorthand(n *js.PropertyName) {
	if w.parsed.Offset(n.Literal.Data) >= 0 {
		return // {a: a}, written out: its key is a token of the code
	}
	w.shorthands = append(w.shorthands, string(n.Literal.Data))
}

// hint names the literal e (if it is one) after where it stands: the
// first name given wins (a property's key over the call it is passed to).
func (w *shapeWalker) hint(e js.IExpr, name string) {
	switch l := e.(type) {
	case *js.LiteralExpr, *js.TemplateExpr:
		for _, h := range w.hints {
			if h.node == e {
				return
			}
		}
		w.hints = append(w.hints, hinted{node: e, name: identifier(name)})
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
