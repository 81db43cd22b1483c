package prescan

import "github.com/tdewolff/parse/v2/js"

// token reads one token: first what the previous token cued (prelude),
// then what the token itself does, by its class.
func (r *reading) token(t token) *reading {
	r.tok = t.start
	cue := r.cue
	r.cue = cues{}
	if r.prelude(t, &cue) {
		return nil
	}
	switch tt := t.tt; {
	case tt == js.OpenParenToken:
		r.openParen(cue)
	case tt == js.OpenBracketToken:
		if r.syn.operand {
			r.cur.unary++ // an index
		}
		r.push(kBracket, fList)
		r.exprStart()
	case tt == js.OpenBraceToken:
		r.openBrace(cue)
	case tt == js.CloseParenToken || tt == js.CloseBracketToken || tt == js.CloseBraceToken:
		r.closer(tt)
	case tt == tokBacktick:
		if r.syn.operand {
			r.cur.unary++ // a tagged template
			r.check()
		}
		r.cur.tmpl = int32(t.start)
		r.syn.template = true
	case tt == js.StringToken:
		r.stringToken(t, cue)
	case tt == js.DivToken || tt == js.DivEqToken:
		return r.slashToken(t, cue.newline)
	case tt == js.DotToken || tt == js.OptChainToken:
		r.cur.unary++
		r.check()
		r.exprStart()
		r.cue.property = true
	case tt == js.EllipsisToken:
		r.cur.right++ // spread and rest take an assignment expression
		r.check()
		r.exprStart()
		r.cue.bindNext = r.cur.flags&fPattern != 0
	case tt == js.QuestionToken:
		r.push(kTernary, 0)
		r.exprStart()
	case tt == js.ColonToken:
		r.colon()
	case tt == js.CommaToken:
		r.comma()
	case tt == js.SemicolonToken:
		r.semicolon()
	case tt == js.ArrowToken:
		r.cur.right++
		r.cur.arrows++
		r.open()
		r.check()
		r.exprStart()
		r.syn.brace = braceBlock
		r.cue.fnBody = true
	case tt == js.LtToken || tt == js.LtEqToken:
		r.angles(1, cue.castNext)
	case tt == js.LtLtToken || tt == js.LtLtEqToken:
		r.angles(2, cue.castNext)
	case tt >= js.GtToken && tt <= js.GtGtGtEqToken:
		r.closeAngles(tt)
	case tt == js.NotToken:
		r.not(cue.newline)
	case tt == js.BitNotToken:
		r.cur.unary++
		r.check()
		r.exprStart()
	case tt == js.AddToken || tt == js.SubToken:
		r.plusMinus(tt == js.AddToken)
	case tt == js.IncrToken || tt == js.DecrToken:
		r.incDec()
	case tt == js.MulToken:
		r.star(cue)
	case tt == tokAt:
		r.exprStart()
	case js.IsNumeric(tt):
		r.operandEnd()
		r.numEnd = t.end
	case js.IsIdentifierName(tt) || tt == js.PrivateIdentifierToken:
		r.wordToken(t, cue)
	default:
		r.operator(tt)
	}
	return nil
}

// prelude applies what the previous token cued to token t: a statement
// that may start after a line break, a name waiting to be declared, a
// declaration list or a destructuring pattern opening. It reports whether
// t opened a pattern, which is all there is to read of it.
func (r *reading) prelude(t token, cue *cues) bool {
	if cue.asi && cue.newline {
		// `return` (and the others) then a line break: a new statement may
		// start here (a block, a label), or the expression go on. Both
		// count: the chains are kept, and what a statement start allows is
		// allowed.
		r.syn.stmtStart, r.syn.brace = true, braceStmt
	}
	if p := &r.syn.pending; p.set {
		p.set = false
		if (t.tt == js.ColonToken) == p.keyOnly {
			r.declareKind(p.scope, p.name, p.at, p.hoist)
		}
	}
	word := js.IsIdentifierName(t.tt) || t.tt == js.PrivateIdentifierToken
	open := t.tt == js.OpenBracketToken || t.tt == js.OpenBraceToken
	if cue.declNext && (word || open) {
		r.cur.flags |= fDecl | fLex
		cue.bindNext = true
	}
	if cue.bindNext && open && !(cue.keyNext && r.cur.kind == kBrace && r.cur.flags&fPattern != 0) {
		// A nested pattern (a `[` at an object pattern's key is a computed
		// key instead: an expression).
		k := kBracket
		if t.tt == js.OpenBraceToken {
			k = kBrace
		}
		r.pattern(k)
		return true
	}
	switch r.code[t.start] {
	case ';', ':', '(', ')', '}', '`', '\'', '"', '?':
		r.syn.list, r.syn.enumNext, r.syn.classNext = false, false, false // not a head of a body
	case '=':
		if r.cur.kind != kAngle {
			r.syn.list, r.syn.enumNext, r.syn.classNext = false, false, false
		}
	}
	if cue.bodyNext && t.tt != js.OpenBraceToken {
		// A statement's body without braces: esbuild indents it as a
		// block.
		r.cur.heads++
		r.check()
	}
	return false
}

