package prescan

import (
	"math/rand/v2"
	"strings"

	"github.com/tdewolff/parse/v2"
	"github.com/tdewolff/parse/v2/js"
)

// refusal says which bound a scan crossed.
type refusal uint8

const (
	refuseNone refusal = iota
	refuseDepth
	refuseScopes
	refuseScopeCount
	refuseAmbiguous
	refuseComments
	refuseFolds
)

// result is what a scan found: the refusal and its byte offset, the
// names declared again, and the deepest nesting seen (for tests and
// measurement).
type result struct {
	refused refusal
	at      int
	// repeats counts names declared again in their scope; repeatAt and
	// repeatName are the first of them.
	repeats    int
	repeatAt   int
	repeatName string
	// paramScan is how far back esbuild would measure, in all, the names
	// argument and parameter lists repeat; paramAt is the first repeat.
	paramScan int
	paramAt   int
	depth     int
	scopes    int
	opened    int // blocks, function bodies and arrows, in the reading that read most
	unguarded int // errors the lexer reported, which the scan keeps it from: for tests
}

// Frame kinds. Angles and ternaries are tentative: a `<` may be a
// comparison and a `?` an optional mark, so a `;`, a closing bracket or an
// operator that cannot appear in a type drops them; they are counted while
// they are open, which is the larger reading.
const (
	kTop     uint8 = iota // outside the wrapper, where code that closed it goes on
	kParen                // ( … )
	kBracket              // [ … ]
	kBrace                // { … }
	kSubst                // ${ … } of a template literal
	kAngle                // < … > that may be type arguments
	kTernary              // ? … : of a conditional
)

// Frame flags.
const (
	fHead     = 1 << iota // a paren after if/while/for/with/switch/catch: a statement follows it
	fBlock                // a brace that opens a block or a function or class body (a scope)
	fStmt                 // a brace that is a statement's body: its close ends that statement
	fList                 // commas separate items (arguments, elements, members), not operands
	fDecl                 // a let/const/var list is pending: its commas separate declarations
	fCase                 // a case or default is pending its colon
	fPrefix               // an angle where an operand starts: a type assertion or generic arrow
	fCall                 // a paren after an operand: arguments, or a method's parameters
	fIndent               // a head paren whose statement indents its body (if, for, while, with)
	fLex                  // the pending declaration list is let or const: its names may not repeat
	fPattern              // a destructuring pattern of a let or const declaration
	fEnum                 // an enum's members: their names may not repeat
	fClass                // a class body: its private names may not repeat
	fLabel                // an angle after a word at a statement's start: `a<T>:` is a label in TypeScript
	fVar                  // the pending declaration list is var (or this is a pattern of one): its names belong to the function
	fFunc                 // a brace that is a function's body (or the wrapper's): where var names stop
	fParams               // a paren after function (its *, its name): its parameters, a body follows
	fFuncDecl             // a function or class declaration's body (or the function's parameters): its } ends a statement
)

// What a `/` reads as after the previous token.
const (
	slashRegexp uint8 = iota
	slashDivide
	slashEither // unknown: read both ways
)

// What a `{` opens after the previous token.
const (
	braceObject uint8 = iota
	braceBlock        // a function or class body, or a block
	braceStmt         // a statement's body or a block statement
)

// level is one open frame with the chains counted inside it.
type level struct {
	kind  uint8
	flags uint32
	// id names the frame as a scope of declarations; scope is, in a
	// pattern, the id of the frame its names are declared in.
	id, scope uint32
	// base is the depth of the frames around this one, itself included.
	base int32
	// unary counts prefix operators and member, call and index links since
	// the last binary operator; right counts right-associative links
	// (assignments, arrows, **, conditional alternates, yield, spread,
	// extends) since the last comma; stmt counts statement heads (if,
	// while, for, with, do, labels) since the last statement's end; seq
	// counts comma operators.
	unary, right, stmt, seq int32
	// strs is the length of the run of string and template literals (or
	// groups of them) joined by + that ends at the last operand, which
	// esbuild folds into one new string at each +; plus says a + follows
	// it. tmpl is where the template literal being read started.
	strs, tmpl int32
	plus       bool
	// dos counts do statements waiting for their while; heads counts the
	// statement heads that indent their body (all but the if of an else
	// if), which esbuild prints nested like blocks.
	dos, heads int32
	// scopeBase is the scope nesting around this frame, itself included;
	// arrows counts arrow functions pending in it.
	scopeBase, arrows int32
	// hash identifies the frames below this one, so two readings are
	// compared in constant time before they are merged.
	hash uint64
}

