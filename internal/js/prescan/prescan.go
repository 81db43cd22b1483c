// Package prescan bounds a script's size and nesting before any parser
// reads it.
//
// The parsers a script meets (tdewolff's JavaScript parser in
// internal/js/analysis, esbuild's TypeScript stripper in
// internal/js/script) are recursive descent: source nested a few hundred
// thousand levels deep makes them recurse until Go's stack limit, which is
// a fatal error no recover catches, and esbuild's renamer and printer cost
// grows with the nesting times the size long before that. Check is an
// iterative, allocation-light scan (a few tens of milliseconds per MiB)
// that refuses such code first:
// LIMIT_EXCEEDED with limit "code_size" past the size bound, "code_depth"
// past a nesting bound, with the line and column where the bound was
// crossed.
//
// # What is counted
//
// Depth is what a recursive parser has pending at a point of the code: open
// brackets, parentheses, braces and template substitutions, TypeScript
// type-argument lists, and the chains a parser recurses on without any
// bracket: prefix operators (`!!!x`, `new new x`, `await await x`, type
// assertions `<T><T>x`), member, call and index chains (`a.b.c`, `a()()`),
// right-associative operators (`a=b=c`, `a**b**c`, `a=>b=>c`, `a?b:c?d:e`),
// comma sequences, and statements nested without braces (`if(a)if(b)`,
// `else if` chains, labels, `while(a)while(b)`). Scopes counts the nesting
// that costs esbuild most: blocks and function bodies, arrow functions and
// type-argument lists.
//
// # Never fewer than the parser
//
// An under-count is a crash, so where the scan cannot tell how a parser
// reads the code it counts the larger reading. A `/` that may start a
// regular expression or be a division (after `}`, `await`, `++`, a line
// break...) is read both ways: the scan forks, follows each reading, and
// merges them where they meet again; a reading that cannot be what a parser
// sees (an unterminated string or regular expression, a closing bracket
// that matches nothing) is dropped, because the parser stops there with a
// syntax error. The tokens are those of tdewolff's lexer (the analysis
// parser's own; see lex.go for what the scan reads itself), so brackets
// in strings, comments, regular expressions and template text never
// count.
//
// # Cost, not syntax
//
// Check refuses code for what it would cost, never for what it means: code
// the engine parses within the bounds passes. Scan also counts the names
// the code declares again in their scope, which only esbuild pays for
// (Report.KeepFromEsbuild); where a name goes (keys, class members,
// patterns' keys), a keyword is read as the name it is there.
package prescan

import (
	"fmt"
	"unicode/utf8"

	"github.com/pml-sandbox/pml/internal/fault"
)

// Default bounds. They were chosen by measurement (docs/design/scripts.md):
// the costliest shapes esbuild accepts at these bounds, repeated to fill
// the default code size, are stripped in well under a second, and real code
// stays far below them (TypeScript's own compiler, 9 MB of JavaScript,
// nests at most 60 deep and 12 scopes).
const (
	DefaultMaxDepth      = 256
	DefaultMaxScopes     = 32
	DefaultMaxScopeCount = 16384
)

// maxReadings caps how many readings of ambiguous slashes are followed at
// once, and maxWork (times the code's size, plus maxWorkSlack) the bytes
// they read in all; code that keeps more apart, or makes them read more,
// is refused rather than guessed.
const (
	maxReadings  = 16
	maxWork      = 8
	maxWorkSlack = 1 << 16
)

// Limits are the bounds Check enforces. A zero field takes its default;
// MaxBytes has none: zero means no size bound.
type Limits struct {
	// MaxBytes bounds the code's size in bytes (LIMIT_EXCEEDED
	// "code_size"), checked first.
	MaxBytes int
	// MaxDepth bounds the nesting of every kind (LIMIT_EXCEEDED
	// "code_depth").
	MaxDepth int
	// MaxScopes bounds the nesting of blocks, function bodies, arrow
	// functions and type-argument lists (LIMIT_EXCEEDED "code_depth").
	MaxScopes int
	// MaxScopeCount bounds how many blocks, function bodies and arrow
	// functions the code opens in all (LIMIT_EXCEEDED "code_size"):
	// esbuild's cost per function is what dense code multiplies.
	MaxScopeCount int
}

// Check returns nil when code (the body of the async function the guest and
// the parsers wrap it in) is within the limits, else a LIMIT_EXCEEDED
// error: limit "code_size" when it is too large, "code_depth" when it
// nests too deeply, with the line and column (1-based, in characters) in
// its message and in Details {line, column, bound}. It judges cost, never
// syntax: code within the limits passes whatever it means.
func Check(code string, l Limits) *fault.Error {
	_, err := Scan(code, l)
	return err
}

// Report is what Scan learnt of code within the limits.
type Report struct {
	// Repeats counts the names the code declares again in their scope
	// (let, const, class, enum members, private members, object
	// literals' __proto__ keys), and Repeated is the first of them as the
	// SyntaxError it is, with its line and column (nil when none). It is
	// no verdict on the code: the scan's reading of declarations is not a
	// parser's, and JavaScript is the engine's to judge.
	Repeats  int
	Repeated *fault.Error

	// paramsTooLong, when set, refuses code whose argument or parameter
	// lists repeat names so far apart, and so often, that esbuild would
	// take quadratic time measuring each back to its first (where they
	// are parameters). Calls may repeat names, and so may sloppy code's
	// simple parameters: it is no syntax error, and not among Repeats.
	paramsTooLong *fault.Error
}

