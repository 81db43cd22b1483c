package catalog

import "strings"

// wildcard matches any run of characters, the empty run included, wherever
// it stands in a glob.
const wildcard = "*"

// MatchGlob reports whether name matches glob, in which every '*' matches
// any run of characters and everything else is literal. It is the one glob
// dialect: servers' allow and deny lists and requests' tools filters both
// use it, each side of "server:tool" matched on its own, so a '*' never
// crosses the ':'. path.Match is not used because tool names may contain
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
