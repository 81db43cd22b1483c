package prescan

import (
	"math/rand/v2"
	"strings"
	"unicode/utf8"
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
// what the previous token allows next.
type reading struct {
	s     *scanner
	code  string
	i     int
	stack []level // the frames around cur
	cur   level

	template bool // inside the text of a template literal
	dead     bool // this reading met what no parser reads: a syntax error

	// What the previous token allows.
	operand   bool  // it ended an operand: ( [ ` continue it, + - are binary
	slash     uint8 // how a / reads here
	brace     uint8 // what a { opens here
	stmtStart bool  // a statement starts here
	label     bool  // it was a plain word at a statement's start: a : makes it a label
	property  bool  // it was . or ?.: a word here is a property name
	newline   bool  // a line terminator since it
	lineStart bool  // nothing but blanks and comments since the last line terminator
	ended     bool  // it ended a statement: an else continues the if, a word starts anew
	head      bool  // it was if/while/for/with/switch/catch: the next ( is a head
	list      bool  // it was enum or interface: the next { is a list of members
	enumNext  bool  // that list is an enum's
	classNext bool  // it was class (or its name, heritage): the next { is its body
	classDecl bool  // and that class is declared: its } ends a statement
	accessor  uint8 // it was get (1) or set (2)
	asi       bool  // it was return, break, continue, yield, await or of: a line break may end the statement
	declNext  bool  // it was let: a binding here makes a declaration list
	callClose bool  // it closed what looked like a call's arguments
	castNext  bool  // it closed type arguments or a comparison: a < here may start a type assertion
	bindNext  bool  // a word (or a pattern) here is a name a let, const or class declares
	keyNext   bool  // a word or string here is a property's or class member's name (or a modifier before it)
	headFirst bool  // it opened a statement head's paren: a let here declares (for (let …))
	fnBody    bool  // it was => or a function's parameters: a { here is a function's body
	params    bool  // it was function, its * or its name: a ( here opens its parameters
	item      bool  // it opened a call's parens or separated its items: a word here may be a parameter's name
	funcName  bool  // it was function (or its *) at a statement: a word here is the function's name
	modifier  bool  // it was async, declare or export at a statement's start: a function here is declared
	declName  bool  // it named a function declaration: its parameters follow
	declBody  bool  // it closed a function declaration's parameters: its body follows
	pending   decl  // the name just read, declared unless (or only if) a : follows
	indent    bool  // it was if/for/while/with: the statement indents its body
	bodyNext  bool  // it ended the head of a statement that indents its body

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
}

// scan reads code with every reading the ambiguous slashes allow, in step,
// and stops at the first bound crossed.
func scan(code string, lim Limits) result {
	s := &scanner{seed: rand.Uint64()}
	r := &reading{s: s, code: code, lim: lim, slash: slashRegexp, brace: braceStmt, stmtStart: true, lineStart: true}
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
			res.refused, res.at = r.refused, r.at
			return res
		}
		if fork != nil {
			s.readings = append(s.readings, fork)
			if len(s.readings) > maxReadings {
				res.refused, res.at = refuseAmbiguous, r.tok
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
	if r.cur != q.cur || r.template != q.template || len(r.stack) != len(q.stack) ||
		r.operand != q.operand || r.slash != q.slash || r.brace != q.brace || r.stmtStart != q.stmtStart ||
		r.label != q.label || r.property != q.property || r.newline != q.newline || r.lineStart != q.lineStart ||
		r.ended != q.ended || r.head != q.head || r.list != q.list || r.declNext != q.declNext || r.callClose != q.callClose ||
		r.indent != q.indent || r.bodyNext != q.bodyNext || r.bindNext != q.bindNext || r.keyNext != q.keyNext || r.headFirst != q.headFirst || r.fnBody != q.fnBody || r.params != q.params || r.modifier != q.modifier || r.declName != q.declName || r.declBody != q.declBody || r.item != q.item || r.funcName != q.funcName || r.pending != q.pending ||
		r.castNext != q.castNext || r.enumNext != q.enumNext || r.classNext != q.classNext || r.classDecl != q.classDecl || r.accessor != q.accessor {
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
		q = new(reading)
	}
	stack := q.stack[:0]
	*q = *r
	q.stack = append(stack, r.stack...)
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
// parameters are bounded already: their commas count as nesting.)
func (r *reading) param(name string, at int) {
	if notAName(name) || name == "this" {
		return
	}
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
	r.bindNext = true
	r.keyNext = k == kBrace
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
	r.operand, r.slash, r.brace, r.stmtStart, r.label = false, slashRegexp, braceObject, false, false
}

// stmtBegin sets what the previous token allows at a statement's start.
func (r *reading) stmtBegin() {
	r.operand, r.slash, r.brace, r.stmtStart, r.label = false, slashRegexp, braceStmt, true, false
}

// operandEnd sets what the previous token allows after an operand (one
// that is not a literal: it ends a run of them).
func (r *reading) operandEnd() {
	r.operand, r.slash, r.brace, r.stmtStart, r.label = true, slashDivide, braceBlock, false, false
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
	r.list = false
}

// step reads one token (or a blank, a comment, a run of template text)
// and returns a new reading when the token reads two ways: a `/` that may
// start a regular expression, an HTML-like comment.
func (r *reading) step() *reading {
	if r.template {
		r.templateText()
		return nil
	}
	code := r.code
	c := code[r.i]
	// Blanks and comments are not tokens: what the previous token allows
	// carries across them.
	switch c {
	case ' ', '\t', '\v', '\f':
		r.i++
		return nil
	case '\n', '\r':
		r.i++
		r.newline, r.lineStart, r.lineAt = true, true, r.i
		return nil
	case '/':
		if r.i+1 < len(code) && code[r.i+1] == '/' {
			r.i += 2
			r.skipLine()
			return nil
		}
		if r.i+1 < len(code) && code[r.i+1] == '*' {
			r.commentScan += r.i - r.lineAt
			if r.commentScan > maxCommentScan && r.refused == refuseNone {
				r.refused, r.at = refuseComments, r.i
			}
			r.skipBlockComment()
			return nil
		}
	case '<':
		if r.i+3 < len(code) && code[r.i+1] == '!' && code[r.i+2] == '-' && code[r.i+3] == '-' {
			// `<!--` opens a comment to the end of the line where a parser
			// allows HTML-like comments: read it both ways.
			f := r.clone()
			f.i += 4
			f.skipLine()
			r.token(c)
			return f
		}
	case '-':
		if r.lineStart && r.i+2 < len(code) && code[r.i+1] == '-' && code[r.i+2] == '>' {
			// `-->` at a line's start is such a comment too.
			f := r.clone()
			f.i += 3
			f.skipLine()
			r.token(c)
			return f
		}
	}
	if c >= utf8.RuneSelf {
		ch, n := utf8.DecodeRuneInString(code[r.i:])
		switch {
		case ch == 0x2028 || ch == 0x2029:
			r.i += n
			r.newline, r.lineStart, r.lineAt = true, true, r.i
			return nil
		case isSpace(ch):
			r.i += n
			return nil
		}
	}
	if c < ' ' || c == 0x7F {
		// A control character no parser reads outside a string: the
		// parsers stop at it, but skipping it is the larger reading.
		r.i++
		return nil
	}
	return r.token(c)
}

// token reads one token starting with c.
func (r *reading) token(c byte) *reading {
	code := r.code
	start := r.i
	r.tok = start
	newline, ended, head, indent, property, declNext, callClose, bodyNext, bind, key, cast, asi, headFirst, fnBody, funcName, params, item, modifier, declName, declBody :=
		r.newline, r.ended, r.head, r.indent, r.property, r.declNext, r.callClose, r.bodyNext, r.bindNext, r.keyNext, r.castNext, r.asi, r.headFirst, r.fnBody, r.funcName, r.params, r.item, r.modifier, r.declName, r.declBody
	r.newline, r.lineStart, r.ended, r.head, r.indent, r.property, r.declNext, r.callClose, r.bodyNext, r.bindNext, r.keyNext, r.castNext, r.asi, r.headFirst, r.fnBody, r.funcName, r.params, r.item, r.modifier, r.declName, r.declBody =
		false, false, false, false, false, false, false, false, false, false, false, false, false, false, false, false, false, false, false, false, false
	if asi && newline {
		// `return` (and the others) then a line break: a new statement may
		// start here (a block, a label), or the expression go on. Both
		// count: the chains are kept, and what a statement start allows is
		// allowed.
		r.stmtStart, r.brace = true, braceStmt
	}
	if p := r.pending; p.set {
		r.pending.set = false
		if (c == ':') == p.keyOnly {
			r.declareKind(p.scope, p.name, p.at, p.hoist)
		}
	}
	if declNext && (isWordStart(c) || c == '[' || c == '{' || c >= utf8.RuneSelf) {
		r.cur.flags |= fDecl | fLex
		bind = true
	}
	if bind && (c == '[' || c == '{') && !(key && r.cur.kind == kBrace && r.cur.flags&fPattern != 0) {
		// A nested pattern (a `[` at an object pattern's key is a computed
		// key instead: an expression).
		r.i++
		k := kBracket
		if c == '{' {
			k = kBrace
		}
		r.pattern(k)
		return nil
	}
	switch c {
	case ';', ':', '(', ')', '}', '`', '\'', '"', '?':
		r.list, r.enumNext, r.classNext = false, false, false // not a head of a body
	case '=':
		if r.cur.kind != kAngle {
			r.list, r.enumNext, r.classNext = false, false, false
		}
	}
	if bodyNext && c != '{' {
		// A statement's body without braces: esbuild indents it as a
		// block.
		r.cur.heads++
		r.check()
	}

	switch c {
	case '(':
		r.i++
		switch {
		case head:
			f := uint32(fHead)
			if indent {
				f |= fIndent
			}
			r.push(kParen, f)
			r.exprStart()
			r.headFirst = true
			return nil
		case r.operand:
			r.cur.unary++ // a call
			f := uint32(fList | fCall)
			if declName {
				f |= fFuncDecl
			}
			r.push(kParen, f)
			r.exprStart()
			r.item = true
			return nil
		case params:
			r.push(kParen, fParams) // an anonymous function's (its commas counted, as before)
		default:
			r.push(kParen, 0)
		}
		r.exprStart()
	case '[':
		r.i++
		if r.operand {
			r.cur.unary++ // an index
		}
		r.push(kBracket, fList)
		r.exprStart()
	case '{':
		r.i++
		if callClose {
			// `m(…) {`: what looked like a call was a method's or a
			// function's parameters.
			r.cur.unary--
		}
		switch {
		case r.list:
			if r.enumNext {
				r.push(kBrace, fList|fEnum)
				r.exprStart()
				r.bindNext = true
			} else {
				r.push(kBrace, fList)
				r.exprStart()
				r.keyNext = true
			}
		case r.brace == braceObject:
			r.push(kBrace, fList)
			r.exprStart()
			r.keyNext = true
		case r.brace == braceStmt:
			r.push(kBrace, fBlock|fStmt)
			r.stmtBegin()
		case r.classNext:
			f := uint32(fBlock | fClass)
			if r.classDecl {
				f |= fFuncDecl
			}
			r.push(kBrace, f)
			r.stmtBegin()
		case callClose || fnBody:
			f := uint32(fBlock | fFunc) // a function's body
			if declBody {
				f |= fFuncDecl
			}
			r.push(kBrace, f)
			r.stmtBegin()
		default:
			r.push(kBrace, fBlock)
			r.stmtBegin()
		}
		r.list, r.enumNext, r.classNext = false, false, false
	case ')', ']', '}':
		r.i++
		r.dropTentative()
		if c == '}' && r.cur.kind == kSubst {
			r.pop()
			r.template = true
			return nil
		}
		want := kParen
		switch c {
		case ']':
			want = kBracket
		case '}':
			want = kBrace
		}
		if r.cur.kind != want || len(r.stack) == 0 {
			r.dead = true // a closer that matches nothing: the parsers stop here
			return nil
		}
		closed := r.pop()
		switch {
		case c == ')' && closed.flags&fHead != 0:
			r.stmtBegin()
			r.bodyNext = closed.flags&fIndent != 0
		case c == '}' && closed.flags&(fStmt|fFuncDecl) != 0:
			// A block statement, or a function declaration: the
			// statement ends.
			r.stmtBegin()
			r.ended = true
		case c == '}':
			// A function body or an object: an operand ends, or a
			// declaration, after which a / starts a regular expression.
			r.operandEnd()
			r.slash = slashEither
			// A method's body (or a static block) in a class body, not a
			// function in a field's initializer: a member's name follows.
			r.keyNext = closed.flags&fBlock != 0 && r.cur.flags&fClass != 0 &&
				r.cur.right == 0 && r.cur.unary == 0 && r.cur.seq == 0
		case c == ')' && closed.flags&fList == 0 && closed.strs > 0:
			r.literal(int(closed.strs)) // a group of literals folds into one
		default:
			r.operandEnd()
			r.callClose = c == ')' && closed.flags&fCall != 0
			r.fnBody = closed.flags&fParams != 0
			r.declBody = closed.flags&fFuncDecl != 0
		}
	case '`':
		r.i++
		if r.operand {
			r.cur.unary++ // a tagged template
			r.check()
		}
		r.cur.tmpl = int32(start)
		r.template = true
	case '\'', '"':
		r.skipString(c)
		if key && !r.dead && r.objectLiteral() && r.code[start+1:r.i-1] == "__proto__" {
			r.pending = decl{set: true, keyOnly: true, scope: r.cur.id, name: "__proto__", at: start}
		}
		r.literal(r.i - start)
	case '/':
		return r.slashToken(newline)
	case '.':
		switch {
		case r.i+1 < len(code) && isDigit(code[r.i+1]):
			r.skipNumber()
			r.operandEnd()
		case r.i+2 < len(code) && code[r.i+1] == '.' && code[r.i+2] == '.':
			r.i += 3
			r.cur.right++ // spread and rest take an assignment expression
			r.check()
			r.exprStart()
			r.bindNext = r.cur.flags&fPattern != 0
		default:
			r.i++
			r.cur.unary++
			r.check()
			r.exprStart()
			r.property = true
		}
	case '?':
		switch {
		case r.i+1 < len(code) && code[r.i+1] == '.' && !(r.i+2 < len(code) && isDigit(code[r.i+2])):
			r.i += 2
			r.cur.unary++
			r.check()
			r.exprStart()
			r.property = true
		case r.i+1 < len(code) && code[r.i+1] == '?':
			r.i += 2
			if r.i < len(code) && code[r.i] == '=' {
				r.i++
				r.assign(true)
			} else {
				r.binary(true)
			}
		default:
			r.i++
			r.push(kTernary, 0)
			r.exprStart()
		}
	case ':':
		r.i++
		r.dropAngles()
		switch {
		case r.cur.kind == kTernary:
			r.pop()
			r.cur.right++ // the alternate
			r.check()
			r.exprStart()
		case r.label && r.stmtContext():
			r.cur.stmt++
			r.check()
			r.stmtBegin()
			r.bodyNext = true
		case r.cur.flags&fCase != 0:
			r.cur.flags &^= fCase
			r.cur.unary = 0
			r.stmtBegin()
		default:
			// A property's value or a type annotation.
			r.binary(false)
			r.bindNext = r.cur.flags&fPattern != 0
		}
	case ',':
		r.i++
		r.endExpr()
		r.item = r.cur.kind == kParen && r.cur.flags&fCall != 0
		if r.cur.flags&(fList|fDecl) == 0 && r.cur.kind != kAngle {
			r.cur.seq++ // the comma operator
			r.check()
		}
		r.exprStart()
		switch {
		case r.cur.flags&(fLex|fVar|fPattern|fEnum) != 0:
			r.bindNext = true
			r.keyNext = r.cur.kind == kBrace && r.cur.flags&fPattern != 0
		case r.cur.kind == kBrace && r.cur.flags&fList != 0:
			r.keyNext = true
		}
	case ';':
		r.i++
		r.dropTentative()
		r.endExpr()
		r.cur.seq = 0
		r.cur.flags &^= fDecl | fLex | fVar | fCase
		r.stmtBegin()
		r.ended = true
		r.list = false
		// A TypeScript member list's next member.
		r.keyNext = r.cur.kind == kBrace && r.cur.flags&(fList|fEnum|fPattern) == fList
	case '=':
		switch {
		case r.i+1 < len(code) && code[r.i+1] == '>':
			r.i += 2
			r.cur.right++
			r.cur.arrows++
			r.open()
			r.check()
			r.exprStart()
			r.brace = braceBlock
			r.fnBody = true
		case r.i+1 < len(code) && code[r.i+1] == '=':
			r.i += 2
			if r.i < len(code) && code[r.i] == '=' {
				r.i++
			}
			r.binary(true)
		default:
			// Not a clearing operator: a type parameter's default is
			// written with `=` inside angles.
			r.i++
			r.assign(false)
		}
	case '<':
		r.angles(cast)
	case '>':
		r.closeAngles()
	case '!':
		r.i++
		if r.i < len(code) && code[r.i] == '=' {
			r.i++
			if r.i < len(code) && code[r.i] == '=' {
				r.i++
			}
			r.binary(true)
			break
		}
		r.cur.unary++
		r.check()
		switch {
		case r.operand && !newline:
			// TypeScript's non-null assertion: the operand goes on.
			r.operandEnd()
		case r.operand:
			// After a line break: a new statement's `!`, or an assertion.
			r.exprStart()
			r.slash = slashEither
		default:
			r.exprStart()
		}
	case '~':
		r.i++
		r.cur.unary++
		r.check()
		r.exprStart()
	case '+', '-':
		r.plusMinus(c)
	case '*':
		r.i++
		switch {
		case r.i < len(code) && code[r.i] == '*':
			r.i++
			if r.i < len(code) && code[r.i] == '=' {
				r.i++
			}
			r.assign(true) // ** is right-associative
		case r.i < len(code) && code[r.i] == '=':
			r.i++
			r.assign(true)
		default:
			// A generator's star before a member's name: the name
			// follows.
			member := key || r.cur.flags&fClass != 0 && r.stmtStart
			r.binary(true)
			r.keyNext = member
			r.funcName, r.params = funcName, params // function* name
		}
	case '%', '^':
		r.i++
		if r.i < len(code) && code[r.i] == '=' {
			r.i++
			r.assign(true)
		} else {
			r.binary(true)
		}
	case '&', '|':
		r.i++
		switch {
		case r.i < len(code) && code[r.i] == c:
			r.i++
			if r.i < len(code) && code[r.i] == '=' {
				r.i++
				r.assign(true)
			} else {
				r.binary(true)
			}
		case r.i < len(code) && code[r.i] == '=':
			r.i++
			r.assign(true)
		default:
			// Unions and intersections are types too.
			r.binary(false)
		}
	case '@':
		r.i++
		r.exprStart()
	default:
		if isDigit(c) {
			r.skipNumber()
			r.operandEnd()
			break
		}
		r.word(newline, ended, head, indent, property, bind, key, headFirst, funcName, modifier)
		if item && r.cur.kind == kParen && r.cur.flags&fCall != 0 {
			r.param(code[start:r.i], start)
		}
		if params && r.operand {
			r.params = true // the function's name: its parameters follow
		}
		switch code[start:r.i] {
		case "return", "break", "continue", "yield", "await", "of":
			r.asi = !property
		}
	}
	return nil
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

// plusMinus reads + - ++ -- += -=.
func (r *reading) plusMinus(c byte) {
	code := r.code
	r.i++
	switch {
	case r.i < len(code) && code[r.i] == c:
		r.i++
		// Prefix or postfix, each is a level: esbuild reports `a----` as
		// an invalid assignment target and goes on, nesting each -- in
		// the one before.
		r.cur.unary++
		r.check()
		if !r.operand {
			r.exprStart()
		}
		// Postfix, or prefix on the next line: a / after it reads both
		// ways.
		r.slash = slashEither
	case r.i < len(code) && code[r.i] == '=':
		r.i++
		r.assign(true)
	case r.operand:
		run := r.cur.strs
		r.binary(c == '+') // -1 is a literal type
		if c == '+' && run > 0 {
			r.cur.strs, r.cur.plus = run, true
		}
	default:
		r.cur.unary++
		r.check()
		r.exprStart()
	}
}

// angles reads < << <= <<=: each `<` may open type arguments (or, where an
// operand starts, a type assertion or a generic arrow's type parameters).
//
// After `a<T>`, esbuild may take the `>` for a comparison and what follows
// for an operand: `a<T><T><T>…` is a chain of type assertions to it, one
// recursion each, so cast counts the larger reading.
func (r *reading) angles(cast bool) {
	code := r.code
	n := 0
	for r.i < len(code) && code[r.i] == '<' && n < 2 {
		r.i++
		n++
	}
	flags := uint32(0)
	if r.operand && !cast {
		r.cur.unary = 0 // a binary operator, or type arguments
	} else {
		flags = fPrefix
	}
	if r.label {
		flags |= fLabel
	}
	for range n {
		r.push(kAngle, flags)
	}
	if r.i < len(code) && code[r.i] == '=' {
		r.i++
	}
	r.exprStart()
}

// closeAngles reads > >> >>> >= >>= >>>=: each `>` closes an open angle if
// the innermost frame is one; otherwise it is a comparison or a shift.
func (r *reading) closeAngles() {
	code := r.code
	closed, prefix, n, label := false, false, 0, false
	for r.i < len(code) && code[r.i] == '>' {
		r.i++
		n++
		if r.cur.kind == kAngle {
			a := r.pop()
			closed = true
			label = a.flags&fLabel != 0
			if a.flags&fPrefix != 0 {
				r.cur.unary++ // a type assertion is a prefix operator
				r.check()
				prefix = true
			}
		}
	}
	assign := r.i < len(code) && code[r.i] == '='
	if assign {
		r.i++
	}
	switch {
	case prefix && !assign:
		// A type assertion `<T>x` (or a generic arrow's `<T>(x) => x`):
		// its operand follows.
		r.exprStart()
	case closed:
		// Type arguments: `f<T>(x)`, `new A<T>`, `x as A<T>`; the `=` of
		// `a: A<T>= b`. What follows may still be a comparison's operand.
		if assign {
			r.cur.right++
			r.check()
			r.exprStart()
		} else {
			r.operandEnd()
			r.castNext = true
			r.label = label // esbuild drops the type arguments: `a<T>:` labels a
		}
		r.slash = slashEither
	case assign && n > 1:
		r.assign(false) // >>= and >>>= are assignments: right-associative
		r.slash = slashEither
	default:
		r.binary(false)
		r.slash = slashEither
	}
}

// slashToken reads a comment, a regular expression or a division, or forks
// when it cannot tell the last two apart.
func (r *reading) slashToken(newline bool) *reading {
	mode := r.slash
	if mode == slashDivide && newline {
		// A line break may have ended the statement (a declaration
		// without initializer, an overload signature).
		mode = slashEither
	}
	switch mode {
	case slashRegexp:
		r.skipRegexp()
		r.operandEnd()
	case slashDivide:
		r.divide()
	default:
		f := r.clone()
		r.skipRegexp()
		r.operandEnd()
		f.divide()
		return f
	}
	return nil
}

// divide reads / or /= as an operator.
func (r *reading) divide() {
	r.i++
	if r.i < len(r.code) && r.code[r.i] == '=' {
		r.i++
		r.assign(true)
		return
	}
	r.binary(true)
}

// word reads an identifier or keyword. key says a property's or a class
// member's name may be here; headFirst that the word opens a statement's
// head (`for (let`); funcName that it names a function declaration;
// modifier that a statement began with async, declare or export.
func (r *reading) word(newline, ended, head, indent, property, bind, key, headFirst, funcName, modifier bool) {
	code := r.code
	j := r.i
	for j < len(code) {
		c := code[j]
		switch {
		case isWordPart(c):
			j++
		case c == '\\':
			j++
			if j+1 < len(code) && code[j] == 'u' && code[j+1] == '{' {
				for j < len(code) && code[j] != '}' {
					j++
				}
			}
			if j < len(code) {
				j++
			}
		case c >= utf8.RuneSelf:
			ch, n := utf8.DecodeRuneInString(code[j:])
			if ch == 0x2028 || ch == 0x2029 || isSpace(ch) {
				goto done
			}
			j += n
		default:
			goto done
		}
	}
done:
	w := code[r.i:j]
	at := r.i
	r.i = j
	if property {
		r.operandEnd()
		return
	}
	switch {
	case bind && r.cur.flags&fPattern != 0 && r.cur.kind == kBrace:
		// A key, unless no : follows.
		r.pending = decl{set: true, hoist: r.cur.flags&fVar != 0, scope: r.declScope(), name: w, at: at}
		r.operandEnd()
		return
	case bind && !r.continues(w) && !notAName(w):
		r.declareKind(r.declScope(), w, at, r.cur.flags&fVar != 0)
		if w != "await" && w != "yield" {
			r.operandEnd()
			return
		}
		// esbuild declares them (and says they cannot be names), which
		// counts; the operator reading is the larger one.
	case funcName && !notAName(w):
		r.record(r.cur.id, w, at, false) // in its block, not beyond
		r.operandEnd()
		r.declName = true
		return
	}
	if !r.continues(w) && ((r.operand && newline) || ended) {
		// A line break after an operand before a word that cannot go on
		// with it, or the end of a statement: a new statement starts.
		r.endStatement()
		r.stmtStart = true
	}
	stmt := r.stmtContext()
	atStart := r.stmtStart
	wasOperand := r.operand
	acc := r.accessor
	r.accessor = 0
	inClass := r.cur.flags&fClass != 0
	if key || inClass && atStart && !r.continues(w) {
		r.memberName(w, at, acc, inClass)
		return
	}
	if inClass && w[0] == '#' && wasOperand {
		// A private member after a decorator (`@d #a`); one where an
		// operand starts is a brand check (`#a in o`), no declaration.
		r.declare(r.cur.id, [...]string{"", "get ", "set "}[acc]+w, at)
	}
	switch w {
	case "while":
		if r.cur.dos > 0 {
			// The tail of a do statement.
			r.cur.dos--
		} else if stmt {
			r.cur.stmt++
			r.check()
			r.indent = true
		}
		r.stmtBegin()
		r.head = true
	case "if", "for", "with":
		if stmt {
			r.cur.stmt++
			r.check()
			r.indent = true
		}
		r.stmtBegin()
		r.head = true
	case "switch", "catch":
		r.stmtBegin()
		r.head = true
	case "do":
		if stmt {
			r.cur.stmt++
			r.cur.dos++
			r.check()
			r.bodyNext = true
		}
		r.stmtBegin()
	case "else":
		// The body of the if before is done: esbuild prints `else` at the
		// if's indentation.
		if r.cur.heads > 0 {
			r.cur.heads--
		}
		r.stmtBegin()
		r.bodyNext = true
	case "try", "finally":
		r.stmtBegin()
	case "typeof", "void", "delete", "new", "keyof", "readonly", "unique", "infer":
		r.cur.unary++
		r.check()
		r.exprStart()
	case "await":
		// An operator in async code, an identifier elsewhere.
		r.cur.unary++
		r.check()
		r.exprStart()
		r.slash = slashEither
		r.head, r.indent = head, indent // for await (…)
	case "yield", "extends":
		r.cur.right++
		r.check()
		r.exprStart()
		if w == "yield" {
			r.slash = slashEither
		}
	case "return", "throw":
		r.exprStart()
	case "case", "default":
		if stmt {
			r.cur.flags |= fCase
		}
		r.exprStart()
	case "in", "instanceof":
		r.cur.flags &^= fDecl | fLex | fVar
		r.binary(true)
	case "of":
		r.cur.flags &^= fDecl | fLex | fVar
		r.binary(true)
		r.slash = slashEither // `of` is also an identifier
	case "as", "satisfies":
		r.binary(false)
		r.slash = slashDivide
	case "var", "const":
		r.cur.flags |= fDecl
		r.exprStart()
		if w == "const" {
			r.cur.flags |= fLex
		} else {
			r.cur.flags |= fVar
		}
		r.bindNext = true
	case "let":
		r.operandEnd() // `let` is also an identifier
		// A declaration where a statement (or a for head) starts; an
		// identifier elsewhere (`x = let[0]`, sloppy code).
		r.declNext = atStart || headFirst
	case "function", "class":
		r.exprStart()
		r.brace = braceBlock
		// A class or function declaration's name, also after decorators
		// (or async, declare, export).
		r.bindNext = w == "class" && (atStart || wasOperand && stmt)
		r.funcName = w == "function" && (atStart || modifier)
		r.params = w == "function"
		r.classNext = w == "class"
		r.classDecl = r.bindNext
	case "enum", "interface":
		r.operandEnd()
		r.list, r.enumNext = true, w == "enum"
	case "async", "declare", "export":
		r.operandEnd()
		r.modifier = atStart || modifier // `export declare async function f`
	default:
		r.operandEnd()
	}
	// Any word that may be an identifier may be a label (`interface: T:
	// T: …` is a chain of labeled statements in sloppy code).
	r.label = atStart && !reserved(w)
	if r.cur.flags&fClass != 0 {
		switch w {
		case "get":
			r.accessor = 1
		case "set":
			r.accessor = 2
		case "static", "async", "accessor", "readonly", "declare", "public", "private", "protected", "abstract", "override":
			r.accessor = acc // a modifier between
		}
	}
}

// memberName reads w as a property's name in an object literal or a
// TypeScript member list, or a class member's name: no keyword is one
// there (test262's `{ get const() {}, set class(v) {} }`). A modifier
// before the name (get, set, async, static…) leaves the name to follow.
// acc is the accessor a get or set before it made.
func (r *reading) memberName(w string, at int, acc uint8, inClass bool) {
	switch {
	case inClass && w[0] == '#':
		// A private member of this class body (a getter and a setter may
		// share a name).
		r.declare(r.cur.id, [...]string{"", "get ", "set "}[acc]+w, at)
	case !inClass && w == "__proto__" && r.objectLiteral():
		r.pending = decl{set: true, keyOnly: true, scope: r.cur.id, name: w, at: at}
	}
	r.operandEnd()
	switch w {
	case "get", "set", "async", "static", "accessor", "declare", "readonly", "public", "private", "protected", "abstract", "override":
		r.keyNext = true
		if inClass {
			switch w {
			case "get":
				r.accessor = 1
			case "set":
				r.accessor = 2
			default:
				r.accessor = acc // a modifier between
			}
		}
	}
}

// objectLiteral reports whether the innermost frame is an object literal
// (or a TypeScript member list), where a `__proto__:` key may not repeat.
func (r *reading) objectLiteral() bool {
	return r.cur.kind == kBrace && r.cur.flags&(fList|fPattern|fEnum) == fList
}

// notAName reports the words no declaration can name: reserved words (in
// sloppy code too) and let (`const enum E`, where esbuild reads an enum).
// await and yield are not among them: esbuild declares them all the same.
func notAName(w string) bool {
	switch w {
	case "let", "break", "case", "catch", "class", "const", "continue", "debugger", "default", "delete",
		"do", "else", "enum", "export", "extends", "false", "finally", "for", "function", "if", "import", "in",
		"instanceof", "new", "null", "return", "super", "switch", "this", "throw", "true", "try", "typeof", "var",
		"void", "while", "with":
		return true
	}
	return false
}

// reserved reports the words that can never be a label.
func reserved(w string) bool {
	switch w {
	case "if", "while", "for", "with", "switch", "catch", "do", "else", "try", "finally", "typeof", "void",
		"delete", "new", "return", "throw", "case", "default", "in", "instanceof", "var", "const", "function",
		"class", "extends", "enum", "break", "continue", "debugger", "import", "export":
		return true
	}
	return false
}

// continues reports whether a word may go on with the statement before it
// across a line break or a statement's end: an operator, else, catch,
// finally, or the while of a pending do.
func (r *reading) continues(w string) bool {
	switch w {
	case "else", "in", "instanceof", "of", "as", "satisfies", "extends", "implements",
		"catch", "finally", "is", "asserts", "keyof", "infer", "readonly", "unique":
		return true
	case "while":
		return r.cur.dos > 0
	}
	return false
}

// templateText reads template text up to its end or a substitution.
func (r *reading) templateText() {
	code := r.code
	for r.i < len(code) {
		switch code[r.i] {
		case '\n', '\r':
			r.i++
			r.lineAt = r.i
		case '\\':
			r.i += 2
		case '`':
			r.i++
			r.template = false
			r.literal((r.i - int(r.cur.tmpl)) * tmplWeight)
			return
		case '$':
			if r.i+1 < len(code) && code[r.i+1] == '{' {
				r.i += 2
				r.template = false
				r.push(kSubst, 0)
				r.exprStart()
				return
			}
			r.i++
		default:
			r.i++
		}
	}
	r.dead = true // unterminated
}

// skipString skips a string literal; one cut by a line break or the end is
// a syntax error.
func (r *reading) skipString(q byte) {
	code := r.code
	r.i++
	for r.i < len(code) {
		switch code[r.i] {
		case q:
			r.i++
			return
		case '\\':
			r.i += 2
			if r.i <= len(code) && code[r.i-1] == '\r' && r.i < len(code) && code[r.i] == '\n' {
				r.i++
			}
			if r.i <= len(code) && (code[r.i-1] == '\n' || code[r.i-1] == '\r') {
				r.lineAt = r.i // a line continuation
			}
		case '\n', '\r':
			r.dead = true
			return
		default:
			r.i++
		}
	}
	r.i = len(code)
	r.dead = true
}

// skipRegexp skips a regular expression literal and its flags; one cut by
// a line break or the end is a syntax error.
func (r *reading) skipRegexp() {
	code := r.code
	r.i++
	class := false
	for r.i < len(code) {
		c := code[r.i]
		switch {
		case c == '\\':
			r.i++
			if r.i < len(code) && (code[r.i] == '\n' || code[r.i] == '\r' || isLS(code, r.i)) {
				r.dead = true
				return
			}
			r.i++
		case c == '[':
			class = true
			r.i++
		case c == ']':
			class = false
			r.i++
		case c == '/' && !class:
			r.i++
			for r.i < len(code) && isWordPart(code[r.i]) {
				r.i++
			}
			return
		case c == '\n' || c == '\r' || isLS(code, r.i):
			r.dead = true
			return
		default:
			r.i++
		}
	}
	r.i = len(code)
	r.dead = true
}

// skipLine skips to the next line terminator, which is left for step.
func (r *reading) skipLine() {
	code := r.code
	for r.i < len(code) {
		c := code[r.i]
		if c == '\n' || c == '\r' || isLS(code, r.i) {
			return
		}
		r.i++
	}
}

// skipBlockComment skips /* … */; a line break inside counts as one
// between the tokens around it.
func (r *reading) skipBlockComment() {
	code := r.code
	r.i += 2
	for r.i < len(code) {
		c := code[r.i]
		switch {
		case c == '*' && r.i+1 < len(code) && code[r.i+1] == '/':
			r.i += 2
			return
		case c == '\n' || c == '\r' || isLS(code, r.i):
			r.newline, r.lineStart, r.lineAt = true, true, r.i+1
		}
		r.i++
	}
	r.i = len(code)
	r.dead = true
}

// skipNumber skips a numeric literal: at most one `.`, so that `1..a.b`
// leaves its member chain to be counted.
func (r *reading) skipNumber() {
	code := r.code
	dot := code[r.i] == '.'
	radix := code[r.i] == '0' && r.i+1 < len(code) && strings.ContainsRune("xXbBoO", rune(code[r.i+1]))
	r.i++
	for r.i < len(code) {
		c := code[r.i]
		switch {
		case isWordPart(c) && c != '#':
			r.i++
		case c == '.' && !dot && !radix:
			dot = true
			r.i++
		case (c == '+' || c == '-') && !radix && (code[r.i-1] == 'e' || code[r.i-1] == 'E'):
			r.i++
		default:
			return
		}
	}
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isWordStart(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_' || c == '$' || c == '#' || c == '\\'
}

func isWordPart(c byte) bool { return isWordStart(c) && c != '\\' || isDigit(c) }

// isSpace reports the non-ASCII white space of JavaScript.
func isSpace(ch rune) bool {
	switch ch {
	case 0xA0, 0x1680, 0x202F, 0x205F, 0x3000, 0xFEFF:
		return true
	}
	return 0x2000 <= ch && ch <= 0x200A
}