func (l *level) depth() int32  { return l.base + l.unary + l.right + l.stmt + l.seq }
func (l *level) scopes() int32 { return l.scopeBase + l.arrows + l.heads }

// reading is one way of reading the code: a position, the open frames and
// what the tokens read so far allow next.
type reading struct {
	s     *scanner
	code  string
	i     int     // where the next token starts
	stack []level // the frames around cur
	cur   level

	syn syntax // what the tokens read so far allow next
	cue cues   // what the previous token tells the next one only

	dead bool // this reading met what no parser reads: a syntax error

	// The reading's own lexer over the scanner's input (see lex.go), and
	// where the last number it read ends (a name the lexer refuses right
	// after it is part of it).
	in     *parse.Input
	lex    js.Lexer
	numEnd int

	// deepest seen, and the scopes opened
	maxDepth, maxScopes int32
	opened              int
	// lineAt is where the current line starts; commentScan adds up, for
	// each block comment, how far that is behind it.
	lineAt      int
	commentScan int
	// folds adds up the bytes esbuild copies folding literals joined by +.
	folds   int
	lim     Limits
	refused refusal
	at      int
	tok     int // where the token being read starts
}

// syntax is what the tokens read so far allow next, until a token
// changes it.
type syntax struct {
	template  bool  // inside the text of a template literal
	operand   bool  // it ended an operand: ( [ ` continue it, + - are binary
	slash     uint8 // how a / reads here
	brace     uint8 // what a { opens here
	stmtStart bool  // a statement starts here
	label     bool  // it was a plain word at a statement's start: a : makes it a label
	// castLabel is the frame (its id + 1) where such a word went on with
	// TypeScript's as, satisfies or !: esbuild drops the casts, so a : in
	// that frame still makes the word a label (`a as T: b as T: …`).
	castLabel uint32
	list      bool  // it was enum or interface: the next { is a list of members
	enumNext  bool  // that list is an enum's
	classNext bool  // it was class (or its name, heritage): the next { is its body
	classDecl bool  // and that class is declared: its } ends a statement
	accessor  uint8 // it was get (1) or set (2)
	pending   decl  // the name just read, declared unless (or only if) a : follows
}

// cues are what the previous token (and the blanks after it) tell the
// next token only: each token takes them and leaves none.
type cues struct {
	newline   bool // a line terminator since it
	lineStart bool // nothing but blanks and comments since the last line terminator
	property  bool // it was . or ?.: a word here is a property name
	ended     bool // it ended a statement: an else continues the if, a word starts anew
	head      bool // it was if/while/for/with/switch/catch: the next ( is a head
	asi       bool // it was return, break, continue, yield, await or of: a line break may end the statement
	declNext  bool // it was let: a binding here makes a declaration list
	callClose bool // it closed what looked like a call's arguments
	castNext  bool // it closed type arguments or a comparison: a < here may start a type assertion
	bindNext  bool // a word (or a pattern) here is a name a let, const or class declares
	keyNext   bool // a word or string here is a property's or class member's name (or a modifier before it)
	headFirst bool // it opened a statement head's paren: a let here declares (for (let …))
	fnBody    bool // it was => or a function's parameters: a { here is a function's body
	params    bool // it was function, its * or its name: a ( here opens its parameters
	item      bool // it opened a call's parens or separated its items: a word here may be a parameter's name
	funcName  bool // it was function (or its *) at a statement: a word here is the function's name
	modifier  bool // it was async, declare or export at a statement's start: a function here is declared
	declName  bool // it named a function declaration: its parameters follow
	declBody  bool // it closed a function declaration's parameters: its body follows
	indent    bool // it was if/for/while/with: the statement indents its body
	bodyNext  bool // it ended the head of a statement that indents its body
}

// sameAs reports whether two readings' cues tell the next token the
// same. asi is left out, as the scan has always left it out of merging:
// comparing it would keep apart readings the bound on readings counts,
// and refuse as ambiguous code that passes today.
func (c cues) sameAs(d cues) bool {
	c.asi = d.asi
	return c == d
}

// decl is a declaration waiting for the next token to say whether it is
// one: a name in an object pattern is a key if a : follows, and an
// object literal's __proto__ only is.
type decl struct {
	set, keyOnly bool
	hoist        bool // a var's: declared up to its function
	scope        uint32
	name         string
	at           int
}

