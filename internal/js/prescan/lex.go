package prescan

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/tdewolff/parse/v2"
	"github.com/tdewolff/parse/v2/js"
)

// The tokens are tdewolff's JavaScript lexer's, the analysis parser's own
// (iterative: no input makes it recurse), driven as a parser drives it: a
// lexer cannot tell a `/` that starts a regular expression from a
// division, so the reading tells it (js.Lexer.RegExp), or forks when it
// cannot tell either. Each reading has a lexer of its own. What is the
// reading's, not the lexer's:
//
//   - Template text. The lexer keeps the nesting of substitutions in state
//     a fork cannot copy, and a reading forks inside substitutions (`${a
//     / b}`): the reading keeps that nesting in its frames (kSubst) and
//     reads the text between them itself (templateText). The lexer never
//     sees a backtick.
//   - HTML-like comments. The lexer reads `<!--` (and `-->` after a line
//     break) one way; a parser may read them either way, so the reading
//     forks and each fork gets the token it needs.
//   - What the lexer would refuse. Every error the lexer reports costs it
//     a copy of the whole code and a count of its lines up to the error
//     (parse.NewErrorLexer), and hostile code can make one at every token:
//     the reading never lets it err. It checks first (guard) what the
//     lexer would refuse, cheaply, and reads that as the scan always has:
//     a string or regular expression cut by a line break ends the reading
//     (no parser reads on), and what one of the parsers may still read
//     (esbuild's `a?= 1` is an optional member with an initializer,
//     QuickJS takes legacy octal `010`, a name may hold a letter newer
//     than Go's Unicode tables) is read as the larger reading.
//
// Where a reading moves on by itself (template text, a token it made up, a
// fork, a number, after which the lexer would refuse a name), it restarts
// its lexer there: a lexer's state belongs to where it stopped, and a
// fresh one at a token's start reads what follows right.

// Tokens the lexer has no type for, which the reading makes.
const (
	tokBacktick js.TokenType = 0x8000 + iota // a template literal starts: its text is the reading's to read
	tokAt                                    // @, before a decorator
)

// token is one token of the code, code[start:end].
type token struct {
	tt         js.TokenType
	start, end int
}

// source returns the code as the lexer reads it, NUL-terminated as the
// lexer wants it, and the same as a string. Bytes that are not UTF-8 are
// read as a letter: the lexer decodes them its own way (0xC3 then `(`
// reads as one letter, hiding the bracket from the count), while a parser
// that decodes as Go does sees the bracket; the scan has always read such
// a byte as part of a name.
func source(code string) (parse.Input, string) {
	buf := make([]byte, len(code), len(code)+1)
	copy(buf, code)
	text := code
	if !utf8.ValidString(code) {
		for i := 0; i < len(code); {
			ch, n := utf8.DecodeRuneInString(code[i:])
			if ch == utf8.RuneError && n == 1 {
				buf[i] = 'x'
			}
			i += n
		}
		text = string(buf)
	}
	return *parse.NewInputBytes(buf), text
}

// restart gives the reading a fresh lexer at its offset, reading src's
// buffer.
func (r *reading) restart(src *parse.Input) {
	*r.in = *src
	r.in.Move(r.i - r.in.Offset())
	r.in.Skip()
	r.lex = *js.NewLexer(r.in)
}

// next returns the next token from the reading's lexer, restarted first if
// the reading moved on without it.
func (r *reading) next() token {
	if r.in.Offset() != r.i {
		r.restart(r.in)
	}
	start := r.i
	tt, _ := r.lex.Next()
	r.i = r.in.Offset()
	if tt == js.ErrorToken {
		// What guard should have kept from the lexer (FuzzScan counts
		// them): read as a name, the larger reading.
		r.s.unguarded++
		tt = js.IdentifierToken
	}
	return token{tt, start, r.i}
}

// step reads one token (or a blank, a comment, a run of template text)
// and returns a new reading when the token reads two ways: a `/` that may
// start a regular expression, an HTML-like comment.
func (r *reading) step() *reading {
	if r.syn.template {
		r.templateText()
		return nil
	}
	code, start := r.code, r.i
	switch code[start] {
	case '`':
		r.i++
		return r.token(token{tokBacktick, start, r.i})
	case '<':
		if strings.HasPrefix(code[start:], "<!--") {
			// A comment to the end of the line where a parser allows
			// HTML-like comments: read it both ways.
			return r.htmlComment(js.LtToken, 1)
		}
	case '-':
		if !strings.HasPrefix(code[start:], "-->") {
			break
		}
		if r.cue.lineStart {
			// At a line's start, such a comment too.
			return r.htmlComment(js.DecrToken, 2)
		}
		r.i += 2
		return r.token(token{js.DecrToken, start, r.i})
	}
	if t, read, guarded := r.guard(); guarded {
		if !read {
			return nil
		}
		return r.token(t)
	}
	t := r.next()
	// Blanks and comments are not tokens: what the previous token allows
	// carries across them.
	switch {
	case t.tt == js.WhitespaceToken:
		return nil
	case t.tt == js.LineTerminatorToken:
		r.cue.newline, r.cue.lineStart, r.lineAt = true, true, t.end
		return nil
	case t.tt == js.CommentToken || t.tt == js.CommentLineTerminatorToken:
		r.comment(t)
		return nil
	case js.IsNumeric(t.tt):
		r.restart(r.in) // the lexer refuses a name right after a number
	case t.start == r.numEnd && js.IsIdentifierName(t.tt):
		// A name right after a number (`1in`, `0x`, `1.toString`): the
		// scan reads it as part of the number, as it always has.
		return nil
	}
	return r.token(t)
}

