package analysis

import "testing"

func TestDecodeQuoted(t *testing.T) {
	tests := []struct {
		raw  string
		want string
		ok   bool
	}{
		{`"abc"`, "abc", true},
		{`'a"b'`, `a"b`, true},
		{"`get-sum`", "get-sum", true},
		{`"\x41\u0042\u{43}"`, "ABC", true},
		{`"\uD83D\uDE00"`, "\U0001F600", true},
		{`"\u{1F600}"`, "\U0001F600", true},
		{`"a\
b"`, "ab", true},
		{`"\n\t\0"`, "\n\t\x00", true},
		{`"\q"`, "q", true},
		{`"\uD83D"`, "", false}, // lone surrogate
		{`"\01"`, "", false},    // legacy octal
		{`"\7"`, "", false},
		{`"\xZZ"`, "", false},
		{`"\u12"`, "", false},
		{`"\u{110000}"`, "", false},
		{`"abc'`, "", false},
		{`"`, "", false},
		{"`a\r\nb`", "a\nb", true},
	}
	for _, tc := range tests {
		got, ok := decodeQuoted([]byte(tc.raw))
		if got != tc.want || ok != tc.ok {
			t.Errorf("decodeQuoted(%s) = %q, %v; want %q, %v", tc.raw, got, ok, tc.want, tc.ok)
		}
	}
}

func TestDecodeIdent(t *testing.T) {
	tests := []struct {
		raw, want string
		ok        bool
	}{
		{"demo", "demo", true},
		{`d\u0065mo`, "demo", true},
		{`\u{64}emo`, "demo", true},
		{`\u00`, "", false},
	}
	for _, tc := range tests {
		got, ok := decodeIdent([]byte(tc.raw))
		if got != tc.want || ok != tc.ok {
			t.Errorf("decodeIdent(%s) = %q, %v; want %q, %v", tc.raw, got, ok, tc.want, tc.ok)
		}
	}
}
