package doccheck

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestRepositoryDocs holds this repository's docs to it: no link, path or
// anchor to what does not exist, and DESIGN names every package.
func TestRepositoryDocs(t *testing.T) {
	root := filepath.Join("..", "..")
	links, err := Links(root)
	if err != nil {
		t.Fatal(err)
	}
	diagram, err := Diagram(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range append(links, diagram...) {
		t.Error(p)
	}
}

// TestFindsWhatIsMissing: each kind of mistake in a small repository is
// reported, and what is right is not.
func TestFindsWhatIsMissing(t *testing.T) {
	root := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("internal/alpha/alpha.go", "package alpha\n")
	write("internal/alpha/beta/beta.go", "package beta\n")
	write("internal/gamma/gamma.go", "package gamma // see docs/GONE.md\n")
	write("internal/gamma/gamma_test.go", "package gamma\n")
	write("internal/onlytests/x_test.go", "package onlytests\n")
	write("README.md", strings.Join([]string{
		"# Title",
		"## Sessions: state kept",
		"[ok](docs/DESIGN.md#layers) [ok](#sessions-state-kept) [ok](https://example.com/x.md)",
		"[broken](docs/NOPE.md) [anchor](docs/DESIGN.md#nowhere)",
		"`internal/alpha/{beta,delta}` `alpha/alpha.go` `gamma/missing.go` `tools/list` `text/event-stream`",
		"`internal/*/gamma.go` `internal/*/nothing.go` see docs/OLD.md",
		"`../shared/DESIGN.md` `internal/alpha.Thing` `internal/zeta.Thing`",
		"```sh",
		"[fenced](docs/NOPE.md) `internal/fenced` alpha/alpha.go gamma/gone.go",
		"```",
	}, "\n"))
	write("docs/DESIGN.md", strings.Join([]string{
		"# Design",
		"## Layers",
		"```",
		"fronts   alpha · alpha/beta",
		"```",
		"| package | job |",
		"| `internal/alpha`, `internal/gamma` | … |",
	}, "\n"))

	links, err := Links(root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range links {
		got = append(got, p.String())
	}
	want := []string{
		"README.md:4: link to docs/NOPE.md: docs/NOPE.md does not exist",
		"README.md:4: link to docs/DESIGN.md#nowhere: docs/DESIGN.md has no heading #nowhere",
		"README.md:5: `internal/alpha/delta`: no such file or folder in the repository",
		"README.md:5: `gamma/missing.go`: no such file or folder in the repository",
		"README.md:6: `internal/*/nothing.go`: no such file or folder in the repository",
		"README.md:6: docs/OLD.md does not exist",
		"README.md:7: `../shared/DESIGN.md`: no such file or folder in the repository",
		"README.md:7: `internal/zeta`: no such file or folder in the repository",
		"internal/gamma/gamma.go:1: docs/GONE.md does not exist",
		"README.md:9: gamma/gone.go: no such file in the repository",
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("links:\n got %q\nwant %q", got, want)
	}

	diagram, err := Diagram(root)
	if err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	for _, p := range diagram {
		got = append(got, p.Msg)
	}
	want = []string{
		"the layer diagram does not name internal/gamma",
		"the package table does not name internal/alpha/beta",
	}
	if !slices.Equal(got, want) {
		t.Errorf("diagram:\n got %q\nwant %q", got, want)
	}
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"Sessions: state kept between executions": "sessions-state-kept-between-executions",
		"Bounds around `pml serve`":               "bounds-around-pml-serve",
		"Who decides — and why":                   "who-decides--and-why",
		"[Link](x.md) text":                       "link-text",
	} {
		if got := Slug(in); got != want {
			t.Errorf("Slug(%q) = %q, want %q", in, got, want)
		}
	}
}