// htmlComment forks at an HTML-like comment: the fork reads it as a
// comment (a fresh lexer is at a line's start, where it reads `-->` as
// one too), the reading goes on with the n-byte operator tt it starts with.
func (r *reading) htmlComment(tt js.TokenType, n int) *reading {
	f := r.clone()
	f.lex.Next()
	f.i = f.in.Offset()
	start := r.i
	r.i += n
	r.token(token{tt, start, r.i})
	return f
}

// comment reads a comment token. esbuild scans back from every block
// comment to its line's start, which the scan bounds; a line break inside
// one counts as one between the tokens around it.
func (r *reading) comment(t token) {
	code := r.code
	if code[t.start+1] != '*' {
		return
	}
	r.commentScan += t.start - r.lineAt
	if r.commentScan > maxCommentScan && r.refused == refuseNone {
		r.refused, r.at = refuseComments, t.start
	}
	if t.tt == js.CommentLineTerminatorToken {
		r.cue.newline, r.cue.lineStart = true, true
		// Where the last line break inside it starts, plus one: the
		// scan has always counted from there, even in U+2028.
		for j := t.end - 1; j >= t.start; j-- {
			if c := code[j]; c == '\n' || c == '\r' || isLS(code, j) {
				r.lineAt = j + 1
				break
			}
		}
	}
}

// guard checks whether the lexer would refuse the token at r.i, and if
// so reads it as the scan always has: it returns that token, whether
// there is one to read (not a blank, not the end of the reading), and
// whether the lexer would have refused it.
func (r *reading) guard() (t token, read, guarded bool) {
	text, i := r.s.text, r.i
	t = token{start: i, end: i + 1}
	switch c := text[i]; {
	case c == '\'' || c == '"':
		end, ok := quoteEnd(text, i)
		if ok {
			return t, false, false
		}
		// A string cut by a line break or the end: no parser reads on,
		// but it is a literal all the same (what it folds counts).
		r.i, r.dead = end, true
		t.tt, t.end = js.StringToken, end
		return t, true, true
	case c == '/':
		if i+1 < len(text) && text[i+1] == '*' && r.s.unclosed(i) {
			// A block comment that never ends.
			r.comment(token{js.CommentToken, i, len(text)})
			r.i, r.dead = len(text), true
			return t, false, true
		}
		return t, false, false
	case isDigit(c) || c == '.' && i+1 < len(text) && isDigit(text[i+1]):
		end, refused := numberEnd(text, i)
		if !refused {
			return t, false, false
		}
		// A number the lexer does not take (legacy octal `010`, `1e`): a
		// number still, and what follows is part of it.
		r.i = end
		t.tt, t.end = js.DecimalToken, end
		return t, true, true
	case c == '#':
		if identStart(text, i+1) {
			return t, false, false
		}
	case c == '\\':
		if escape(text, i) {
			return t, false, false
		}
	case c >= utf8.RuneSelf:
		ch, n := utf8.DecodeRuneInString(text[i:])
		if ch == 0x2028 || ch == 0x2029 || ch == 0xA0 || ch == 0xFEFF || unicode.Is(unicode.Zs, ch) || identStart(text, i) {
			return t, false, false
		}
		t.end = i + n
	case c == '?' || c == '~':
		if i+1 >= len(text) || text[i+1] != '=' {
			return t, false, false
		}
	case c < ' ' && c != '\t' && c != '\v' && c != '\f' && c != '\n' && c != '\r' || c == 0x7F:
		// A control character no parser reads outside a string: the
		// parsers stop at it, but skipping it is the larger reading.
		r.i++
		return t, false, true
	case c != '@':
		return t, false, false
	}
	r.i = t.end
	switch text[i] {
	case '?':
		t.tt = js.QuestionToken // `?=`: esbuild reads an optional mark, then `=`
	case '~':
		t.tt = js.BitNotToken // `~=`
	case '@':
		t.tt = tokAt
	default:
		// A character no name holds by Go's tables (`#`, `\`, `€`, a
		// newer letter): part of a name to the scan.
		t.tt = js.IdentifierToken
	}
	return t, true, true
}

