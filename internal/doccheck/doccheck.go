// Package doccheck holds the repository's documentation to the repository
// as it is: every relative link in a Markdown file, every repository path
// written in backticks, every path/to/file.go in a fenced block and every
// docs/….md a Go comment names must exist
// (a link's #fragment must be a heading of the file it points at), and
// docs/DESIGN.md's layer diagram and package table must name every
// package under internal/. `make lint` runs its test, so a file moved or a
// package added fails CI until the docs follow.
//
// What counts as a repository path is a heuristic, chosen so that a
// mistake costs a false alarm rather than a silence: a backticked token
// without spaces, with a slash, whose first segment is a top-level entry
// of the repository or a package folder under internal/, or whose last
// segment has a source file's extension; or one that starts with ../,
// read from the document's folder. Such a token is looked up from
// the repository's root, from internal/ and from the Markdown file's own
// folder; braces expand (`internal/toolsource/{mcp,openapi}`) and globs
// must match something (`functions/*`). Tokens that name protocol methods
// (`tools/list`), media types or URLs fall through.
package doccheck

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode"
)

// Problem is one thing a document says that the repository contradicts.
type Problem struct {
	// File is the document's path from the repository's root; Line is
	// 1-based (0: the file as a whole).
	File string
	Line int
	Msg  string
}

func (p Problem) String() string {
	if p.Line == 0 {
		return p.File + ": " + p.Msg
	}
	return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Msg)
}

// sourceExt are the extensions that make a backticked token a path
// whatever its first segment.
var sourceExt = []string{".go", ".md", ".c", ".h", ".js", ".ts", ".sh", ".awk", ".yml", ".yaml", ".json", ".toml", ".wasm", ".mod"}

// skipDir reports whether a folder holds no documents of ours: VCS data,
// npm installs, build output and test fixtures (which may describe other
// repositories).
func skipDir(name string) bool {
	switch name {
	case ".git", "node_modules", "testdata", "bin", "dist":
		return true
	}
	return false
}