// declKey is a name in a scope; declSeen counts its declarations (at is
// the last one's offset, so two readings of one declaration count once).
type declKey struct {
	scope uint32
	name  string
}

// lex counts the let, const and class declarations (and other names that
// may not repeat), vars the var and function ones, which may repeat among
// themselves.
type declSeen struct{ lex, vars, at int32 }

// maxRepeats is how many names declared again in their scope the code
// may hold and still be read by esbuild. Each is an error in every parser
// (a SyntaxError), but esbuild builds each error's note by scanning back to
// the first declaration: many of them cost it quadratic time (`let a;`
// 36,000 times, 256 KiB: about 25 s of CPU). The other parsers stop at the
// first, so past the bound the code only never reaches esbuild (see
// Report.KeepFromEsbuild).
const maxRepeats = 8

// maxParamScan bounds how far back esbuild measures, in all, from the
// names argument or parameter lists repeat to their first (see param):
// it spends about 25 ns a byte on them (a list of 4,000 repeats, 24 MB
// measured, took 0.6 s), so 4 MiB is about 0.1 s.
const maxParamScan = 4 << 20

// maxCommentScan bounds how far esbuild scans back, in all, from the
// block comments in the code to the start of their lines: it does so for
// every comment before an expression, so many comments on one long line
// cost it quadratic time (`/*c*/a+` 30,000 times on one line, 210 KB: 8 s
// of CPU). 32 MiB is about 80 ms of its scanning.
const maxCommentScan = 32 << 20

// maxFolds bounds the string bytes esbuild copies folding `'a' + 'b'`
// into `'ab'`, which it does for every + between literals whatever the
// options, each fold a new copy: 60,000 one-letter strings (240 KB) cost it
// 4 s and 3.6 GB. A template literal's bytes count tmplWeight times (2,000
// `a${1}` cost 146 MB). At the bound esbuild spends about 0.1 s and 130 MB
// (measured, strings and templates alike); 1,500 lines of 50-character
// strings joined by + are inside it.
const (
	maxFolds   = 64 << 20
	tmplWeight = 8
)

// scanner holds the readings of one scan.
type scanner struct {
	work int // bytes read by all readings
	// nextID numbers the frames of every reading; decls are the let,
	// const and class names declared, by scope; repeats counts those
	// declared again (the first at repeatAt).
	nextID     uint32
	decls      map[declKey]declSeen
	repeats    int
	repeatAt   int
	repeatName string
	// params are the names each call's items hold (by the call's frame):
	// where each was first read, and last. paramScan adds up, for every
	// name an item repeats, how far back its first is; paramAt is where
	// the first repeat is.
	params    map[declKey][2]int32
	paramScan int
	paramAt   int
	readings  []*reading
	free      []*reading // readings that ended, for their stacks' reuse
	// hashing is on while there is more than one reading: each level's
	// hash then identifies the frames below it, so readings that meet
	// again are compared in constant time. seed makes the hashes
	// unpredictable, so no input can be built to collide them.
	hashing bool
	seed    uint64
	// src is the code as the lexer reads it (see source), text the same
	// as a string; every reading's input is a copy of src, at the
	// reading's own offset.
	src       parse.Input
	text      string
	unguarded int // errors the lexer reported all the same (see next)
	// lastClose is where the last `*/` is (-1: none), once a block
	// comment asked (closes).
	lastClose int
	closes    bool
}

// unclosed reports whether the block comment whose `/*` is at i never
// ends: no `*/` after it. One search serves the whole scan.
func (s *scanner) unclosed(i int) bool {
	if !s.closes {
		s.lastClose, s.closes = strings.LastIndex(s.text, "*/"), true
	}
	return s.lastClose < i+2
}

