package redact

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

// FuzzMatcher: masking only the stretches the filter picks out gives what
// one strings.Replacer over the whole text gives, for secrets that
// overlap, contain each other and start alike.
func FuzzMatcher(f *testing.F) {
	secrets := []string{"abcd", "abcdefgh", "cdefghij", "bcda", "xyzw-1234", "zw-1", "aaaa", "aaaab", key28, basicHdr}
	r := New(secrets...)
	forms := slices.Collect(maps.Keys(r.secrets))
	m := r.m.Load()
	for _, s := range []string{"", "abc", "abcd", "xabcdefghij", "abcdabcdabcd", "aaaaaaab", "zzxyzw-1234zw-1", "cdefghij abcdefgh bcdab", "c2stbGl2ZS05ZjhlN2Q2YzViNGEzMjEwWllYVw==", strings.Repeat("abcdefg", 50)} {
		f.Add(s)
	}
	ref := referenceReplacer(forms)
	f.Fuzz(func(t *testing.T, s string) {
		want := ref.Replace(s)
		if got := r.String(s); got != want {
			t.Fatalf("String(%q) = %q; one Replacer gives %q", s, got, want)
		}
		var probe matchWriter
		if got := probe.finds(m, s); got != (want != s) {
			t.Fatalf("finds(%q) = %v", s, got)
		}
	})
}

// referenceReplacer is one strings.Replacer of forms, longest first.
func referenceReplacer(forms []string) *strings.Replacer {
	forms = slices.Clone(forms)
	slices.SortFunc(forms, func(a, b string) int {
		if d := len(b) - len(a); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	var pairs []string
	for _, f := range forms {
		pairs = append(pairs, f, Mask)
	}
	return strings.NewReplacer(pairs...)
}

func TestStringNoCopy(t *testing.T) {
	r := New(key28)
	s := strings.Repeat("nothing secret here; ", 50)
	if got := r.String(s); got != s || testing.AllocsPerRun(10, func() { _ = r.String(s) }) != 0 {
		t.Errorf("a text with no secret was copied")
	}
}
