package prescan

import (
	"strings"

	"github.com/tdewolff/parse/v2/js"
)

// wordInfo is what the scan knows of a word wherever it stands. A word
// not in words is a name: an operand, with none of these properties.
type wordInfo struct {
	// act is what the word does where it is read as a keyword (nil: it
	// is an operand there).
	act func(*reading, wordAt)
	// notName: no declaration can name it, reserved words (in sloppy
	// code too) and let (`const enum E`, where esbuild reads an enum).
	// await and yield are not among them: esbuild declares them all the
	// same.
	notName bool
	// reserved: it can never be a label.
	reserved bool
	// continues: it may go on with the statement before it across a line
	// break or a statement's end (an operator, else, catch, finally; and
	// while, after a do).
	continues bool
	// asi: a line break after it may end the statement.
	asi bool
	// member: before a property's or class member's name, it leaves the
	// name to follow: get, set, or another modifier.
	member uint8
}

// wordInfo.member values; accGet and accSet are also what reading.syn's
// accessor holds after them.
const (
	accGet    = 1
	accSet    = 2
	accKeep   = 3 // a modifier between: the accessor before it holds
	accessors = "get set async static accessor declare readonly public private protected abstract override"
)

// accessorPrefix names a private member by its accessor: a getter and a
// setter may share a name.
var accessorPrefix = [...]string{"", "get ", "set "}

// wordAt is a word where it is read as a keyword: whether statements are
// read in its frame, whether one starts at it, whether an operand ends
// before it, and what the token before it cued.
type wordAt struct {
	stmt, atStart, wasOperand bool
	cue                       cues
	w                         string
}

// words is the table of keywords and contextual words, built once.
var words = func() map[string]wordInfo {
	m := map[string]wordInfo{}
	with := func(list string, f func(*wordInfo)) {
		for _, w := range strings.Fields(list) {
			info := m[w]
			f(&info)
			m[w] = info
		}
	}
	act := func(list string, a func(*reading, wordAt)) { with(list, func(i *wordInfo) { i.act = a }) }
	act("while", (*reading).while)
	act("if for with", (*reading).statementHead)
	act("switch catch", (*reading).bodyHead)
	act("do", (*reading).do)
	act("else", (*reading).elseWord)
	act("try finally", func(r *reading, _ wordAt) { r.stmtBegin() })
	act("typeof void delete new keyof readonly unique infer", (*reading).prefixWord)
	act("await", (*reading).await)
	act("yield extends", (*reading).yieldWord)
	act("return throw", func(r *reading, _ wordAt) { r.exprStart() })
	act("case default", (*reading).caseWord)
	act("in instanceof of", (*reading).inWord)
	act("as satisfies", (*reading).asWord)
	act("var const", (*reading).declWord)
	act("let", (*reading).let)
	act("function class", (*reading).functionWord)
	act("enum interface", (*reading).listWord)
	act("async declare export", (*reading).modifierWord)
	with("let break case catch class const continue debugger default delete do else enum export extends false finally "+
		"for function if import in instanceof new null return super switch this throw true try typeof var void while with",
		func(i *wordInfo) { i.notName = true })
	with("if while for with switch catch do else try finally typeof void delete new return throw case default in "+
		"instanceof var const function class extends enum break continue debugger import export",
		func(i *wordInfo) { i.reserved = true })
	with("else in instanceof of as satisfies extends implements catch finally is asserts keyof infer readonly unique",
		func(i *wordInfo) { i.continues = true })
	with("return break continue yield await of", func(i *wordInfo) { i.asi = true })
	with(accessors, func(i *wordInfo) { i.member = accKeep })
	with("get", func(i *wordInfo) { i.member = accGet })
	with("set", func(i *wordInfo) { i.member = accSet })
	return m
}()

// The words table by the lexer's token types (it looks every name up in
// its own table already), and the words it reads as plain names
// (TypeScript's), with the first letters and lengths that may be one of
// them: most names are looked up nowhere.
var (
	reservedWords, contextualWords [64]wordInfo
	plainWords                     = map[string]wordInfo{}
	plainFirst                     [256]bool
	plainLengths                   uint64
)

func init() {
	for w, info := range words {
		switch tt, ok := js.Keywords[w]; {
		case ok && js.IsReservedWord(tt):
			reservedWords[tt-js.ReservedToken] = info
		case ok:
			contextualWords[tt-js.IdentifierToken] = info
		default:
			plainWords[w] = info
			plainFirst[w[0]] = true
			plainLengths |= 1 << len(w)
		}
	}
}