// scan reads code with every reading the ambiguous slashes allow, in step,
// and stops at the first bound crossed.
func scan(code string, lim Limits) result {
	s := &scanner{seed: rand.Uint64()}
	s.src, s.text = source(code)
	r := &reading{s: s, code: code, lim: lim, numEnd: -1, in: new(parse.Input)}
	r.syn = syntax{slash: slashRegexp, brace: braceStmt, stmtStart: true}
	r.cue.lineStart = true
	r.restart(&s.src)
	// The wrapper `(async function (args) {`: its paren and body, counted
	// as depth 0.
	r.stack = make([]level, 0, 16) // grows with nesting: most scripts stay shallow
	r.stack = append(r.stack, level{kind: kTop, flags: fBlock}, level{kind: kParen})
	r.cur = level{kind: kBrace, flags: fBlock | fFunc, id: 1}
	s.nextID = 2

	res := result{}
	s.readings = append(s.readings, r)
	for len(s.readings) > 0 {
		// Advance the reading that is furthest behind, so readings that
		// meet again are at the same offset and can be merged.
		k := 0
		for j := 1; j < len(s.readings); j++ {
			if s.readings[j].i < s.readings[k].i {
				k = j
			}
		}
		r := s.readings[k]
		if r.dead || r.i >= len(r.code) {
			// A syntax error ends a reading; the end of the code too (an
			// unclosed bracket is an error only the parser reports).
			s.drop(k)
			continue
		}
		var fork *reading
		from := r.i
		if len(s.readings) == 1 {
			// One reading: no merging to do, run until it forks or ends.
			s.hashing = false
			for r.i < len(r.code) && !r.dead && r.refused == refuseNone && fork == nil {
				fork = r.step()
			}
		} else {
			fork = r.step()
		}
		// What all readings read in all is bounded: a reading forked at
		// every token of a long line could read the rest of it each time.
		if s.work += r.i - from; s.work > maxWork*len(code)+maxWorkSlack && r.refused == refuseNone {
			r.refused, r.at = refuseAmbiguous, r.tok
		}
		res.depth = max(res.depth, int(r.maxDepth))
		res.scopes = max(res.scopes, int(r.maxScopes))
		res.opened = max(res.opened, r.opened)
		if r.refused != refuseNone {
			res.refused, res.at, res.unguarded = r.refused, r.at, s.unguarded
			return res
		}
		if fork != nil {
			s.readings = append(s.readings, fork)
			if len(s.readings) > maxReadings {
				res.refused, res.at, res.unguarded = refuseAmbiguous, r.tok, s.unguarded
				return res
			}
		}
		if r.dead || r.i >= len(r.code) {
			s.drop(k)
			continue
		}
		for j, q := range s.readings {
			if j != k && q.i == r.i && q.same(r) {
				s.drop(k)
				break
			}
		}
	}
	res.repeats, res.repeatAt, res.repeatName = s.repeats, s.repeatAt, s.repeatName
	res.paramScan, res.paramAt = s.paramScan, s.paramAt
	res.unguarded = s.unguarded
	return res
}

// drop ends the k-th reading.
func (s *scanner) drop(k int) {
	n := len(s.readings) - 1
	s.free = append(s.free, s.readings[k])
	s.readings[k] = s.readings[n]
	s.readings = s.readings[:n]
}

// same reports whether two readings at the same offset are in the same
// state, so one of them can be dropped.
func (r *reading) same(q *reading) bool {
	if r.cur != q.cur || r.syn != q.syn || !r.cue.sameAs(q.cue) || len(r.stack) != len(q.stack) {
		return false
	}
	for j := len(r.stack) - 1; j >= 0; j-- {
		if r.stack[j] != q.stack[j] {
			return false
		}
	}
	return true
}

// clone returns a copy of r that shares nothing mutable with it.
func (r *reading) clone() *reading {
	s := r.s
	if !s.hashing {
		s.hashing = true
		r.rehash()
	}
	var q *reading
	if n := len(s.free); n > 0 {
		q = s.free[n-1]
		s.free = s.free[:n-1]
	} else {
		q = &reading{in: new(parse.Input)}
	}
	stack, in := q.stack[:0], q.in
	*q = *r
	q.stack = append(stack, r.stack...)
	q.in = in
	q.restart(r.in)
	return q
}

// rehash sets the hash of every open frame.
func (r *reading) rehash() {
	h := r.s.seed
	for j := range r.stack {
		r.stack[j].hash = h
		h = r.stack[j].fold(h)
	}
	r.cur.hash = h
}

// fold returns h with the level folded in.
func (l *level) fold(h uint64) uint64 {
	h = mix(h ^ uint64(l.kind) ^ uint64(l.flags)<<8 ^ uint64(uint32(l.base))<<24)
	h = mix(h ^ uint64(uint32(l.unary)) ^ uint64(uint32(l.right))<<32)
	h = mix(h ^ uint64(uint32(l.stmt)) ^ uint64(uint32(l.seq))<<32)
	h = mix(h ^ uint64(uint32(l.dos)) ^ uint64(uint32(l.heads))<<32)
	return mix(h ^ uint64(uint32(l.scopeBase)) ^ uint64(uint32(l.arrows))<<32)
}

