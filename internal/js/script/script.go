// Package script turns what a caller sent into what the sandbox runs: it
// reads JavaScript or TypeScript (the body of an async function), strips
// TypeScript's types, checks the code statically (the mcp.<server>.<tool>
// names it uses, through internal/js/analysis), and maps positions the engine
// reports back to the source as written.
//
// # Which language
//
// LangTS strips the types first. LangJS runs the code as JavaScript. With
// no language the code is read as JavaScript; if the analysis parser cannot
// read it, the types are stripped; if that fails too, the original runs
// unchanged and QuickJS judges it. Plain JavaScript therefore pays one parse,
// as before TypeScript was accepted.
//
// # Bounded before it is read
//
// Every parser here recurses on nesting, and esbuild's cost grows with the
// nesting times the size: internal/js/prescan bounds the code's size (the
// engine's code-size limit) and nesting first, in one iterative pass, so
// no caller can overflow the Go stack or spend seconds here. Every caller
// (the executor's execute path, capability saves and analysis) goes through
// Prepare.
//
// # Never stricter than the engine
//
// The analysis parser is stricter than QuickJS in places (sloppy-mode
// `for (var k = 2 in o)`). Code it cannot read still runs: its tool names
// are then checked when each call happens, as for computed names, and a
// real syntax error is the engine's SyntaxError, with its position.
package script

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/js/analysis"
	"github.com/pml-sandbox/pml/internal/js/prescan"
)

// The languages a request may name: the contract's words
// (execution.Lang*), here for the code that prepares scripts.
const (
	LangAuto = execution.LangAuto // JavaScript, else TypeScript, else let the engine judge
	LangJS   = execution.LangJS   // JavaScript only
	LangTS   = execution.LangTS   // TypeScript: strip the types first
)

// Prepared is code ready to run.
type Prepared struct {
	// Code is the JavaScript the sandbox runs.
	Code string
	// Refs are the tools the code names, positions in the source as
	// written.
	Refs analysis.Refs
	// Checked is false when the analysis parser could not read Code: Refs
	// is then empty and every tool name is checked at call time.
	Checked bool
	// TypeScript reports that Code was stripped from TypeScript.
	TypeScript bool
	// Unread, when no parser read the code (neither the analysis parser
	// nor, unless the language is LangJS, esbuild's), is the analysis
	// parser's syntax error: likely the engine's verdict too, which is
	// for callers that cannot wait for it (saving a capability).
	Unread *fault.Error
	// Top is what the code's top level declares (when Checked): whether
	// it declares its own `args`, and the names a session keeps.
	Top analysis.TopLevel

	sites  []analysis.Site // where Code calls its tools, positions as written
	ts     *stripped       // nil for JavaScript
	unread *fault.Error    // the analysis parser's error, when it failed
	added  *insertion      // what Persist added to Code, nil until then
	parsed *analysis.Parsed
}

// Parsed returns the analysis parser's tree of Code, kept when
// Limits.KeepParse asked for it (nil otherwise, and for code the parser
// could not read), and lets go of it: the learning loop reads it once.
func (p *Prepared) Parsed() *analysis.Parsed {
	parsed := p.parsed
	p.parsed = nil
	return parsed
}

// Limits bound what Prepare reads before any parser sees it.
type Limits struct {
	// CodeBytes bounds the size of the code as sent and, for TypeScript,
	// as stripped (LIMIT_EXCEEDED "code_size"): the code-size limit of
	// the engine that will run it. Zero is the engine's default
	// (execution.DefaultCodeBytes).
	CodeBytes int
	// KeepParse keeps the analysis parser's tree for Prepared.Parsed, so
	// that the learning loop (internal/learn) reads the code without
	// parsing it again.
	KeepParse bool
}

// Prepare reads code in lang (LangAuto, LangJS or LangTS) under the
// engine's default code-size limit; see PrepareWithLimits.
func Prepare(code, lang string) (*Prepared, error) {
	return PrepareWithLimits(code, lang, Limits{})
}