// operator reads the binary and assignment operators that need nothing
// but their class: whether they are right-associative, and whether a type
// may hold them (which shows that open angles were comparisons).
func (r *reading) operator(tt js.TokenType) {
	switch tt {
	case js.EqToken:
		// Not a clearing operator: a type parameter's default is written
		// with `=` inside angles.
		r.assign(false)
	case js.AddEqToken, js.SubEqToken, js.MulEqToken, js.ExpToken, js.ExpEqToken, js.ModEqToken,
		js.BitXorEqToken, js.BitAndEqToken, js.BitOrEqToken, js.AndEqToken, js.OrEqToken, js.NullishEqToken:
		r.assign(true) // ** is right-associative too
	case js.BitAndToken, js.BitOrToken:
		// Unions and intersections are types too.
		r.binary(false)
	default:
		// == === != !== % ^ && || ??
		r.binary(true)
	}
}

// openParen reads `(`: a statement's head, a call's arguments (or a
// method's parameters), a function's parameters, or a group.
func (r *reading) openParen(cue cues) {
	switch {
	case cue.head:
		f := uint32(fHead)
		if cue.indent {
			f |= fIndent
		}
		r.push(kParen, f)
		r.exprStart()
		r.cue.headFirst = true
		return
	case r.syn.operand:
		r.cur.unary++ // a call
		f := uint32(fList | fCall)
		if cue.declName {
			f |= fFuncDecl
		}
		r.push(kParen, f)
		r.exprStart()
		r.cue.item = true
		return
	case cue.params:
		r.push(kParen, fParams) // an anonymous function's (its commas counted, as before)
	default:
		r.push(kParen, 0)
	}
	r.exprStart()
}

// openBrace reads `{`: a list of members, an object, a block, a class or
// function body.
func (r *reading) openBrace(cue cues) {
	if cue.callClose {
		// `m(…) {`: what looked like a call was a method's or a
		// function's parameters.
		r.cur.unary--
	}
	switch {
	case r.syn.list:
		if r.syn.enumNext {
			r.push(kBrace, fList|fEnum)
			r.exprStart()
			r.cue.bindNext = true
		} else {
			r.push(kBrace, fList)
			r.exprStart()
			r.cue.keyNext = true
		}
	case r.syn.brace == braceObject:
		r.push(kBrace, fList)
		r.exprStart()
		r.cue.keyNext = true
	case r.syn.brace == braceStmt:
		r.push(kBrace, fBlock|fStmt)
		r.stmtBegin()
	case r.syn.classNext:
		f := uint32(fBlock | fClass)
		if r.syn.classDecl {
			f |= fFuncDecl
		}
		r.push(kBrace, f)
		r.stmtBegin()
	case cue.callClose || cue.fnBody:
		f := uint32(fBlock | fFunc) // a function's body
		if cue.declBody {
			f |= fFuncDecl
		}
		r.push(kBrace, f)
		r.stmtBegin()
	default:
		r.push(kBrace, fBlock)
		r.stmtBegin()
	}
	r.syn.list, r.syn.enumNext, r.syn.classNext = false, false, false
}