// mix is splitmix64's finaliser.
func mix(h uint64) uint64 {
	h += 0x9e3779b97f4a7c15
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	return h ^ h>>31
}

// check records the depth after a token that added to it, and refuses past
// a bound.
func (r *reading) check() {
	d, s := r.cur.depth(), r.cur.scopes()
	r.maxDepth = max(r.maxDepth, d)
	r.maxScopes = max(r.maxScopes, s)
	switch {
	case r.refused != refuseNone:
	case int(d) > r.lim.MaxDepth:
		r.refused, r.at = refuseDepth, r.tok
	case int(s) > r.lim.MaxScopes:
		r.refused, r.at = refuseScopes, r.tok
	}
}

// open counts a scope opened (a block, a function body, an arrow function).
func (r *reading) open() {
	r.opened++
	if r.opened > r.lim.MaxScopeCount && r.refused == refuseNone {
		r.refused, r.at = refuseScopeCount, r.tok
	}
}

// declare records a let, const or class name (or another that may not
// repeat) declared in a scope, and counts the names declared again.
func (r *reading) declare(scope uint32, name string, at int) {
	r.record(scope, name, at, true)
}

// declareKind declares a name as its declaration list has it: a var's up
// to its function (declareVar), others in scope.
func (r *reading) declareKind(scope uint32, name string, at int, hoist bool) {
	if hoist {
		r.declareVar(scope, name, at)
		return
	}
	r.declare(scope, name, at)
}

// declareVar records a var name declared in scope and in every scope
// around it up to its function's, where it belongs: a let, const or class
// of the same name in any of them (before or after) is a name declared
// again, another var is not.
func (r *reading) declareVar(scope uint32, name string, at int) {
	r.record(scope, name, at, false)
	if r.cur.id == scope && r.cur.flags&fFunc != 0 {
		return
	}
	for j := len(r.stack) - 1; j >= 0; j-- {
		l := &r.stack[j]
		if l.id != scope {
			r.record(l.id, name, at, false)
		}
		if l.flags&fFunc != 0 {
			return
		}
	}
}

// record counts a declaration of name in scope, lexical (let, const,
// class) or not (var, function), and a name declared again: a lexical one
// after any other, a var or function after a lexical one.
func (r *reading) record(scope uint32, name string, at int, lexical bool) {
	s := r.s
	if s.decls == nil {
		s.decls = make(map[declKey]declSeen)
	}
	k := declKey{scope, name}
	v := s.decls[k]
	if v.lex+v.vars > 0 && v.at == int32(at) {
		return // another reading's view of the same declaration
	}
	again := v.lex > 0 || lexical && v.vars > 0
	if lexical {
		v.lex++
	} else {
		v.vars++
	}
	v.at = int32(at)
	s.decls[k] = v
	if !again {
		return
	}
	if s.repeats == 0 {
		s.repeatAt, s.repeatName = at, name
	}
	s.repeats++
}

// param records a name among a call's items, which may be a function's
// parameters (`m(a, b) {`, `function f(a, b): T {`): a name they repeat is
// an error esbuild notes back to the first, measuring the distance each
// time, which a long list of repeats makes quadratic (a 12 KB list took it
// 0.6 s). Calls may repeat names, so what counts is that distance, in
// all, not the repeats. (Arrow functions' and anonymous functions'
// parameters are bounded already: their commas count as nesting.) Words
// no parameter is named (see wordToken) are not recorded.
func (r *reading) param(name string, at int) {
	s := r.s
	if s.params == nil {
		s.params = make(map[declKey][2]int32)
	}
	k := declKey{r.cur.id, name}
	v, seen := s.params[k]
	switch {
	case !seen:
		s.params[k] = [2]int32{int32(at), int32(at)}
		return
	case v[1] == int32(at):
		return // another reading's view of the same item
	}
	s.params[k] = [2]int32{v[0], int32(at)}
	if s.paramScan == 0 {
		s.paramAt = at
	}
	s.paramScan += at - int(v[0])
}

// declScope is the scope a name declared here belongs to.
func (r *reading) declScope() uint32 {
	if r.cur.flags&fPattern != 0 {
		return r.cur.scope
	}
	return r.cur.id
}

// pattern opens a destructuring pattern of a declaration.
func (r *reading) pattern(k uint8) {
	scope := r.declScope()
	flags := uint32(fList|fPattern) | r.cur.flags&fVar // a var's pattern: its names belong to the function
	if k == kBrace {
		flags |= fBlock // counted as a scope, as an object literal would not be: the larger reading
	}
	r.push(k, flags)
	r.cur.scope = scope
	r.exprStart()
	r.cue.bindNext = true
	r.cue.keyNext = k == kBrace
}

