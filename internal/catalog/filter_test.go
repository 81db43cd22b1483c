package catalog

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/fault"
)

func TestValidName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"echo", true},
		{"get-sum", true},
		{"read.file", true},
		{"ünïcode", true},
		{"with space", true},
		{strings.Repeat("a", MaxNameLen), true},
		{strings.Repeat("é", MaxNameLen), true}, // characters, not bytes
		{"", false},
		{strings.Repeat("a", MaxNameLen+1), false},
		{"__proto__", false},
		{"constructor", false},
		{"prototype", false},
		{"then", false},
		{"toJSON", false},
		{"toString", false},
		{"valueOf", false},
		{"inspect", false},
		{"Then", true}, // names are case-sensitive in JS
		{"then_", true},
		{"a:b", false},
		{"a\nb", false},
		{"a\x00b", false},
		{"a\u2028b", false},
		{"\xff", false},
	}
	for _, tc := range tests {
		err := ValidName(tc.name)
		if (err == nil) != tc.ok {
			t.Errorf("ValidName(%.20q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidName) {
			t.Errorf("ValidName(%.20q) error %v does not wrap ErrInvalidName", tc.name, err)
		}
	}
}

func sampleTools() []Tool {
	return []Tool{
		{Server: "fs", Name: "read_file", Description: "Read a file from disk."},
		{Server: "fs", Name: "write_file", Description: "Write a file to disk."},
		{Server: "fs", Name: "list_directory", Description: "List the entries of a directory."},
		{Server: "github", Name: "create_issue", Description: "Create a new issue in a GitHub repository."},
		{Server: "github", Name: "get_file_contents", Description: "Get the contents of a file or directory from a repository."},
		{Server: "demo", Name: "echo", Description: "Echo the input."},
		{Server: "demo", Name: "get-sum", Description: "Add two numbers."},
	}
}

func fullNames(tools []Tool) []string {
	out := make([]string, len(tools))
	for i, t := range tools {
		out[i] = t.FullName()
	}
	return out
}

func TestNarrow(t *testing.T) {
	tools := sampleTools()
	tests := []struct {
		name     string
		patterns []string
		want     []string
	}{
		{"nil narrows nothing", nil, fullNames(tools)},
		{"one tool", []string{"fs:read_file"}, []string{"fs:read_file"}},
		{"one server", []string{"fs:*"}, []string{"fs:read_file", "fs:write_file", "fs:list_directory"}},
		{"tool on any server", []string{"*:echo"}, []string{"demo:echo"}},
		{"everything", []string{"*:*"}, fullNames(tools)},
		{"non-identifier name", []string{"demo:get-sum"}, []string{"demo:get-sum"}},
		{"partial glob in a tool", []string{"fs:read_*"}, []string{"fs:read_file"}},
		{"glob in the middle", []string{"*:*_file*"}, []string{"fs:read_file", "fs:write_file", "github:get_file_contents"}},
		{"partial glob in a server", []string{"git*:*"}, []string{"github:create_issue", "github:get_file_contents"}},
		{"overlap keeps input order, no duplicates",
			[]string{"demo:echo", "fs:read_file", "fs:*", "demo:echo"},
			[]string{"fs:read_file", "fs:write_file", "fs:list_directory", "demo:echo"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Narrow(tools, tc.patterns)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(fullNames(got), tc.want) {
				t.Errorf("Narrow(%q) = %q, want %q", tc.patterns, fullNames(got), tc.want)
			}
		})
	}
}

func TestNarrowErrors(t *testing.T) {
	tools := sampleTools()
	tests := []struct {
		name        string
		patterns    []string
		code        fault.Code
		suggestions []string
	}{
		{"no colon", []string{"fs"}, fault.InvalidRequest, nil},
		{"empty", []string{""}, fault.InvalidRequest, nil},
		{"glob matching nothing", []string{"fs:zz*"}, fault.ToolNotFound, []string{}},
		{"empty tool", []string{"fs:"}, fault.InvalidRequest, nil},
		{"reserved", []string{"fs:__proto__"}, fault.InvalidRequest, nil},
		{"reserved server", []string{"then:*"}, fault.InvalidRequest, nil},
		{"two colons", []string{"a:b:c"}, fault.InvalidRequest, nil},
		{"typo in tool", []string{"fs:raed_file"}, fault.ToolNotFound, []string{"fs:read_file"}},
		{"wrong server", []string{"files:read_file"}, fault.ToolNotFound, []string{"fs:read_file"}},
		{"unknown server", []string{"gihtub:*"}, fault.ToolNotFound, []string{"github:*"}},
		{"unknown tool anywhere", []string{"*:ecoh"}, fault.ToolNotFound, []string{"demo:echo"}},
		{"nothing near", []string{"zzz:qqqqqq"}, fault.ToolNotFound, []string{}},
		{"one of several misses", []string{"fs:*", "demo:eho"}, fault.ToolNotFound, []string{"demo:echo"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Narrow(tools, tc.patterns)
			if err == nil {
				t.Fatalf("Narrow(%q) = %q, want an error", tc.patterns, fullNames(got))
			}
			fe := fault.As(err)
			if fe.Code != tc.code {
				t.Fatalf("code = %s, want %s (%v)", fe.Code, tc.code, err)
			}
			if tc.code != fault.ToolNotFound {
				return
			}
			d, _ := fe.Details.(map[string]any)
			if s, _ := d["suggestions"].([]string); !slices.Equal(s, tc.suggestions) {
				t.Errorf("suggestions = %q, want %q", s, tc.suggestions)
			}
			for _, s := range tc.suggestions {
				if !strings.Contains(fe.Message, s) {
					t.Errorf("message %q does not mention %s", fe.Message, s)
				}
			}
		})
	}
}

// TestNarrowNeverWidens checks the one property callers rely on for
// safety, over random pattern sets: the result is a subset of the input.
func TestNarrowNeverWidens(t *testing.T) {
	tools := sampleTools()
	words := []string{"fs", "github", "demo", "read_file", "echo", "get-sum", "*", "other", "create_issue", "*_file", "g*", "*e*"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		var patterns []string
		for range 1 + rng.IntN(3) {
			patterns = append(patterns, words[rng.IntN(len(words))]+":"+words[rng.IntN(len(words))])
		}
		got, err := Narrow(tools, patterns)
		if err != nil {
			if fault.CodeOf(err) != fault.ToolNotFound {
				t.Fatalf("Narrow(%q): %v", patterns, err)
			}
			continue
		}
		f, _ := ParseFilter(patterns)
		all, kept := fullNames(tools), fullNames(got)
		for _, g := range got {
			if !slices.Contains(all, g.FullName()) || !f.Allows(g.Server, g.Name) {
				t.Fatalf("Narrow(%q) returned %s", patterns, g.FullName())
			}
		}
		for _, tl := range tools {
			if f.Allows(tl.Server, tl.Name) != slices.Contains(kept, tl.FullName()) {
				t.Fatalf("Narrow(%q) and Allows disagree on %s", patterns, tl.FullName())
			}
		}
	}
}
