package catalog

import (
	"fmt"
	"slices"
	"strings"

	"github.com/pml-sandbox/pml/internal/fault"
)

// pattern is one narrowing pattern of a request, "server:tool", each side
// a glob (see MatchGlob): "fs:read_*", "*:echo", "*:*".
type pattern struct {
	server, tool string
}

// parsePattern parses "server:tool". A partial glob ("fs:read_*") is
// allowed, as in allow and deny lists: narrowing can only remove tools, so
// a glob that matches less than meant costs the caller tools, never safety,
// and one that matches nothing is reported (see Filter.Narrow).
func parsePattern(s string) (pattern, error) {
	server, tool, ok := strings.Cut(s, ":")
	if !ok {
		return pattern{}, fault.New(fault.InvalidRequest,
			"tools filter %q: want \"server:tool\", \"server:*\" or \"*:tool\"", s)
	}
	for _, part := range []string{server, tool} {
		// A glob is held to the name rule too ('*' is no reserved name
		// and no ':'): "fs:__proto__" or "a:b:c" is a mistake either way.
		if err := ValidName(part); err != nil {
			return pattern{}, fault.Wrap(fault.InvalidRequest, err, fmt.Sprintf("tools filter %q", s))
		}
	}
	return pattern{server: server, tool: tool}, nil
}

// String returns the pattern in its "server:tool" form.
func (p pattern) String() string { return p.server + ":" + p.tool }

// match reports whether the pattern selects the tool server:tool.
func (p pattern) match(server, tool string) bool {
	return MatchGlob(p.server, server) && MatchGlob(p.tool, tool)
}

// Filter is a parsed set of narrowing patterns. The zero Filter narrows
// nothing.
type Filter struct {
	patterns []pattern
}

// ParseFilter parses a request's patterns. Errors are *fault.Error with code
// InvalidRequest.
func ParseFilter(patterns []string) (Filter, error) {
	f := Filter{patterns: make([]pattern, 0, len(patterns))}
	for _, s := range patterns {
		p, err := parsePattern(s)
		if err != nil {
			return Filter{}, err
		}
		f.patterns = append(f.patterns, p)
	}
	return f, nil
}

// Patterns returns the filter's patterns in their "server:tool" form.
func (f Filter) Patterns() []string {
	out := make([]string, len(f.patterns))
	for i, p := range f.patterns {
		out[i] = p.String()
	}
	return out
}

// IsZero reports whether the filter narrows nothing.
func (f Filter) IsZero() bool { return len(f.patterns) == 0 }

// Allows reports whether a tool passes the filter; everything passes the
// zero Filter. Use it for names resolved at call time (dynamic access).
func (f Filter) Allows(server, tool string) bool {
	if f.IsZero() {
		return true
	}
	for _, p := range f.patterns {
		if p.match(server, tool) {
			return true
		}
	}
	return false
}

// Narrow returns the tools the filter selects, in their input order. The
// result is always a subset of tools: a pattern can only select, never add.
//
// A pattern that selects nothing is an error with code ToolNotFound, not
// InvalidRequest: the request named a tool (or server) that is not there,
// which is the same mistake as a script naming one, and the caller gets the
// same remedy, the nearest names (Details["suggestions"]). InvalidRequest is
// kept for patterns that cannot be parsed.
func (f Filter) Narrow(tools []Tool) ([]Tool, error) {
	if f.IsZero() {
		return tools, nil
	}
	used := make([]bool, len(f.patterns))
	out := make([]Tool, 0, len(tools))
	for _, t := range tools {
		keep := false
		for i, p := range f.patterns {
			if p.match(t.Server, t.Name) {
				used[i], keep = true, true
			}
		}
		if keep {
			out = append(out, t)
		}
	}
	var missing []string
	var suggestions []string
	for i, p := range f.patterns {
		if used[i] {
			continue
		}
		missing = append(missing, p.String())
		for _, s := range suggestFor(p, tools) {
			if !slices.Contains(suggestions, s) {
				suggestions = append(suggestions, s)
			}
		}
	}
	if len(missing) == 0 {
		return out, nil
	}
	msg := fmt.Sprintf("tools filter %s matches no tool", quoteAll(missing))
	if len(suggestions) > 0 {
		msg += "; did you mean " + strings.Join(suggestions, ", ") + "?"
	} else if len(tools) == 0 {
		msg += "; no tools are available"
	}
	e := fault.New(fault.ToolNotFound, "%s", msg)
	if len(missing) == 1 && !strings.Contains(missing[0], wildcard) {
		e.Tool = missing[0]
	}
	e.Details = map[string]any{"patterns": missing, "suggestions": nonNil(suggestions)}
	return nil, e
}

// Narrow parses patterns and narrows tools with them; see Filter.Narrow.
func Narrow(tools []Tool, patterns []string) ([]Tool, error) {
	f, err := ParseFilter(patterns)
	if err != nil {
		return nil, err
	}
	return f.Narrow(tools)
}

// suggestFor proposes patterns that would have matched: near servers for
// "server:*", near tools otherwise.
func suggestFor(p pattern, tools []Tool) []string {
	const n = 3
	if p.tool == wildcard {
		var servers []string
		seen := map[string]bool{}
		for _, t := range tools {
			if !seen[t.Server] {
				seen[t.Server] = true
				servers = append(servers, t.Server)
			}
		}
		near := Suggest(p.server, servers, n)
		for i, s := range near {
			near[i] = s + ":" + wildcard
		}
		return near
	}
	names := make([]string, 0, len(tools))
	for _, t := range tools {
		names = append(names, t.FullName())
	}
	// A bare tool name is compared with the tool part of each candidate.
	q := p.String()
	if p.server == wildcard {
		q = p.tool
	}
	return Suggest(q, names, n)
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

func nonNil(ss []string) []string {
	if ss == nil {
		return []string{}
	}
	return ss
}