// push opens a frame of kind k.
func (r *reading) push(k uint8, flags uint32) {
	scope := r.cur.scopes()
	if flags&fBlock != 0 || k == kAngle {
		scope++
	}
	if flags&fBlock != 0 {
		r.open()
	}
	outer := r.cur
	r.stack = append(r.stack, outer)
	r.cur = level{kind: k, flags: flags, base: outer.depth() + 1, scopeBase: scope, id: r.s.nextID}
	r.s.nextID++
	if r.s.hashing {
		r.cur.hash = outer.fold(outer.hash)
	}
	r.check()
}

// pop closes the innermost frame.
func (r *reading) pop() level {
	closed := r.cur
	r.cur = r.stack[len(r.stack)-1]
	r.stack = r.stack[:len(r.stack)-1]
	return closed
}

// dropAngles drops the tentative type-argument lists opened in the
// innermost frame: an operator that no type holds shows they were
// comparisons.
func (r *reading) dropAngles() {
	for r.cur.kind == kAngle {
		r.pop()
	}
}

// dropTentative drops angles and conditionals still open at a `;` or a
// closing bracket, which neither can span.
func (r *reading) dropTentative() {
	for r.cur.kind == kAngle || r.cur.kind == kTernary {
		r.pop()
	}
}

// stmtContext reports whether statements are read in the innermost frame.
func (r *reading) stmtContext() bool {
	return (r.cur.kind == kBrace || r.cur.kind == kTop) && r.cur.flags&fBlock != 0
}

// exprStart sets what the previous token allows after an operator: an
// operand starts.
func (r *reading) exprStart() {
	r.syn.operand, r.syn.slash, r.syn.brace, r.syn.stmtStart, r.syn.label = false, slashRegexp, braceObject, false, false
}

// stmtBegin sets what the previous token allows at a statement's start.
func (r *reading) stmtBegin() {
	r.syn.operand, r.syn.slash, r.syn.brace, r.syn.stmtStart, r.syn.label = false, slashRegexp, braceStmt, true, false
	r.syn.castLabel = 0
}

// operandEnd sets what the previous token allows after an operand (one
// that is not a literal: it ends a run of them).
func (r *reading) operandEnd() {
	r.syn.operand, r.syn.slash, r.syn.brace, r.syn.stmtStart, r.syn.label = true, slashDivide, braceBlock, false, false
	r.cur.strs, r.cur.plus = 0, false
}

// binary applies an operator between two operands: the pending prefix
// operators and member chain end. clears says whether the operator can
// never appear in a type, which shows open angles were comparisons.
func (r *reading) binary(clears bool) {
	if clears {
		r.dropAngles()
	}
	r.cur.unary, r.cur.strs, r.cur.plus = 0, 0, false
	r.exprStart()
}

// endExpr resets the chains a comma or a statement's end closes.
func (r *reading) endExpr() {
	r.cur.unary, r.cur.right, r.cur.arrows, r.cur.strs, r.cur.plus = 0, 0, 0, 0, false
}

// literal ends an operand that is a string or template literal (or a group
// of them) n bytes long: after a + that follows another, esbuild folds the
// two into a new string.
func (r *reading) literal(n int) {
	plus, run := r.cur.plus, r.cur.strs
	r.operandEnd()
	if !plus {
		r.cur.strs = int32(min(n, 1<<30))
		return
	}
	r.folds += int(run) + n
	r.cur.strs = int32(min(int(run)+n, 1<<30))
	if r.folds > maxFolds && r.refused == refuseNone {
		r.refused, r.at = refuseFolds, r.tok
	}
}

// endStatement ends the statement in the innermost frame, heads included.
func (r *reading) endStatement() {
	r.dropTentative()
	r.endExpr()
	r.cur.seq, r.cur.stmt, r.cur.dos, r.cur.heads = 0, 0, 0, 0
	r.cur.flags &^= fDecl | fLex | fVar | fCase
	r.syn.list = false
}

// assign applies a right-associative operator (an assignment, **).
// clears is false for `=`, which a type parameter's default uses.
func (r *reading) assign(clears bool) {
	if clears {
		r.dropAngles()
	}
	r.cur.right++
	r.check()
	r.binary(false)
}