// PrepareWithLimits reads code in lang (LangAuto, LangJS or LangTS). Its
// errors are *fault.Error: InvalidRequest for an unknown language;
// LimitExceeded before any parser runs, for code over l.CodeBytes (limit
// "code_size") or nested deeper than the parsers are allowed to recurse
// (limit "code_depth", see internal/js/prescan), and for TypeScript whose
// stripped JavaScript is over l.CodeBytes; ScriptError for TypeScript
// that does not parse (with lang LangTS) and for code that leaves the
// function body it is wrapped in. JavaScript the engine parses within the
// bounds is never refused (FuzzPrepareAgreesWithEngine,
// TestCorpusAgreesWithEngine).
func PrepareWithLimits(code, lang string, l Limits) (*Prepared, error) {
	if ferr := execution.CheckLang(lang); ferr != nil {
		return nil, ferr
	}
	if l.CodeBytes <= 0 {
		l.CodeBytes = execution.DefaultCodeBytes
	}
	// The parsers below recurse on nesting and cost more than linear time
	// in it: bound both before any of them sees the code.
	scan, ferr := prescan.Scan(code, prescan.Limits{MaxBytes: l.CodeBytes})
	if ferr != nil {
		return nil, ferr
	}
	if lang == LangTS {
		if ferr := scan.KeepFromEsbuild(); ferr != nil {
			// esbuild would take quadratic time to report it.
			return nil, ferr
		}
		ts, ferr := stripTypes(code, l.CodeBytes)
		if ferr != nil {
			return nil, ferr
		}
		return analyse(ts.js, ts, l.KeepParse)
	}
	p, err := analyse(code, nil, l.KeepParse)
	if err != nil || p.Checked {
		return p, err
	}
	if lang == LangAuto && scan.KeepFromEsbuild() == nil {
		// Not JavaScript the parser reads: perhaps TypeScript.
		// esbuild reading it settles it: what runs is its JavaScript,
		// checked if the analysis parser reads that. (Code that declares
		// names again past the pre-scan's bound never reaches esbuild:
		// as JavaScript it is the engine's to judge.)
		ts, ferr := stripTypes(code, l.CodeBytes)
		if ferr == nil {
			return analyse(ts.js, ts, l.KeepParse)
		}
		if ferr.Code == fault.LimitExceeded {
			return nil, ferr
		}
	}
	p.Unread = p.unread
	return p, nil
}

// analyse checks js statically. Code the parser cannot read is returned
// unchecked, to run as it is.
func analyse(js string, ts *stripped, keep bool) (*Prepared, error) {
	p := &Prepared{Code: js, TypeScript: ts != nil, ts: ts}
	parsed, err := analysis.Parse(js)
	var unreadable *analysis.UnreadableError
	switch {
	case errors.As(err, &unreadable):
		// Dynamic: nothing is known of what the code names.
		p.Refs = analysis.Refs{Dynamic: true, Tools: []analysis.Ref{}}
		p.unread = unreadable.Fault
		p.mapSyntaxError(p.unread)
		return p, nil
	case err != nil:
		fe := fault.As(err)
		p.mapSyntaxError(fe)
		return nil, fe
	}
	refs := parsed.Refs
	if keep {
		p.parsed = parsed
	}
	p.sites = parsed.Sites
	if ts != nil {
		for i, r := range refs.Tools {
			if r.Line > 0 {
				refs.Tools[i].Line, refs.Tools[i].Column = ts.position(r.Line, r.Column)
			}
		}
		for i, s := range p.sites {
			p.sites[i].Line, p.sites[i].Column = ts.position(s.Line, s.Column)
		}
	}
	p.Refs, p.Top, p.Checked = refs, parsed.Top, true
	return p, nil
}

// Position maps a 1-based line and character column of Code to the source
// as written. A position past the code (the engine reports an unclosed
// bracket at the wrapper's closing `})`) is the end of its last line.
func (p *Prepared) Position(line, col int) (int, int) {
	if line < 1 || col < 1 {
		return line, col
	}
	line, col = p.added.position(line, col)
	if p.ts != nil {
		return p.ts.position(line, col)
	}
	if lines := splitLines(p.written()); line > len(lines) {
		return len(lines), lines.lineChars(len(lines)-1) + 1
	}
	return line, col
}

// frame matches a position in a stack frame of the script.
var frame = regexp.MustCompile(`main\.js:(\d+):(\d+)`)

// MapError rewrites the positions in an error of a run of Code so they
// point at the source as written: stack frames (`main.ts:L:C` for
// TypeScript) and the line and column of a SyntaxError. A SyntaxError of
// unchecked code gets the line and column of its first frame, in the shape
// the static check gives them. e may be nil.
func (p *Prepared) MapError(e *fault.Error) {
	if e == nil || e.Code != fault.ScriptError {
		return
	}
	name := "main.js"
	if p.ts != nil {
		name = "main.ts"
	}
	first := [2]int{}
	e.Stack = frame.ReplaceAllStringFunc(e.Stack, func(m string) string {
		sm := frame.FindStringSubmatch(m)
		l, _ := strconv.Atoi(sm[1])
		c, _ := strconv.Atoi(sm[2])
		l, c = p.Position(l, c)
		if first[0] == 0 {
			first = [2]int{l, c}
		}
		return fmt.Sprintf("%s:%d:%d", name, l, c)
	})
	if !p.Checked && e.Details == nil && first[0] > 0 && strings.HasPrefix(e.Message, "SyntaxError:") {
		e.Message = fmt.Sprintf("%s (line %d, column %d)", e.Message, first[0], first[1])
		e.Details = map[string]int{"line": first[0], "column": first[1]}
	}
}

// mapSyntaxError moves a static check's "(line L, column C)" from Code to
// the source as written.
func (p *Prepared) mapSyntaxError(e *fault.Error) {
	d, ok := e.Details.(map[string]int)
	if p.ts == nil || !ok {
		return
	}
	old := fmt.Sprintf(" (line %d, column %d)", d["line"], d["column"])
	l, c := p.Position(d["line"], d["column"])
	e.Message = strings.TrimSuffix(e.Message, old) + fmt.Sprintf(" (line %d, column %d)", l, c)
	e.Details = map[string]int{"line": l, "column": c}
}