// lookup returns what the table holds of the word w, which the lexer read
// as tt.
func lookup(tt js.TokenType, w string) wordInfo {
	switch {
	case js.IsReservedWord(tt):
		return reservedWords[tt-js.ReservedToken]
	case tt != js.IdentifierToken && js.IsIdentifier(tt):
		return contextualWords[tt-js.IdentifierToken]
	case plainFirst[w[0]] && len(w) < 64 && plainLengths&(1<<len(w)) != 0:
		return plainWords[w]
	}
	return wordInfo{}
}

// wordToken reads a name or keyword, and what it cues beyond the word: a
// call's item may be a parameter's name, a function's name its parameters.
func (r *reading) wordToken(t token, cue cues) {
	w := r.code[t.start:t.end]
	info := lookup(t.tt, w)
	r.word(w, t.start, info, cue)
	if cue.item && r.cur.kind == kParen && r.cur.flags&fCall != 0 && !info.notName && w != "this" {
		r.param(w, t.start)
	}
	if cue.params && r.syn.operand {
		r.cue.params = true // the function's name: its parameters follow
	}
	if info.asi {
		r.cue.asi = !cue.property
	}
}

// word reads the word w at offset at: a property's name, a declared name,
// a member's name, or a keyword (info.act) where one may stand.
func (r *reading) word(w string, at int, info wordInfo, cue cues) {
	if cue.property {
		r.operandEnd()
		return
	}
	continues := info.continues || w == "while" && r.cur.dos > 0
	if r.declared(w, at, info, cue, continues) {
		return
	}
	if !continues && (r.syn.operand && cue.newline || cue.ended) {
		// A line break after an operand before a word that cannot go on
		// with it, or the end of a statement: a new statement starts.
		r.endStatement()
		r.syn.stmtStart = true
	}
	x := wordAt{stmt: r.stmtContext(), atStart: r.syn.stmtStart, wasOperand: r.syn.operand, cue: cue, w: w}
	acc := r.syn.accessor
	r.syn.accessor = 0
	inClass := r.cur.flags&fClass != 0
	if cue.keyNext || inClass && x.atStart && !continues {
		r.memberName(w, at, acc, inClass, info.member)
		return
	}
	if inClass && w[0] == '#' && x.wasOperand {
		// A private member after a decorator (`@d #a`); one where an
		// operand starts is a brand check (`#a in o`), no declaration.
		r.declare(r.cur.id, accessorPrefix[acc]+w, at)
	}
	if info.act != nil {
		info.act(r, x)
	} else {
		r.operandEnd()
	}
	// Any word that may be an identifier may be a label (`interface: T:
	// T: …` is a chain of labeled statements in sloppy code).
	r.syn.label = x.atStart && !info.reserved
	if inClass && info.member != 0 {
		r.syn.accessor = accessorAfter(info.member, acc)
	}
}

// accessorAfter is the accessor after a member's modifier m, acc the one
// before it.
func accessorAfter(m, acc uint8) uint8 {
	if m == accKeep {
		return acc
	}
	return m
}

// declared reads w where the previous token cued a declaration's name,
// and reports whether that is all there is to read of it.
func (r *reading) declared(w string, at int, info wordInfo, cue cues, continues bool) bool {
	switch {
	case cue.bindNext && r.cur.flags&fPattern != 0 && r.cur.kind == kBrace:
		// A key, unless no : follows.
		r.syn.pending = decl{set: true, hoist: r.cur.flags&fVar != 0, scope: r.declScope(), name: w, at: at}
		r.operandEnd()
		return true
	case cue.bindNext && !continues && !info.notName:
		r.declareKind(r.declScope(), w, at, r.cur.flags&fVar != 0)
		if w != "await" && w != "yield" {
			r.operandEnd()
			return true
		}
		// esbuild declares them (and says they cannot be names), which
		// counts; the operator reading is the larger one.
	case cue.funcName && !info.notName:
		r.record(r.cur.id, w, at, false) // in its block, not beyond
		r.operandEnd()
		r.cue.declName = true
		return true
	}
	return false
}

// memberName reads w as a property's name in an object literal or a
// TypeScript member list, or a class member's name: no keyword is one
// there (test262's `{ get const() {}, set class(v) {} }`). A modifier
// before the name (member: get, set, async, static…) leaves the name to
// follow. acc is the accessor a get or set before it made.
func (r *reading) memberName(w string, at int, acc uint8, inClass bool, member uint8) {
	switch {
	case inClass && w[0] == '#':
		// A private member of this class body (a getter and a setter may
		// share a name).
		r.declare(r.cur.id, accessorPrefix[acc]+w, at)
	case !inClass && w == "__proto__" && r.objectLiteral():
		r.syn.pending = decl{set: true, keyOnly: true, scope: r.cur.id, name: w, at: at}
	}
	r.operandEnd()
	if member != 0 {
		r.cue.keyNext = true
		if inClass {
			r.syn.accessor = accessorAfter(member, acc)
		}
	}
}