// Files lists the files under root whose names end with ext, as slash
// paths from root, outside the folders skipDir names.
func Files(root, ext string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && skipDir(d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(d.Name(), ext) {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	return out, err
}

// Packages lists the Go packages under root/internal, as paths from
// internal/ ("toolsource/mcp"): every folder with a Go file that is not a
// test, test fixtures aside.
func Packages(root string) ([]string, error) {
	files, err := Files(filepath.Join(root, "internal"), ".go")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		if d := path.Dir(f); d != "." && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	slices.Sort(out)
	return out, nil
}

var (
	fence      = regexp.MustCompile("^\\s*(```|~~~)")
	codeSpan   = regexp.MustCompile("`+([^`]+)`+")
	linkTarget = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	wholeLink  = regexp.MustCompile(`\[[^\]]*\]\([^)]*\)`)
	bareMD     = regexp.MustCompile(`(?:^|[\s(])((?:\.\./)*[A-Za-z0-9_][A-Za-z0-9_./-]*\.md)\b`)
	fencedGo   = regexp.MustCompile(`\b[A-Za-z0-9_-]+(?:/[A-Za-z0-9_.-]+)*/[A-Za-z0-9_-]+\.go\b`)
	goDocRef   = regexp.MustCompile(`\bdocs/[A-Za-z0-9_./-]*[A-Za-z0-9_-]\.md\b`)
	braces     = regexp.MustCompile(`([\w./-]*)\{([^{}]*)\}([\w./-]*)`)
	heading    = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	inlineLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// Links checks every Markdown file under root (see the package comment)
// and every docs/….md that a Go file names.
func Links(root string) ([]Problem, error) {
	c := &checker{root: root, anchors: map[string][]string{}}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		c.top = append(c.top, e.Name())
	}
	if c.pkgs, err = Packages(root); err != nil {
		return nil, err
	}
	docs, err := Files(root, ".md")
	if err != nil {
		return nil, err
	}
	for _, d := range docs {
		if err := c.doc(d); err != nil {
			return nil, err
		}
	}
	code, err := Files(root, ".go")
	if err != nil {
		return nil, err
	}
	for _, f := range code {
		if strings.HasPrefix(f, "internal/doccheck/") {
			continue // its tests name what does not exist on purpose
		}
		if err := c.goFile(f); err != nil {
			return nil, err
		}
	}
	return c.problems, nil
}

type checker struct {
	root     string
	top      []string // the repository's top-level entries
	pkgs     []string // package folders under internal/
	anchors  map[string][]string
	problems []Problem
}

func (c *checker) report(file string, line int, format string, args ...any) {
	c.problems = append(c.problems, Problem{File: file, Line: line, Msg: fmt.Sprintf(format, args...)})
}

// exists reports whether the slash path p (from root) names a file or
// folder; a glob must match one.
func (c *checker) exists(p string) bool {
	full := filepath.Join(c.root, filepath.FromSlash(p))
	if strings.ContainsAny(p, "*?[") {
		m, _ := filepath.Glob(full)
		return len(m) > 0
	}
	_, err := os.Stat(full)
	return err == nil
}

func (c *checker) doc(name string) error {
	raw, err := os.ReadFile(filepath.Join(c.root, filepath.FromSlash(name)))
	if err != nil {
		return err
	}
	dir := path.Dir(name)
	inFence := false
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if fence.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence {
			// A walk through the code names its files in a block too.
			for _, f := range fencedGo.FindAllString(line, -1) {
				if !c.exists(f) && !c.exists(path.Join("internal", f)) {
					c.report(name, n, "%s: no such file in the repository", f)
				}
			}
			continue
		}
		for _, m := range codeSpan.FindAllStringSubmatch(line, -1) {
			c.codePath(name, n, dir, strings.TrimSpace(m[1]))
		}
		prose := codeSpan.ReplaceAllString(line, "")
		for _, m := range linkTarget.FindAllStringSubmatch(prose, -1) {
			c.link(name, n, dir, m[1])
		}
		for _, m := range bareMD.FindAllStringSubmatch(wholeLink.ReplaceAllString(prose, ""), -1) {
			if p := m[1]; !c.exists(path.Join(dir, p)) && !c.exists(p) {
				c.report(name, n, "%s does not exist", p)
			}
		}
	}
	return sc.Err()
}

// link checks one link target.
func (c *checker) link(file string, line int, dir, target string) {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return
	}
	p, frag, _ := strings.Cut(target, "#")
	dest := file
	if p != "" {
		dest = path.Join(dir, p)
		if !c.exists(dest) {
			c.report(file, line, "link to %s: %s does not exist", target, dest)
			return
		}
	}
	if frag == "" || !strings.HasSuffix(dest, ".md") {
		return
	}
	anchors, err := c.headings(dest)
	if err != nil {
		c.report(file, line, "link to %s: %v", target, err)
		return
	}
	if !slices.Contains(anchors, frag) {
		c.report(file, line, "link to %s: %s has no heading #%s", target, dest, frag)
	}
}

// codePath checks a backticked token that reads as a repository path.
func (c *checker) codePath(file string, line int, dir, tok string) {
	if tok == "" || strings.ContainsAny(tok, " \t<>$~@|:=") || !strings.Contains(tok, "/") || strings.HasPrefix(tok, "/") {
		return
	}
	if strings.HasPrefix(tok, "../") {
		// Relative to the document: it must stay inside the repository.
		if p := path.Join(dir, tok); strings.HasPrefix(p, "../") || !c.exists(p) {
			c.report(file, line, "`%s`: no such file or folder in the repository", tok)
		}
		return
	}
	for _, p := range expand(tok) {
		p = trimSelector(p)
		first, _, _ := strings.Cut(p, "/")
		ext := path.Ext(strings.TrimSuffix(p, "/"))
		if !slices.Contains(c.top, first) && !slices.Contains(c.pkgs, first) && !slices.Contains(sourceExt, ext) {
			continue
		}
		if !c.exists(p) && !c.exists(path.Join("internal", p)) && !c.exists(path.Join(dir, p)) {
			c.report(file, line, "`%s`: no such file or folder in the repository", p)
		}
	}
}

