package script

import (
	"strings"
	"unicode/utf8"

	"github.com/evanw/esbuild/pkg/api"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/js/analysis"
)

// The TypeScript is stripped as the body it is: wrapped in an async
// function as the guest wraps JavaScript, so top-level `await` and `return`
// are legal. Without the guest's `args` parameter, as the analysis reads
// it: a script may declare its own `args` (analysis.TopLevel), and the
// parameter binds nothing the stripping needs. esbuild prints the wrapper
// back as outHead … outTail, which is cut off again.
const (
	tsHead  = "(async function () {"
	tsTail  = "\n})"
	outHead = "(async function() {\n"
	outTail = "});\n"
)

// tsHeadChars is the wrapper's length on the first line of the source.
var tsHeadChars = utf8.RuneCountInString(tsHead)

// stripped is TypeScript turned into JavaScript with the way back.
type stripped struct {
	js  string     // the function body, as JavaScript
	m   *sourceMap // esbuild's output → the wrapped TypeScript
	src text       // the wrapped TypeScript
	out text       // esbuild's whole output, wrapper included
	// userLines is the number of lines of the TypeScript as written.
	userLines int
}

// stripTypes removes TypeScript's types from code with esbuild's transform
// API (pure Go, no type checking: annotations, interfaces, `as`, generics,
// `declare` go; enums and parameter properties become JavaScript). A
// syntax error is a ScriptError "SyntaxError: … (line L, column C)" in the
// TypeScript's coordinates.
//
// esbuild was chosen because it is the TypeScript stripper most of the
// JavaScript world already runs (Vite, tsx), it is pure Go with no cgo or
// subprocess, and it transforms a few kilobytes in well under a
// millisecond; tdewolff/parse, the analysis parser, reads no TypeScript.
//
// esbuild prints nested blocks indented, so its output may be many times
// the code's size (nesting × statements); JavaScript over codeBytes is
// refused here, as the engine would refuse it, before it is analysed.
func stripTypes(code string, codeBytes int) (*stripped, *fault.Error) {
	src := tsHead + code + tsTail
	res := api.Transform(src, api.TransformOptions{
		Loader:     api.LoaderTS,
		Target:     api.ESNext, // strip types only: no syntax is lowered
		Charset:    api.CharsetUTF8,
		Sourcemap:  api.SourceMapExternal,
		Sourcefile: "main.ts",
		LogLevel:   api.LogLevelSilent,
		// LogLevelSilent only hides messages: esbuild still builds each
		// one, with the line text of the note it points back to, which is
		// quadratic in the code's size when many point far back (3.7 s for
		// 100 KB of duplicate cases). Warnings are never read here, so
		// none is built.
		LogOverride: silentWarnings,
	})
	userLines := len(splitLines(code))
	if len(res.Errors) > 0 {
		return nil, esbuildError(res.Errors[0], code, userLines)
	}
	out := string(res.Code)
	if !strings.HasPrefix(out, outHead) || !strings.HasSuffix(out, outTail) {
		// esbuild added code outside the function (helpers for legacy
		// decorators), or the code closed the function body: the
		// wrapper-free reading cannot be cut back out.
		return nil, analysis.SyntaxErrorAt("TypeScript that does not compile to one function body (legacy decorators, or a stray '}')", 1, 1)
	}
	body := strings.TrimSuffix(out[len(outHead):len(out)-len(outTail)], "\n")
	if len(body) > codeBytes {
		return nil, fault.Limitf(fault.LimitCodeSize, "code is %d bytes once its TypeScript types are stripped; the limit is %d", len(body), codeBytes)
	}
	m, err := parseSourceMap(res.Map)
	if err != nil {
		return nil, fault.Wrap(fault.Internal, err, "stripping TypeScript")
	}
	return &stripped{js: body, m: m, src: splitLines(src), out: splitLines(out), userLines: userLines}, nil
}

// silentWarnings silences every JavaScript and TypeScript warning esbuild
// can give (its message IDs, as its documentation lists them). Built once;
// esbuild only reads it.
var silentWarnings = func() map[string]api.LogLevel {
	ids := []string{
		"assert-to-with", "assert-type-json", "assign-to-constant", "assign-to-define", "assign-to-import",
		"bigint", "call-import-namespace", "class-name-will-throw", "commonjs-variable-in-esm",
		"confusing-typescript-cast", "delete-super-property", "direct-eval", "duplicate-case",
		"duplicate-class-member", "duplicate-object-key", "empty-import-meta", "equals-nan",
		"equals-negative-zero", "equals-new-object", "html-comment-in-js", "impossible-typeof",
		"indirect-require", "private-name-will-throw", "semicolon-after-return", "suspicious-boolean-not",
		"suspicious-define", "suspicious-logical-operator", "suspicious-nullish-coalescing",
		"this-is-undefined-in-esm", "unsupported-dynamic-import", "unsupported-jsx-comment",
		"unsupported-regexp", "unsupported-require-call",
	}
	m := make(map[string]api.LogLevel, len(ids))
	for _, id := range ids {
		m[id] = api.LogLevelSilent
	}
	return m
}()

// esbuildError converts an esbuild message to the user's coordinates.
func esbuildError(msg api.Message, code string, userLines int) *fault.Error {
	line, col := 1, 1
	if loc := msg.Location; loc != nil {
		line = loc.Line
		col = utf8.RuneCountInString(loc.LineText[:min(loc.Column, len(loc.LineText))]) + 1
		if line == 1 {
			col -= tsHeadChars
		}
	}
	if line > userLines {
		// The error is at our closing `})`: the code left a bracket open.
		// It is reported at the end of the code.
		lines := splitLines(code)
		line, col = userLines, utf8.RuneCountInString(lines[userLines-1])+1
	}
	return analysis.SyntaxErrorAt(msg.Text, line, max(col, 1))
}

// position maps a 1-based line and character column of s.js to the
// TypeScript as written.
func (s *stripped) position(line, col int) (int, int) {
	gl := line // line 0 of the output is the wrapper's head
	indent := 0
	if gl < len(s.out) {
		indent = len(s.out[gl]) - len(strings.TrimLeft(s.out[gl], " \t"))
	}
	sl, sc, ok := s.m.lookup(gl, s.out.utf16Col(gl, col-1), indent)
	if !ok {
		return line, col
	}
	if sl >= s.userLines {
		// Past the code: our closing `})`. The end of the last line.
		sl, sc = s.userLines-1, s.src.utf16Col(s.userLines-1, s.src.lineChars(s.userLines-1))
	}
	c := s.src.charCol(sl, sc)
	if sl == 0 {
		c -= tsHeadChars
	}
	return sl + 1, max(c, 0) + 1
}