// closer reads `)`, `]` or `}`: it closes the innermost frame, or a
// substitution, after which template text goes on.
func (r *reading) closer(tt js.TokenType) {
	r.dropTentative()
	if tt == js.CloseBraceToken && r.cur.kind == kSubst {
		r.pop()
		r.syn.template = true
		return
	}
	want := kParen
	switch tt {
	case js.CloseBracketToken:
		want = kBracket
	case js.CloseBraceToken:
		want = kBrace
	}
	if r.cur.kind != want || len(r.stack) == 0 {
		r.dead = true // a closer that matches nothing: the parsers stop here
		return
	}
	closed := r.pop()
	switch {
	case tt == js.CloseParenToken && closed.flags&fHead != 0:
		r.stmtBegin()
		r.cue.bodyNext = closed.flags&fIndent != 0
	case tt == js.CloseBraceToken && closed.flags&(fStmt|fFuncDecl) != 0:
		// A block statement, or a function declaration: the
		// statement ends.
		r.stmtBegin()
		r.cue.ended = true
	case tt == js.CloseBraceToken:
		// A function body or an object: an operand ends, or a
		// declaration, after which a / starts a regular expression.
		r.operandEnd()
		r.syn.slash = slashEither
		// A method's body (or a static block) in a class body, not a
		// function in a field's initializer: a member's name follows.
		r.cue.keyNext = closed.flags&fBlock != 0 && r.cur.flags&fClass != 0 &&
			r.cur.right == 0 && r.cur.unary == 0 && r.cur.seq == 0
	case tt == js.CloseParenToken && closed.flags&fList == 0 && closed.strs > 0:
		r.literal(int(closed.strs)) // a group of literals folds into one
	default:
		r.operandEnd()
		r.cue.callClose = tt == js.CloseParenToken && closed.flags&fCall != 0
		r.cue.fnBody = closed.flags&fParams != 0
		r.cue.declBody = closed.flags&fFuncDecl != 0
	}
}

// stringToken reads a string literal: a key `__proto__` may not repeat in
// an object literal.
func (r *reading) stringToken(t token, cue cues) {
	r.stringLine(t)
	if cue.keyNext && !r.dead && r.objectLiteral() && r.code[t.start+1:t.end-1] == "__proto__" {
		r.syn.pending = decl{set: true, keyOnly: true, scope: r.cur.id, name: "__proto__", at: t.start}
	}
	r.literal(t.end - t.start)
}

// castOfLabel notes a TypeScript cast (as, satisfies, !) of a word that
// may be a label: the statement's : still makes it one (castLabel).
func (r *reading) castOfLabel() {
	if r.syn.label && r.stmtContext() {
		r.syn.castLabel = r.cur.id + 1
	}
}

// colon reads `:`: a conditional's alternate, a label, a case's end, a
// property's value or a type annotation.
func (r *reading) colon() {
	r.dropAngles()
	switch {
	case r.cur.kind == kTernary:
		r.pop()
		r.cur.right++ // the alternate
		r.check()
		r.exprStart()
	case (r.syn.label || r.syn.castLabel == r.cur.id+1) && r.stmtContext():
		r.cur.stmt++
		r.check()
		r.stmtBegin()
		r.cue.bodyNext = true
	case r.cur.flags&fCase != 0:
		r.cur.flags &^= fCase
		r.cur.unary = 0
		r.stmtBegin()
	default:
		// A property's value or a type annotation.
		r.binary(false)
		r.cue.bindNext = r.cur.flags&fPattern != 0
	}
}

// comma reads `,`: the comma operator, or a separator of items,
// declarations, members or names.
func (r *reading) comma() {
	r.endExpr()
	r.cue.item = r.cur.kind == kParen && r.cur.flags&fCall != 0
	if r.cur.flags&(fList|fDecl) == 0 && r.cur.kind != kAngle {
		r.cur.seq++ // the comma operator
		r.check()
	}
	r.exprStart()
	switch {
	case r.cur.flags&(fLex|fVar|fPattern|fEnum) != 0:
		r.cue.bindNext = true
		r.cue.keyNext = r.cur.kind == kBrace && r.cur.flags&fPattern != 0
	case r.cur.kind == kBrace && r.cur.flags&fList != 0:
		r.cue.keyNext = true
	}
}

// semicolon reads `;`: the end of a statement (or of a TypeScript
// member).
func (r *reading) semicolon() {
	r.dropTentative()
	r.endExpr()
	r.cur.seq = 0
	r.cur.flags &^= fDecl | fLex | fVar | fCase
	r.stmtBegin()
	r.cue.ended = true
	r.syn.list = false
	// A TypeScript member list's next member.
	r.cue.keyNext = r.cur.kind == kBrace && r.cur.flags&(fList|fEnum|fPattern) == fList
}

