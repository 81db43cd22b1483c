package catalog

import (
	"cmp"
	"slices"
	"strings"
)

// maxCompareLen bounds the names Suggest compares, so a hostile query costs
// at most maxCompareLen² per candidate.
const maxCompareLen = 2 * MaxNameLen

// Suggest returns up to n of candidates nearest to name, best first, for
// "did you mean" messages. Names compare case-insensitively by optimal
// string alignment distance (Damerau-Levenshtein with adjacent
// transpositions), both as whole "server:tool" names and by their tool parts
// alone, so `fs:raed_file` finds `fs:read_file` and `files:read_file` finds
// `fs:read_file`. A name without ':' is compared with whole candidates and
// with their tool parts. Ties are broken by candidate name; a candidate too
// far from name is never suggested.
//
// The distance is a 30-line function; it is written here rather than
// imported to keep the dependency set small.
func Suggest(name string, candidates []string, n int) []string {
	if n <= 0 || name == "" {
		return nil
	}
	q := newSplitName(name)
	type scored struct {
		name string
		d    int
	}
	var hits []scored
	seen := make(map[string]bool, len(candidates))
	for _, c := range candidates {
		if seen[c] || c == name {
			continue
		}
		seen[c] = true
		if d, ok := q.distance(newSplitName(c)); ok {
			hits = append(hits, scored{c, d})
		}
	}
	slices.SortFunc(hits, func(a, b scored) int {
		return cmp.Or(cmp.Compare(a.d, b.d), cmp.Compare(a.name, b.name))
	})
	out := make([]string, 0, min(n, len(hits)))
	for _, h := range hits[:min(n, len(hits))] {
		out = append(out, h.name)
	}
	return out
}

// splitName is a lower-cased name with its server and tool parts.
type splitName struct {
	full, server, tool []rune
	qualified          bool // had a ':'
}

func newSplitName(s string) splitName {
	s = strings.ToLower(s)
	r := []rune(s)
	if len(r) > maxCompareLen {
		r = r[:maxCompareLen]
	}
	n := splitName{full: r, tool: r}
	if i := slices.Index(r, ':'); i >= 0 {
		n.server, n.tool, n.qualified = r[:i], r[i+1:], true
	}
	return n
}

// distance scores candidate c against the query q, and whether c is close
// enough to suggest at all.
func (q splitName) distance(c splitName) (int, bool) {
	d := osa(q.full, c.full)
	switch {
	case q.qualified && c.qualified:
		// Right tool on the wrong server costs a little, however different
		// the server names are.
		d = min(d, osa(q.tool, c.tool)+min(osa(q.server, c.server), 2))
	case c.qualified:
		d = min(d, osa(q.tool, c.tool))
	}
	if d <= max(1, (len(q.tool)+1)/3) {
		return d, true
	}
	// A query that is a fragment of the candidate's tool name (or the
	// reverse) is still a useful hint: "read" → "fs:read_file".
	if len(q.tool) >= 3 && len(c.tool) >= 3 &&
		(containsRunes(c.tool, q.tool) || containsRunes(q.tool, c.tool)) {
		return d, true
	}
	return 0, false
}

func containsRunes(s, sub []rune) bool {
	return strings.Contains(string(s), string(sub))
}

// osa is the optimal string alignment distance: insertions, deletions,
// substitutions and transpositions of adjacent characters, each costing 1.
func osa(a, b []rune) int {
	if len(a) == 0 {
		return len(b)
	}
	if len(b) == 0 {
		return len(a)
	}
	// Three rows: the one before the previous is needed for transpositions.
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
