package catalog

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestReservedNamesAreThePreludesQuietSet: the names ValidName refuses are
// exactly those the prelude's mcp object answers with undefined, read from
// the prelude itself so that neither list can change alone.
func TestReservedNamesAreThePreludesQuietSet(t *testing.T) {
	src, err := os.ReadFile("../../guest-runtime/prelude.js")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`const quiet = new Set\(\[([^\]]*)\]\)`).FindSubmatch(src)
	if m == nil {
		t.Fatal("prelude.js has no `const quiet = new Set([...])`; update this test and reservedNames together")
	}
	var quiet []string
	for _, q := range strings.Split(string(m[1]), ",") {
		quiet = append(quiet, strings.Trim(strings.TrimSpace(q), `"`))
	}
	var reserved []string
	for n := range reservedNames {
		reserved = append(reserved, n)
	}
	slices.Sort(quiet)
	slices.Sort(reserved)
	if !slices.Equal(quiet, reserved) {
		t.Errorf("prelude quiet set %q, reservedNames %q", quiet, reserved)
	}
}

func TestMatchGlob(t *testing.T) {
	cases := []struct {
		glob, name string
		want       bool
	}{
		{"echo", "echo", true},
		{"echo", "echo2", false},
		{"*", "anything/at[all]", true},
		{"*", "", true},
		{"get_*", "get_issue", true},
		{"get_*", "list_issues", false},
		{"*_issue", "create_issue", true},
		{"*_issue", "create_issues", false},
		{"a*b*c", "axxbyyc", true},
		{"a*b*c", "acb", false},
		{"ab*ba", "aba", false},
		{"**", "x", true},
		{"[a]", "[a]", true},
		{"[a]", "a", false},
		{"?", "a", false},
	}
	for _, tc := range cases {
		if got := MatchGlob(tc.glob, tc.name); got != tc.want {
			t.Errorf("MatchGlob(%q, %q) = %v; want %v", tc.glob, tc.name, got, tc.want)
		}
	}
}
