package executor

import (
	"slices"
	"strconv"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/js/analysis"
)

// A request's tools filter bounds everything done on its behalf, so a
// capability run inherits the narrowing of every run above it (as it
// inherits allow_destructive) and can only narrow further: its tool set is
// its own request's selection intersected with each inherited filter (see
// execution.Narrowing, which the request carries parsed).

// applyInherited keeps the visible tools every inherited filter allows and
// returns, by full name, the tools of the catalog they forbid.
func applyInherited(visible, all []catalog.Tool, inherited execution.Narrowing) ([]catalog.Tool, map[string]bool) {
	if len(inherited) == 0 {
		return visible, nil
	}
	forbidden := map[string]bool{}
	for _, t := range all {
		if !inherited.Allows(t.Server, t.Name) {
			forbidden[t.FullName()] = true
		}
	}
	kept := slices.DeleteFunc(slices.Clone(visible), func(t catalog.Tool) bool { return forbidden[t.FullName()] })
	return kept, forbidden
}

// forbiddenRef reports the first mcp.x.y the code names that exists but is
// outside an inherited narrowing. It runs before unresolved, so such a name
// is FORBIDDEN rather than TOOL_NOT_FOUND: the tool is there, the callers
// forbid it, and no suggestion would help.
func forbiddenRef(refs analysis.Refs, forbidden map[string]bool, inherited execution.Narrowing) *fault.Error {
	for _, r := range refs.Tools {
		if forbidden[r.FullName()] {
			e := forbiddenErr(r.FullName(), " (line "+strconv.Itoa(r.Line)+")", inherited)
			e.Details.(map[string]any)["line"] = r.Line
			e.Details.(map[string]any)["column"] = r.Column
			return e
		}
	}
	return nil
}

// forbiddenErr is the FORBIDDEN for a tool outside an inherited narrowing;
// where locates it in the code ("" at run time).
func forbiddenErr(tool, where string, inherited execution.Narrowing) *fault.Error {
	return &fault.Error{Code: fault.Forbidden, Tool: tool,
		Message: tool + where + " is outside the tools this execution was narrowed to, by the callers of its capability or by its session; it may use only tools they may",
		Details: map[string]any{"narrowing": inherited.Patterns()}}
}

// forbiddenGuestTools are the tools an inherited narrowing excludes, by
// name only. The sandbox must hold them: its mcp object refuses unknown
// names itself with TOOL_NOT_FOUND, and only a call that reaches the host
// can be refused FORBIDDEN, as it is in CallTool. Discovery (tools.list,
// tools.search, tools.describe) still shows only the tools the run may use.
func forbiddenGuestTools(all []catalog.Tool, forbidden map[string]bool) []guest.Tool {
	if len(forbidden) == 0 {
		return nil
	}
	out := make([]guest.Tool, 0, len(forbidden))
	for _, t := range all {
		if forbidden[t.FullName()] {
			out = append(out, guest.Tool{Server: t.Server, Name: t.Name})
		}
	}
	return out
}
