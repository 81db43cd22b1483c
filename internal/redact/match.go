package redact

import (
	"io"
	"slices"
	"strings"
)

// The filter below reads the first 4 bytes of every form: no form may be
// shorter (this fails to compile if MinLen drops under 4).
const _ = uint(MinLen - 4)

// matcher masks the forms of the known secrets in a text.
//
// A strings.Replacer does the matching: at each position the longest form
// that starts there, never looking back, so its time is linear in the
// text (times at most the longest form, whatever the number of forms).
// But each secret has a dozen forms, whose first bytes cover most of the
// alphabet, and a Replacer then walks its trie at nearly every position
// of every text. Most texts hold no secret, so a filter on the first 4
// bytes of each form first picks out the few stretches of a text where a
// form may start, and the Replacer sees only those.
type matcher struct {
	rep *strings.Replacer
	// filter has two bits set for the first 4 bytes of each form (a Bloom
	// filter of 2¹⁶ bits, 8 KiB): a window of 4 bytes without both bits
	// starts no form. With 300 distinct first words (20 secrets) a window
	// passes by chance about once in 10000, and then costs a map lookup.
	filter [1 << 16 / 64]uint64
	// reach is, for the first 4 bytes of each form, the length of the
	// longest form that starts with them: how far a match from there may
	// go. It also rules out the filter's chance passes.
	reach map[uint32]int
	// sorted is every form in byte order, and longest the length of the
	// longest: what Cut looks for at the end of a cut text.
	sorted  []string
	longest int
}

// newMatcher returns a matcher of forms, which it sorts.
func newMatcher(forms []string) *matcher {
	m := &matcher{reach: map[uint32]int{}}
	// strings.Replacer tries its old strings in argument order at each
	// position: longest first, so that a form containing another (a
	// secret containing another, the padded base64 form containing the
	// middle part) is masked whole.
	slices.SortFunc(forms, func(a, b string) int {
		if d := len(b) - len(a); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	pairs := make([]string, 0, 2*len(forms))
	for _, f := range forms {
		pairs = append(pairs, f, Mask)
		w := word(f)
		h1, h2 := hashes(w)
		m.filter[h1/64] |= 1 << (h1 % 64)
		m.filter[h2/64] |= 1 << (h2 % 64)
		m.reach[w] = max(m.reach[w], len(f))
	}
	m.rep = strings.NewReplacer(pairs...)
	m.sorted = slices.Sorted(slices.Values(forms))
	if len(forms) > 0 {
		m.longest = len(forms[0])
	}
	return m
}

// word is the first 4 bytes of s, which has as many.
func word(s string) uint32 {
	return uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
}

// hashes are the two filter bits of w: the top 16 bits of two
// multiplicative hashes.
func hashes(w uint32) (uint32, uint32) {
	return (w * 0x9e3779b1) >> 16, (w * 0x85ebca77) >> 16
}

// stretches calls f, in order, for each stretch s[from:to] where a form
// may start, which every match of a form starting there fits into; they
// do not overlap, and no form starts outside them.
//
// The Replacer finds in each stretch alone what it would find in s: a
// match starts at a position where a form starts, which is in a stretch,
// and ends within reach of that position, which is in the same stretch;
// so no match crosses from one stretch into another or out of one, and at
// the start of each stretch a Replacer running over s would be where one
// running over the stretch starts: at its first position, past any
// earlier match.
func (m *matcher) stretches(s string, f func(from, to int)) {
	if len(s) < 4 {
		return
	}
	from, to := 0, 0 // the current stretch; none while to == 0
	w := (uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16) << 8
	for i := 0; i+4 <= len(s); i++ {
		w = w>>8 | uint32(s[i+3])<<24 // word(s[i:])
		h1, h2 := hashes(w)
		if m.filter[h1/64]&(1<<(h1%64)) == 0 || m.filter[h2/64]&(1<<(h2%64)) == 0 {
			continue
		}
		reach, ok := m.reach[w]
		if !ok {
			continue
		}
		if i >= to {
			if to > 0 {
				f(from, to)
			}
			from = i
		}
		to = max(to, min(i+reach, len(s)))
	}
	if to > 0 {
		f(from, to)
	}
}

// stringWriter is what a Replacer writes to.
type stringWriter interface {
	io.Writer
	io.StringWriter
}

// write writes s to the writer open returns with every form masked, and
// reports whether it did: when no form may start in s, open is not called
// (the writer is not even made) and nothing is written.
func (m *matcher) write(s string, open func() stringWriter) bool {
	var w stringWriter
	last := 0
	m.stretches(s, func(from, to int) {
		if w == nil {
			w = open()
		}
		_, _ = w.WriteString(s[last:from])
		_, _ = m.rep.WriteString(w, s[from:to])
		last = to
	})
	if w == nil {
		return false
	}
	_, _ = w.WriteString(s[last:])
	return true
}

// replace returns s with every form masked: s itself, not copied, when it
// holds none.
func (m *matcher) replace(s string) string {
	var w *lazyWriter
	if !m.write(s, func() stringWriter { w = &lazyWriter{src: s}; return w }) {
		return s
	}
	return w.String()
}

// lazyWriter collects what is written for src, copying nothing while that
// is src itself.
type lazyWriter struct {
	src string
	n   int // while out is empty, what was written is src[:n]
	out strings.Builder
}

func (w *lazyWriter) WriteString(p string) (int, error) {
	if w.out.Cap() == 0 {
		if len(p) <= len(w.src)-w.n && w.src[w.n:w.n+len(p)] == p {
			w.n += len(p)
			return len(p), nil
		}
		w.out.Grow(len(w.src) + len(Mask))
		w.out.WriteString(w.src[:w.n])
	}
	return w.out.WriteString(p)
}

func (w *lazyWriter) Write(p []byte) (int, error) { return w.WriteString(string(p)) }

func (w *lazyWriter) String() string {
	if w.out.Cap() == 0 {
		return w.src[:w.n]
	}
	return w.out.String()
}