// KeepFromEsbuild returns why esbuild must not read the code, or nil: a
// SyntaxError when the code declares names again more than maxRepeats
// times (each is a syntax error in every parser, and the others stop at
// the first; esbuild reports every one with a note it measures back to
// the first declaration, which many of them make quadratic), or a
// LIMIT_EXCEEDED "code_size" when argument or parameter lists repeat
// names too far apart too often (see maxParamScan). internal/js/script
// refuses such code as TypeScript, and lets the engine judge it as
// JavaScript.
func (r Report) KeepFromEsbuild() *fault.Error {
	switch {
	case r.Repeats > maxRepeats:
		return r.Repeated
	case r.paramsTooLong != nil:
		return r.paramsTooLong
	}
	return nil
}

// Scan is Check, with what it learnt of code within the limits.
func Scan(code string, l Limits) (Report, *fault.Error) {
	if l.MaxBytes > 0 && len(code) > l.MaxBytes {
		return Report{}, fault.Limitf(fault.LimitCodeSize, "code is %d bytes; the limit is %d", len(code), l.MaxBytes)
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultMaxDepth
	}
	if l.MaxScopes <= 0 {
		l.MaxScopes = DefaultMaxScopes
	}
	if l.MaxScopeCount <= 0 {
		l.MaxScopeCount = DefaultMaxScopeCount
	}
	r := scan(code, l)
	if r.refused == refuseNone {
		rep := Report{Repeats: r.repeats}
		if r.paramScan > maxParamScan {
			line, col := position(code, r.paramAt)
			rep.paramsTooLong = fault.Limitf(fault.LimitCodeSize, "code repeats names in one argument or parameter list too often, too far apart, for TypeScript (from line %d, column %d)", line, col)
			rep.paramsTooLong.Details = map[string]int{"line": line, "column": col}
		}
		if r.repeats > 0 {
			line, col := position(code, r.repeatAt)
			rep.Repeated = &fault.Error{Code: fault.ScriptError,
				Message: fmt.Sprintf("SyntaxError: %q has already been declared (line %d, column %d)", r.repeatName, line, col),
				Details: map[string]int{"line": line, "column": col}}
		}
		return rep, nil
	}
	line, col := position(code, r.at)
	var e *fault.Error
	switch r.refused {
	case refuseDepth:
		e = fault.Limitf(fault.LimitCodeDepth, "code nests more than %d levels deep at line %d, column %d", l.MaxDepth, line, col)
		e.Details = map[string]int{"line": line, "column": col, "bound": l.MaxDepth}
	case refuseScopes:
		e = fault.Limitf(fault.LimitCodeDepth, "code nests more than %d blocks, functions or type arguments deep at line %d, column %d", l.MaxScopes, line, col)
		e.Details = map[string]int{"line": line, "column": col, "bound": l.MaxScopes}
	case refuseScopeCount:
		e = fault.Limitf(fault.LimitCodeSize, "code opens more than %d blocks and functions (the last at line %d, column %d)", l.MaxScopeCount, line, col)
		e.Details = map[string]int{"line": line, "column": col, "bound": l.MaxScopeCount}
	case refuseComments:
		e = fault.Limitf(fault.LimitCodeSize, "code has too many block comments on long lines (line %d, column %d): put them on lines of their own", line, col)
		e.Details = map[string]int{"line": line, "column": col}
	case refuseFolds:
		e = fault.Limitf(fault.LimitCodeSize, "code joins too much string literal text with + in one expression (line %d, column %d): join an array, or write one literal", line, col)
		e.Details = map[string]int{"line": line, "column": col}
	default:
		e = fault.Limitf(fault.LimitCodeDepth, "code is too ambiguous to bound its nesting at line %d, column %d (too many ways to read its '/')", line, col)
		e.Details = map[string]int{"line": line, "column": col}
	}
	return Report{}, e
}

// position returns the 1-based line and character column of byte offset
// off, counting line terminators as the parsers do (\n, \r\n, \r, U+2028,
// U+2029).
func position(code string, off int) (line, col int) {
	line, start := 1, 0
	for i := 0; i < off && i < len(code); i++ {
		switch code[i] {
		case '\n':
			line, start = line+1, i+1
		case '\r':
			if i+1 < len(code) && code[i+1] == '\n' && i+1 < off {
				i++
			}
			line, start = line+1, i+1
		case 0xE2:
			if isLS(code, i) {
				line, start = line+1, i+3
				i += 2
			}
		}
	}
	return line, utf8.RuneCountInString(code[start:min(off, len(code))]) + 1
}

// isLS reports whether code[i:] starts with U+2028 or U+2029.
func isLS(code string, i int) bool {
	return i+2 < len(code) && code[i] == 0xE2 && code[i+1] == 0x80 && (code[i+2] == 0xA8 || code[i+2] == 0xA9)
}

// Measure returns the deepest nesting and scope nesting of code, as Check
// counts them, with no bound.
func Measure(code string) (depth, scopes, opened int) {
	r := scan(code, Limits{MaxDepth: 1 << 30, MaxScopes: 1 << 30, MaxScopeCount: 1 << 30})
	return r.depth, r.scopes, r.opened
}