// not reads `!`: a prefix operator, or TypeScript's non-null assertion.
func (r *reading) not(newline bool) {
	r.cur.unary++
	r.check()
	switch {
	case r.syn.operand && !newline:
		// TypeScript's non-null assertion: the operand goes on.
		r.castOfLabel()
		r.operandEnd()
	case r.syn.operand:
		// After a line break: a new statement's `!`, or an assertion.
		r.exprStart()
		r.syn.slash = slashEither
	default:
		r.exprStart()
	}
}

// plusMinus reads + and -: binary after an operand, prefix before one.
func (r *reading) plusMinus(plus bool) {
	if r.syn.operand {
		run := r.cur.strs
		r.binary(plus) // -1 is a literal type
		if plus && run > 0 {
			r.cur.strs, r.cur.plus = run, true
		}
		return
	}
	r.cur.unary++
	r.check()
	r.exprStart()
}

// incDec reads ++ and --. Prefix or postfix, each is a level: esbuild
// reports `a----` as an invalid assignment target and goes on, nesting
// each -- in the one before.
func (r *reading) incDec() {
	r.cur.unary++
	r.check()
	if !r.syn.operand {
		r.exprStart()
	}
	// Postfix, or prefix on the next line: a / after it reads both ways.
	r.syn.slash = slashEither
}

// star reads `*`: a multiplication, or a generator's star before a
// member's or function's name, which follows.
func (r *reading) star(cue cues) {
	member := cue.keyNext || r.cur.flags&fClass != 0 && r.syn.stmtStart
	r.binary(true)
	r.cue.keyNext = member
	r.cue.funcName, r.cue.params = cue.funcName, cue.params // function* name
}

// angles reads < << <= <<= (n the `<` in it): each `<` may open type
// arguments (or, where an operand starts, a type assertion or a generic
// arrow's type parameters).
//
// After `a<T>`, esbuild may take the `>` for a comparison and what follows
// for an operand: `a<T><T><T>…` is a chain of type assertions to it, one
// recursion each, so cast counts the larger reading.
func (r *reading) angles(n int, cast bool) {
	flags := uint32(0)
	if r.syn.operand && !cast {
		r.cur.unary = 0 // a binary operator, or type arguments
	} else {
		flags = fPrefix
	}
	if r.syn.label {
		flags |= fLabel
	}
	for range n {
		r.push(kAngle, flags)
	}
	r.exprStart()
}

// closeAngles reads > >> >>> >= >>= >>>= and the runs of them the lexer
// splits (`>>>>`, which closes four type-argument lists): each `>` closes
// an open angle if the innermost frame is one; otherwise it is a
// comparison or a shift.
func (r *reading) closeAngles(tt js.TokenType) {
	n, assign := gts(tt)
	for !assign && r.i < len(r.code) && r.code[r.i] == '>' {
		k, a := gts(r.next().tt)
		n, assign = n+k, a
	}
	closed, prefix, label := false, false, false
	for range n {
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
			r.cue.castNext = true
			r.syn.label = label // esbuild drops the type arguments: `a<T>:` labels a
		}
		r.syn.slash = slashEither
	case assign && n > 1:
		r.assign(false) // >>= and >>>= are assignments: right-associative
		r.syn.slash = slashEither
	default:
		r.binary(false)
		r.syn.slash = slashEither
	}
}

// gts returns how many `>` the token tt is, and whether it ends in `=`.
func gts(tt js.TokenType) (int, bool) {
	switch tt {
	case js.GtToken:
		return 1, false
	case js.GtEqToken:
		return 1, true
	case js.GtGtToken:
		return 2, false
	case js.GtGtEqToken:
		return 2, true
	case js.GtGtGtToken:
		return 3, false
	}
	return 3, true // >>>=
}

// slashToken reads a regular expression or a division, or forks when it
// cannot tell the two apart.
func (r *reading) slashToken(t token, newline bool) *reading {
	mode := r.syn.slash
	if mode == slashDivide && newline {
		// A line break may have ended the statement (a declaration
		// without initializer, an overload signature).
		mode = slashEither
	}
	switch mode {
	case slashRegexp:
		r.regexp(t.start)
		r.operandEnd()
	case slashDivide:
		r.divide(t.tt)
	default:
		f := r.clone()
		r.regexp(t.start)
		r.operandEnd()
		f.divide(t.tt)
		return f
	}
	return nil
}

// divide reads / or /= as an operator.
func (r *reading) divide(tt js.TokenType) {
	if tt == js.DivEqToken {
		r.assign(true)
		return
	}
	r.binary(true)
}
