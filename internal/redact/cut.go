package redact

import (
	"slices"
	"strings"
	"unicode/utf8"
)

// CutMark ends a text Cut has cut.
const CutMark = "…"

// Cut returns s with every known secret masked and then, when that is
// longer than n bytes, cut to at most n (never inside a character) and
// marked with CutMark.
//
// The order is the point: a secret cut before it is masked leaves a start
// that no longer matches it, and whoever can pad what a service echoes (a
// script choosing an argument) can put the cut anywhere in it, reading all
// of it but its last character. A cut also drops whatever the kept text
// ends with that begins a form of a known secret: a secret s holds only in
// part (a text already cut where it came from) leaves nothing of itself
// either. The mask itself may be cut.
func (r *Redactor) Cut(s string, n int) string { return r.cut(s, n, false) }

// CutHead is Cut for s that is only the start of a longer text (a body
// read up to a limit): its end is a cut too, so it is marked, and a secret
// that went on past it leaves no start of itself.
func (r *Redactor) CutHead(s string, n int) string { return r.cut(s, n, true) }

func (r *Redactor) cut(s string, n int, more bool) string {
	s = r.String(s)
	n = max(n, 0)
	if len(s) <= n && !more {
		return s
	}
	if len(s) > n {
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		s = s[:n]
	}
	if r != nil {
		if m := r.m.Load(); m != nil {
			s = s[:m.partialEnd(s)]
		}
	}
	return s + CutMark
}

// partialEnd is where in s a trailing start of a form begins: the index
// of the longest suffix of s that some form begins with (len(s) when none
// does), moved back to the start of a character.
func (m *matcher) partialEnd(s string) int {
	for p := max(0, len(s)-m.longest); p < len(s); p++ {
		t := s[p:]
		// The first form not below t begins with t if any form does: a
		// form beginning with t is not below t, and anything between t
		// and it begins with t too.
		if i, _ := slices.BinarySearch(m.sorted, t); i < len(m.sorted) && strings.HasPrefix(m.sorted[i], t) {
			for p > 0 && !utf8.RuneStart(s[p]) {
				p--
			}
			return p
		}
	}
	return len(s)
}