// trimSelector cuts a Go selector off a package path:
// internal/approval.Policy names internal/approval.
func trimSelector(p string) string {
	dir, last := path.Split(p)
	if name, sel, ok := strings.Cut(last, "."); ok && sel != "" && unicode.IsUpper(rune(sel[0])) {
		return dir + name
	}
	return p
}

// expand expands the braces of a token: a/{b,c} is a/b and a/c.
func expand(tok string) []string {
	m := braces.FindStringSubmatchIndex(tok)
	if m == nil {
		return []string{tok}
	}
	var out []string
	for _, alt := range strings.Split(tok[m[4]:m[5]], ",") {
		out = append(out, expand(tok[:m[4]-1]+strings.TrimSpace(alt)+tok[m[5]+1:])...)
	}
	return out
}

// goFile checks the docs/….md a Go file names.
func (c *checker) goFile(name string) error {
	raw, err := os.ReadFile(filepath.Join(c.root, filepath.FromSlash(name)))
	if err != nil {
		return err
	}
	for n, line := range strings.Split(string(raw), "\n") {
		for _, p := range goDocRef.FindAllString(line, -1) {
			if !c.exists(p) {
				c.report(name, n+1, "%s does not exist", p)
			}
		}
	}
	return nil
}

// headings returns the anchors of a Markdown file's headings, as GitHub
// makes them: the text lowercased, punctuation dropped, spaces as
// hyphens, a repeated one numbered.
func (c *checker) headings(name string) ([]string, error) {
	if a, ok := c.anchors[name]; ok {
		return a, nil
	}
	raw, err := os.ReadFile(filepath.Join(c.root, filepath.FromSlash(name)))
	if err != nil {
		return nil, err
	}
	var out []string
	seen := map[string]int{}
	inFence := false
	for _, line := range strings.Split(string(raw), "\n") {
		if fence.MatchString(line) {
			inFence = !inFence
			continue
		}
		m := heading.FindStringSubmatch(line)
		if inFence || m == nil {
			continue
		}
		s := Slug(m[2])
		if k := seen[s]; k > 0 {
			out = append(out, fmt.Sprintf("%s-%d", s, k))
		} else {
			out = append(out, s)
		}
		seen[s]++
	}
	c.anchors[name] = out
	return out, nil
}

// Slug is the anchor GitHub gives a heading's text.
func Slug(text string) string {
	text = inlineLink.ReplaceAllString(text, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Diagram checks that docs/DESIGN.md's layer diagram (its first fenced
// block) and its package table (the table rows) name every package under
// internal/, each as its path from internal/ ("toolsource/mcp"; braces
// expand, as in "testutil/{moto,tsc}").
func Diagram(root string) ([]Problem, error) {
	const file = "docs/DESIGN.md"
	raw, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		return nil, err
	}
	pkgs, err := Packages(root)
	if err != nil {
		return nil, err
	}
	var diagram, table strings.Builder
	inFence, fences := false, 0
	for _, line := range strings.Split(string(raw), "\n") {
		if fence.MatchString(line) {
			inFence = !inFence
			fences++
			continue
		}
		switch {
		case inFence && fences == 1:
			diagram.WriteString(line + "\n")
		case !inFence && strings.HasPrefix(strings.TrimSpace(line), "|"):
			table.WriteString(line + "\n")
		}
	}
	if diagram.Len() == 0 {
		return []Problem{{File: file, Msg: "no layer diagram (a fenced block)"}}, nil
	}
	var out []Problem
	for _, where := range []struct {
		what, text string
	}{{"layer diagram", expandAll(diagram.String())}, {"package table", expandAll(table.String())}} {
		for _, p := range pkgs {
			if !regexp.MustCompile(`(^|[^\w/])(internal/)?` + regexp.QuoteMeta(p) + `($|[^\w/])`).MatchString(where.text) {
				out = append(out, Problem{File: file, Msg: fmt.Sprintf("the %s does not name internal/%s", where.what, p)})
			}
		}
	}
	return out, nil
}

// expandAll expands every braced token of a text.
func expandAll(text string) string {
	for braces.MatchString(text) {
		text = braces.ReplaceAllStringFunc(text, func(tok string) string {
			return strings.Join(expand(tok), " · ")
		})
	}
	return text
}