// quoteEnd returns where the string literal at text[i] ends, as the lexer
// reads it, and false when a line break or the end cuts it first (and
// where).
func quoteEnd(text string, i int) (int, bool) {
	q := text[i]
	for j := i + 1; j < len(text); {
		switch c := text[j]; {
		case c == q:
			return j + 1, true
		case c == '\\':
			// What the lexer skips after a backslash: a line
			// continuation, the quote or a backslash.
			j++
			switch {
			case strings.HasPrefix(text[j:], "\r\n"):
				j += 2
			case isLS(text, j):
				j += 3
			case j < len(text) && strings.IndexByte("\n\r\\", text[j]) >= 0, j < len(text) && text[j] == q:
				j++
			}
		case c == '\n' || c == '\r':
			return j, false
		default:
			j++
		}
	}
	return len(text), false
}

// regexpEnds reports whether the regular expression at text[i] (its `/`)
// ends before a line break, as the lexer reads it, and if not where it is
// cut.
func regexpEnds(text string, i int) (int, bool) {
	class := false
	for j := i + 1; j < len(text); j++ {
		switch c := text[j]; {
		case c == '/' && !class:
			return j, true
		case c == '[':
			class = true
		case c == ']':
			class = false
		case c == '\\':
			if j++; j >= len(text) || lineBreak(text, j) {
				return j, false
			}
		case lineBreak(text, j):
			return j, false
		}
	}
	return len(text), false
}

// numberEnd returns where the number at text[i] ends if the lexer would
// refuse it (legacy octal `010`, whose `0` the lexer reads alone, or an
// exponent without digits, `1e`), and whether it would.
func numberEnd(text string, i int) (int, bool) {
	next := func(j int) byte {
		if j < len(text) {
			return text[j]
		}
		return 0
	}
	if text[i] == '0' {
		switch c := next(i + 1); {
		case isDigit(c):
			return i + 1, true
		case strings.IndexByte("xXbBoO", c) >= 0:
			return 0, false
		}
	}
	j := i
	for isDigit(next(j)) || next(j) == '_' {
		j++
	}
	if next(j) == '.' {
		j++
		for isDigit(next(j)) || next(j) == '_' {
			j++
		}
	}
	if c := next(j); c != 'e' && c != 'E' {
		return 0, false
	}
	k := j + 1
	if c := next(k); c == '+' || c == '-' {
		k++
	}
	return j, !isDigit(next(k))
}

// identStart reports whether a name starts at text[i] as the lexer reads
// names.
func identStart(text string, i int) bool {
	switch {
	case i >= len(text):
		return false
	case text[i] == '\\':
		return escape(text, i)
	case text[i] < utf8.RuneSelf:
		return isWordStart(text[i]) && text[i] != '#'
	}
	return js.IsIdentifierStart([]byte(text[i:min(i+utf8.UTFMax, len(text))]))
}

// escape reports whether text[i:] starts with a \u escape the lexer
// takes in a name: \uXXXX or \u{X…}.
func escape(text string, i int) bool {
	if !strings.HasPrefix(text[i:], "\\u") {
		return false
	}
	j := i + 2
	brace := j < len(text) && text[j] == '{'
	if brace {
		j++
	}
	k := j
	for k < len(text) && (brace || k < j+4) && strings.IndexByte("0123456789abcdefABCDEF", text[k]) >= 0 {
		k++
	}
	if brace {
		return k > j && k < len(text) && text[k] == '}'
	}
	return k == j+4
}

// lineBreak reports whether a line terminator starts at text[j].
func lineBreak(text string, j int) bool {
	return j < len(text) && (text[j] == '\n' || text[j] == '\r' || isLS(text, j))
}

// regexp reads the `/` (or `/=`) just read, at start, as a regular
// expression and its flags; one cut by a line break or the end is a
// syntax error.
func (r *reading) regexp(start int) {
	if end, ok := regexpEnds(r.s.text, start); !ok {
		r.i, r.dead = end, true
		return
	}
	r.lex.RegExp()
	r.i = r.in.Offset()
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
			r.syn.template = false
			r.literal((r.i - int(r.cur.tmpl)) * tmplWeight)
			return
		case '$':
			if r.i+1 < len(code) && code[r.i+1] == '{' {
				r.i += 2
				r.syn.template = false
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

// stringLine moves lineAt past the last line continuation in the string
// literal t.
func (r *reading) stringLine(t token) {
	if j := strings.LastIndexAny(r.code[t.start:t.end], "\n\r"); j >= 0 {
		r.lineAt = t.start + j + 1
	}
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isWordStart(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_' || c == '$' || c == '#' || c == '\\'
}
