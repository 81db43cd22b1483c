package redact

import (
	"encoding/base64"
	"encoding/hex"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"
)

// leftOf is the longest start of form that s holds right after a run of
// pad bytes: what a cut left of a secret the pad pushed to it.
func leftOf(s, form string, pad byte) string {
	for k := len(form); k > 0; k-- {
		if strings.Contains(s, string(pad)+form[:k]) {
			return form[:k]
		}
	}
	return ""
}

// TestCutLeavesNoStart: a secret, in each form a service may echo it,
// pushed by padding to every position across the cut, leaves nothing of
// itself: not the part before the cut (which no longer matches once cut),
// nor a start of it when the text was itself cut short where it came from.
func TestCutLeavesNoStart(t *testing.T) {
	const n = 64
	r := New(key28, "pässwörd-ünïcode")
	for _, form := range []string{
		key28,
		url.QueryEscape(key28 + "/+"),
		hex.EncodeToString([]byte(key28)),
		base64.StdEncoding.EncodeToString([]byte(key28)),
		"pässwörd-ünïcode",
	} {
		r.Add(strings.TrimSuffix(form, url.QueryEscape("/+"))) // the secret, as configured
		for pad := 0; pad <= n+2; pad++ {
			text := strings.Repeat("=", pad) + form + strings.Repeat("y", 10)
			for _, got := range []string{r.Cut(text, n), r.CutHead(text[:min(len(text), pad+len(form)/2)], 1000)} {
				if s := leftOf(got, form, '='); s != "" {
					t.Errorf("form %q pad %d: %q keeps %q", form, pad, got, s)
				}
				if len(got) > n+len(CutMark) && len(got) > 1000 {
					t.Errorf("form %q pad %d: %d bytes", form, pad, len(got))
				}
				if !utf8.ValidString(got) {
					t.Errorf("form %q pad %d: %q is not UTF-8", form, pad, got)
				}
			}
		}
	}
}

func TestCut(t *testing.T) {
	r := New(key28)
	tests := []struct {
		name, in string
		n        int
		head     bool
		want     string
	}{
		{name: "short, no secret", in: "hello", n: 10, want: "hello"},
		{name: "short, a secret", in: "k=" + key28, n: 100, want: "k=" + Mask},
		{name: "long, no secret", in: "hello world", n: 5, want: "hello" + CutMark},
		{name: "masked before the cut", in: "k=" + key28 + " and more", n: 12, want: "k=" + Mask + CutMark},
		{name: "the mask cut", in: "k=" + key28 + " and more", n: 6, want: "k=[RED" + CutMark},
		{name: "a secret cut", in: "key: " + key28[:20], n: 24, want: "key: " + CutMark},
		{name: "never inside a character", in: "aé", n: 2, want: "a" + CutMark},
		{name: "a head ends in a secret's start", in: "key: " + key28[:9], n: 100, head: true, want: "key: " + CutMark},
		{name: "a head without one", in: "key: none", n: 100, head: true, want: "key: none" + CutMark},
		{name: "no room", in: key28, n: 0, want: CutMark},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := r.Cut(tc.in, tc.n)
			if tc.head {
				got = r.CutHead(tc.in, tc.n)
			}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
	var none *Redactor
	if got := none.Cut("hello world", 5); got != "hello"+CutMark {
		t.Errorf("a nil Redactor: %q", got)
	}
}

// FuzzCut: whatever the text and the bound, Cut keeps within it, keeps
// UTF-8 valid, and leaves no start of a secret: the kept text ends in no
// start of a form that what followed it (the rest of the masked text, and
// for CutHead whatever came after that) could have gone on with.
func FuzzCut(f *testing.F) {
	secrets := []string{"abcd", "abcdefgh", "cdefghij", "bcda", "xyzw-1234", key28, basicHdr}
	r := New(secrets...)
	m := r.m.Load()
	for _, s := range []string{"", "abc", "xx abcdefg", "zzxyzw-12", "c2stbGl2ZS05ZjhlN2Q2YzViNGEz", "é" + key28[:5]} {
		f.Add(s, 8, false)
		f.Add(s, 100, true)
	}
	f.Fuzz(func(t *testing.T, s string, n int, head bool) {
		n %= 200
		masked := r.String(s)
		got := r.Cut(s, n)
		if head {
			got = r.CutHead(s, n)
		}
		if !head && len(masked) <= max(n, 0) {
			if got != masked {
				t.Fatalf("Cut(%q, %d) = %q; nothing to cut", s, n, got)
			}
			return
		}
		kept, ok := strings.CutSuffix(got, CutMark)
		if !ok || !strings.HasPrefix(masked, kept) {
			t.Fatalf("Cut(%q, %d) = %q: not a marked start of %q", s, n, got, masked)
		}
		if len(kept) > max(n, 0) {
			t.Fatalf("Cut(%q, %d) = %q: over the bound", s, n, got)
		}
		if utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Fatalf("Cut(%q, %d) = %q: not UTF-8", s, n, got)
		}
		rest := masked[len(kept):]
		for _, form := range m.sorted {
			for k := 1; k < len(form) && k <= len(kept); k++ {
				if strings.HasSuffix(kept, form[:k]) && strings.HasPrefix(form[k:], rest) {
					t.Fatalf("Cut(%q, %d) = %q ends with %q, the start of %q", s, n, got, form[:k], form)
				}
			}
		}
	})
}
