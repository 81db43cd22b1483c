package catalog

import (
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// wildcard matches any run of characters, the empty run included, wherever
// it stands in a glob.
const wildcard = "*"

// MatchGlob reports whether name matches glob, in which every '*' matches
// any run of characters and everything else is literal. It is the one glob
// dialect: servers' allow and deny lists and requests' tools filters both
// use it, each side of "server:tool" matched on its own, so a '*' never
// crosses the ':'; principal patterns (approval) use it the same way, on
// each part of a principal (an ARN's role, its session; a JWT's subject)
// on its own, so a '*' never crosses a ':', '/' or '#'. path.Match is not used because tool names may contain
// '/', '[' and '\\'.
func MatchGlob(glob, name string) bool {
	parts := strings.Split(glob, wildcard)
	if len(parts) == 1 {
		return glob == name
	}
	if !strings.HasPrefix(name, parts[0]) {
		return false
	}
	name = name[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(name, p)
		if i < 0 {
			return false
		}
		name = name[i+len(p):]
	}
	return len(name) >= len(last) && strings.HasSuffix(name, last)
}

// MatchToolGlob is MatchGlob without regard to case (Unicode simple
// folding, as strings.EqualFold), for the tool globs that guard: a
// server's require_approval and deny lists, where "delete_*" must catch
// "Delete_all" — a tool name's case says nothing about what it does. Globs
// that grant (allow lists, a request's tools filter) and principal
// patterns' parts use MatchGlob: matching across case would widen them.
func MatchToolGlob(glob, name string) bool { return MatchGlob(fold(glob), fold(name)) }

// fold maps every character of s to the least of its case-folding orbit,
// so that two strings equal under simple folding map alike.
func fold(s string) string {
	return strings.Map(func(r rune) rune {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		return least
	}, s)
}

// MatchAnyGlob reports whether any of globs names name (MatchGlob: for
// globs that grant).
func MatchAnyGlob(globs []string, name string) bool {
	return slices.ContainsFunc(globs, func(g string) bool { return MatchGlob(g, name) })
}

// MatchAnyToolGlob reports whether any of globs names tool in any case
// (MatchToolGlob: for globs that guard — deny, require_approval,
// destructive).
func MatchAnyToolGlob(globs []string, tool string) bool {
	return slices.ContainsFunc(globs, func(g string) bool { return MatchToolGlob(g, tool) })
}

// Refusal says why a server's allow and deny lists hide tool, "" when they
// let it through. Every kind of source (MCP servers, OpenAPI services,
// Lambda functions) applies this one rule: deny guards, so it matches in
// any case; allow grants, so it matches as spelled.
func Refusal(allow, deny []string, tool string) string {
	for _, p := range deny {
		if MatchToolGlob(p, tool) {
			return "matches " + strconv.Quote(p) + " in the server's deny list"
		}
	}
	if len(allow) == 0 || MatchAnyGlob(allow, tool) {
		return ""
	}
	return "not in the server's allow list"
}
