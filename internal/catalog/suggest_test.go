package catalog

import (
	"slices"
	"strings"
	"testing"
)

func TestOSA(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"", "abc", 3},
		{"abc", "", 3},
		{"abc", "abc", 0},
		{"abc", "abd", 1},
		{"abc", "acb", 1}, // transposition
		{"ca", "abc", 3},  // OSA, not unrestricted Damerau-Levenshtein (2)
		{"kitten", "sitting", 3},
		{"read_file", "raed_file", 1},
		{"héllo", "hello", 1}, // characters, not bytes
	}
	for _, tc := range tests {
		if got := osa([]rune(tc.a), []rune(tc.b)); got != tc.want {
			t.Errorf("osa(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := osa([]rune(tc.b), []rune(tc.a)); got != tc.want {
			t.Errorf("osa(%q, %q) = %d, want %d (symmetry)", tc.b, tc.a, got, tc.want)
		}
	}
}

func TestSuggest(t *testing.T) {
	names := fullNames(sampleTools())
	tests := []struct {
		name string
		n    int
		want []string
	}{
		{"fs:raed_file", 3, []string{"fs:read_file"}},
		{"FS:Read_File", 3, []string{"fs:read_file"}}, // case-insensitive
		{"files:read_file", 3, []string{"fs:read_file"}},
		{"read_file", 3, []string{"fs:read_file"}},
		{"demo:ech", 3, []string{"demo:echo"}},
		{"demo:get_sum", 3, []string{"demo:get-sum"}},
		{"fs:write", 3, []string{"fs:write_file"}}, // a fragment of the name
		{"github:create_isue", 3, []string{"github:create_issue"}},
		{"fs:file", 3, []string{"fs:read_file", "fs:write_file", "github:get_file_contents"}},
		{"fs:file", 1, []string{"fs:read_file"}},
		{"zzz:qqqqqq", 3, []string{}},
		{"demo:echo", 0, nil},
		{"", 3, nil},
	}
	for _, tc := range tests {
		got := Suggest(tc.name, names, tc.n)
		if !slices.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
			t.Errorf("Suggest(%q, %d) = %q, want %q", tc.name, tc.n, got, tc.want)
		}
	}
}

func TestSuggestSkipsItself(t *testing.T) {
	got := Suggest("fs:read_file", []string{"fs:read_file", "fs:read_files", "fs:read_file"}, 3)
	if !slices.Equal(got, []string{"fs:read_files"}) {
		t.Errorf("got %q", got)
	}
}

func TestSuggestServers(t *testing.T) {
	got := Suggest("gihtub", []string{"fs", "github", "gitlab", "demo"}, 3)
	if !slices.Equal(got, []string{"github"}) {
		t.Errorf("got %q", got)
	}
}

func TestSuggestHostileLength(t *testing.T) {
	long := strings.Repeat("x", 1<<20)
	candidates := make([]string, 200)
	for i := range candidates {
		candidates[i] = "s:" + strings.Repeat("y", MaxNameLen)
	}
	// Bounded by maxCompareLen: this returns quickly instead of comparing a
	// megabyte against every candidate.
	if got := Suggest(long, candidates, 3); len(got) != 0 {
		t.Errorf("got %q", got)
	}
}
