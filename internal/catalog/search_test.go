package catalog

import (
	"slices"
	"testing"
)

func hitNames(hits []Hit) []string {
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = h.Tool.FullName()
	}
	return out
}

func TestTokenize(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"read_file", []string{"read", "fil"}},
		{"readFile", []string{"read", "fil"}},
		{"get-file-contents", []string{"get", "fil", "content"}},
		{"HTTPServer v2", []string{"http", "server", "v2"}},
		{"github:create_issue", []string{"github", "creat", "issu"}},
		{"Reading files, writing issues!", []string{"read", "fil", "writ", "issu"}},
		{"", nil},
		{"__", nil},
		{"Ünïcode Wörter", []string{"ünïcod", "wörter"}},
	}
	for _, tc := range tests {
		if got := Tokenize(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("Tokenize(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestStemConsistency(t *testing.T) {
	// Inflections of a word must meet; the stem itself need not be a word.
	groups := [][]string{
		{"read", "reads", "reading"},
		{"write", "writes", "writing"},
		{"create", "creates", "created", "creating"},
		{"file", "files"},
		{"issue", "issues"},
		{"query", "queries"},
		{"search", "searches", "searching"},
		{"list", "lists", "listing", "listed"},
	}
	for _, g := range groups {
		for _, w := range g[1:] {
			if stem(w) != stem(g[0]) {
				t.Errorf("stem(%q) = %q, stem(%q) = %q", w, stem(w), g[0], stem(g[0]))
			}
		}
	}
	for _, w := range []string{"class", "status", "is", "a"} {
		if stem(w) != w {
			t.Errorf("stem(%q) = %q, want it unchanged", w, stem(w))
		}
	}
}

func TestSearch(t *testing.T) {
	tools := sampleTools()
	tests := []struct {
		query string
		limit int
		want  []string
	}{
		// The example from the issue: name matches beat description matches.
		{"read a file", 0, []string{"fs:read_file", "fs:write_file", "github:get_file_contents"}},
		{"read a file", 1, []string{"fs:read_file"}},
		{"reading files", 2, []string{"fs:read_file", "fs:write_file"}},
		{"create an issue", 0, []string{"github:create_issue"}},
		{"github", 0, []string{"github:create_issue", "github:get_file_contents"}},
		{"sum", 0, []string{"demo:get-sum"}},
		{"echo", 0, []string{"demo:echo"}},
		{"list directory entries", 0, []string{"fs:list_directory", "github:get_file_contents"}},
		{"nothing matches this", 0, nil},
		{"", 5, nil},
		{"the", 5, nil}, // only stopwords: descriptions saying "the" do not match
	}
	for _, tc := range tests {
		got := Search(tools, tc.query, tc.limit)
		if !slices.Equal(hitNames(got), tc.want) {
			t.Errorf("Search(%q, %d) = %q, want %q", tc.query, tc.limit, hitNames(got), tc.want)
		}
		for i := 1; i < len(got); i++ {
			if got[i].Score > got[i-1].Score {
				t.Errorf("Search(%q): hits out of order: %v", tc.query, got)
			}
		}
	}
}

func TestSearchReadAFileRanksAll(t *testing.T) {
	// The ordering the issue asks for, with create_issue present: it must
	// come last (or not at all) for "read a file".
	tools := []Tool{
		{Server: "github", Name: "create_issue", Description: "Create a new issue; attach a file if needed."},
		{Server: "fs", Name: "write_file", Description: "Write a file."},
		{Server: "fs", Name: "read_file", Description: "Read a file."},
	}
	got := hitNames(Search(tools, "read a file", 10))
	want := []string{"fs:read_file", "fs:write_file", "github:create_issue"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestSearchTiesByName(t *testing.T) {
	// Identical documents score identically; the order must not depend on
	// input order.
	a := []Tool{
		{Server: "b", Name: "lookup"},
		{Server: "a", Name: "lookup"},
		{Server: "c", Name: "lookup"},
	}
	b := []Tool{a[2], a[0], a[1]}
	ga, gb := Search(a, "lookup", 0), Search(b, "lookup", 0)
	want := []string{"a:lookup", "b:lookup", "c:lookup"}
	if !slices.Equal(hitNames(ga), want) || !slices.Equal(hitNames(gb), want) {
		t.Errorf("got %q and %q, want %q", hitNames(ga), hitNames(gb), want)
	}
	if ga[0].Score != ga[2].Score {
		t.Errorf("equal documents scored %v and %v", ga[0].Score, ga[2].Score)
	}
}

func TestSearchTitleWeighsMoreThanDescription(t *testing.T) {
	tools := []Tool{
		{Server: "s", Name: "one", Description: "weather forecast"},
		{Server: "s", Name: "two", Title: "Weather forecast"},
	}
	if got := hitNames(Search(tools, "weather", 0)); !slices.Equal(got, []string{"s:two", "s:one"}) {
		t.Errorf("got %q", got)
	}
}

func BenchmarkSearch(b *testing.B) {
	var tools []Tool
	for _, t := range sampleTools() {
		for i := range 100 {
			t.Server = t.Server + string(rune('a'+i%26))
			tools = append(tools, t)
		}
	}
	for b.Loop() {
		Search(tools, "read a file from the repository", 10)
	}
}