// objectLiteral reports whether the innermost frame is an object literal
// (or a TypeScript member list), where a `__proto__:` key may not repeat.
func (r *reading) objectLiteral() bool {
	return r.cur.kind == kBrace && r.cur.flags&(fList|fPattern|fEnum) == fList
}

// while is a loop's head, or the tail of a do statement.
func (r *reading) while(x wordAt) {
	if r.cur.dos > 0 {
		r.cur.dos--
	} else if x.stmt {
		r.cur.stmt++
		r.check()
		r.cue.indent = true
	}
	r.stmtBegin()
	r.cue.head = true
}

// statementHead is if, for or with: a statement nested in the one it
// starts, its body indented.
func (r *reading) statementHead(x wordAt) {
	if x.stmt {
		r.cur.stmt++
		r.check()
		r.cue.indent = true
	}
	r.stmtBegin()
	r.cue.head = true
}

// bodyHead is switch or catch: a head, then a block.
func (r *reading) bodyHead(wordAt) {
	r.stmtBegin()
	r.cue.head = true
}

// do nests its body, which its while ends.
func (r *reading) do(x wordAt) {
	if x.stmt {
		r.cur.stmt++
		r.cur.dos++
		r.check()
		r.cue.bodyNext = true
	}
	r.stmtBegin()
}

// elseWord ends the body of the if before: esbuild prints `else` at the
// if's indentation.
func (r *reading) elseWord(wordAt) {
	if r.cur.heads > 0 {
		r.cur.heads--
	}
	r.stmtBegin()
	r.cue.bodyNext = true
}

// prefixWord is a prefix operator: typeof, void, delete, new, and
// TypeScript's type operators.
func (r *reading) prefixWord(wordAt) {
	r.cur.unary++
	r.check()
	r.exprStart()
}

// await is an operator in async code, an identifier elsewhere.
func (r *reading) await(x wordAt) {
	r.cur.unary++
	r.check()
	r.exprStart()
	r.syn.slash = slashEither
	r.cue.head, r.cue.indent = x.cue.head, x.cue.indent // for await (…)
}

// yieldWord is yield or extends: right-associative.
func (r *reading) yieldWord(x wordAt) {
	r.cur.right++
	r.check()
	r.exprStart()
	if x.w == "yield" {
		r.syn.slash = slashEither
	}
}

// caseWord is case or default: a colon ends it.
func (r *reading) caseWord(x wordAt) {
	if x.stmt {
		r.cur.flags |= fCase
	}
	r.exprStart()
}

// inWord is in, instanceof or of: binary operators that end a
// declaration list's names.
func (r *reading) inWord(x wordAt) {
	r.cur.flags &^= fDecl | fLex | fVar
	r.binary(true)
	if x.w == "of" {
		r.syn.slash = slashEither // `of` is also an identifier
	}
}

// asWord is as or satisfies: a type follows.
func (r *reading) asWord(wordAt) {
	r.castOfLabel()
	r.binary(false)
	r.syn.slash = slashDivide
}

// declWord is var or const: a declaration list.
func (r *reading) declWord(x wordAt) {
	r.cur.flags |= fDecl
	r.exprStart()
	if x.w == "const" {
		r.cur.flags |= fLex
	} else {
		r.cur.flags |= fVar
	}
	r.cue.bindNext = true
}

// let is a declaration where a statement (or a for head) starts; an
// identifier elsewhere (`x = let[0]`, sloppy code).
func (r *reading) let(x wordAt) {
	r.operandEnd() // `let` is also an identifier
	r.cue.declNext = x.atStart || x.cue.headFirst
}

// functionWord is function or class: a declaration's name (also after
// decorators, async, declare or export) or an expression's, then a body.
func (r *reading) functionWord(x wordAt) {
	r.exprStart()
	r.syn.brace = braceBlock
	class := x.w == "class"
	r.cue.bindNext = class && (x.atStart || x.wasOperand && x.stmt)
	r.cue.funcName = !class && (x.atStart || x.cue.modifier)
	r.cue.params = !class
	r.syn.classNext = class
	r.syn.classDecl = r.cue.bindNext
}

// listWord is enum or interface: a list of members follows.
func (r *reading) listWord(x wordAt) {
	r.operandEnd()
	r.syn.list, r.syn.enumNext = true, x.w == "enum"
}

// modifierWord is async, declare or export: a function after it at a
// statement's start is declared (`export declare async function f`).
func (r *reading) modifierWord(x wordAt) {
	r.operandEnd()
	r.cue.modifier = x.atStart || x.cue.modifier
}
