package script

import (
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/pml-sandbox/pml/internal/js/analysis"
)

// Sessions keep what an execution declares at its top level for the next
// one, as a REPL does. The declarations are not rewritten: within one
// execution they keep every property the engine gives them (the temporal
// dead zone, `const` refusing assignment, function hoisting, classes,
// destructuring, closures) at the speed of local variables. Persist adds
// one statement at the top of the body that hands the guest, for each
// name, a function reading the binding and (unless it is a `const`) one
// writing it; once the execution has succeeded, the guest makes each name a
// property of the global object that reads and writes that binding (see
// guest-runtime/prelude.js). A later execution finds the names as globals,
// and one that declares a name again shadows it and, when it succeeds,
// replaces it: closures from any execution share the one binding they
// captured, a reassignment from a later execution reaches it, and an
// assignment to a `const` throws as it would have.

// ScopeRegistrar is the global the added statement calls: the guest's, not
// writable, not configurable, so no script can replace it. A script whose
// own top level declares the name keeps nothing (Persist reports that).
const ScopeRegistrar = "__pml_scope"

// notKept are names a session never keeps, though a top level may declare
// them: `args` is each execution's own input; `arguments` and `eval`
// cannot be assigned in strict code; the rest are words some mode reserves
// (an arrow function naming them may not parse), or globals the guest
// holds fixed.
var notKept = map[string]bool{
	"args": true, "arguments": true, "eval": true,
	"let": true, "yield": true, "await": true, "static": true, "implements": true, "interface": true,
	"package": true, "private": true, "protected": true, "public": true,
	"undefined": true, "NaN": true, "Infinity": true, "mcp": true, ScopeRegistrar: true,
}

// insertion is text added to Code, to take back out of positions.
type insertion struct {
	line, col int // where, 1-based, columns in characters
	chars     int // how long, in characters
	at        int // byte offset in Code
	text      string
}

// position maps a position in Code with the insertion back to Code
// without it: columns after it on its line move back; one inside it is
// its start.
func (in *insertion) position(line, col int) (int, int) {
	if in == nil || line != in.line || col <= in.col {
		return line, col
	}
	return line, max(in.col, col-in.chars)
}

// written is the code as it was before Persist added to it.
func (p *Prepared) written() string {
	if p.added == nil {
		return p.Code
	}
	return p.Code[:p.added.at] + p.Code[p.added.at+len(p.added.text):]
}

// Persist makes Code hand its top-level bindings to the session it runs in
// (see above) and returns them: what a later execution of the session will
// find. It returns nil, and leaves Code as it is, when the analysis parser
// could not read the code (it runs, keeping nothing the parser could not
// see), the top level declares nothing to keep, or it declares the
// registrar's name. Call it once, before the code runs.
func (p *Prepared) Persist() []analysis.Binding {
	if !p.Checked || p.added != nil {
		return nil
	}
	var keep []analysis.Binding
	for _, b := range p.Top.Bindings {
		if b.Name == ScopeRegistrar {
			return nil
		}
		if !notKept[b.Name] {
			keep = append(keep, b)
		}
	}
	if len(keep) == 0 {
		return nil
	}
	var sb strings.Builder
	sb.WriteString(";" + ScopeRegistrar + "({")
	for i, b := range keep {
		if i > 0 {
			sb.WriteByte(',')
		}
		key, _ := json.Marshal(b.Name)
		sb.Write(key)
		sb.WriteString(":[()=>" + b.Name)
		if b.Kind != analysis.KindConst {
			sb.WriteString(",(v)=>" + b.Name + "=v")
		}
		sb.WriteByte(']')
	}
	sb.WriteString("});")
	text := sb.String()
	at := p.Top.Prologue
	lines := splitLines(p.Code[:at])
	in := &insertion{line: len(lines), col: utf8.RuneCountInString(lines[len(lines)-1]) + 1,
		chars: utf8.RuneCountInString(text), at: at, text: text}
	p.Code = p.Code[:at] + text + p.Code[at:]
	p.added = in
	return keep
}
