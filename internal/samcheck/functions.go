package samcheck

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Runtimes whose entry point is an executable named bootstrap.
var bootstrapRuntimes = []string{"provided.al2023", "provided.al2"}

// goArch maps Lambda architectures to GOARCH.
var goArch = map[string]string{"arm64": "arm64", "x86_64": "amd64"}

// packageDir is where the Go main package of a function lives, relative to
// its CodeUri: ExecuteFunction → functions/execute, CapabilityFunction →
// functions/capability (the logical id without "Function", lower-cased).
func packageDir(logicalID string) string {
	return "functions/" + strings.ToLower(strings.TrimSuffix(logicalID, "Function"))
}

// checkFunctions checks what `sam build` with BuildMethod makefile needs of
// each AWS::Serverless::Function: a bootstrap handler on an OS-only
// runtime, the CodeUri directory with a Makefile, a build-<LogicalId>
// target whose recipe builds the function's Go main package for Linux and
// the function's architecture into $(ARTIFACTS_DIR)/bootstrap.
func (t *template) checkFunctions() []Problem {
	var out []Problem
	bad := func(at, format string, a ...any) {
		out = append(out, Problem{Path: at, Message: fmt.Sprintf(format, a...)})
	}
	for _, id := range sortedKeys(t.resources) {
		r := t.resources[id]
		if typeOf(r) != "AWS::Serverless::Function" {
			continue
		}
		at := "/Resources/" + escape(id)
		props := propertiesOf(r)
		prop := func(name string) any {
			if v, ok := props[name]; ok {
				return v
			}
			return t.globals[name]
		}
		if h := prop("Handler"); h != "bootstrap" {
			bad(at+"/Properties/Handler", "handler is %v; a Go function on an OS-only runtime is the executable bootstrap", orNone(h))
		}
		runtime, _ := prop("Runtime").(string)
		if !contains(bootstrapRuntimes, runtime) {
			bad(at+"/Properties/Runtime", "runtime is %q; want one of %v", runtime, bootstrapRuntimes)
		}
		arch := "x86_64" // Lambda's default
		if a, ok := prop("Architectures").([]any); ok && len(a) == 1 {
			arch, _ = a[0].(string)
		}
		codeURI, ok := props["CodeUri"].(string)
		if !ok {
			codeURI, ok = t.globals["CodeUri"].(string)
		}
		if !ok {
			bad(at+"/Properties/CodeUri", "CodeUri must be a local directory (the module root)")
			continue
		}
		codeDir := filepath.Join(t.dir, filepath.FromSlash(codeURI))
		if st, err := os.Stat(codeDir); err != nil || !st.IsDir() {
			bad(at+"/Properties/CodeUri", "code directory %q does not exist next to the template", codeURI)
			continue
		}
		pkg := packageDir(id)
		if err := mainPackage(filepath.Join(codeDir, filepath.FromSlash(pkg))); err != nil {
			bad(at, "Go main package %s (in CodeUri %q): %v", pkg, codeURI, err)
		}
		meta, _ := r.(map[string]any)["Metadata"].(map[string]any)
		if meta["BuildMethod"] != "makefile" {
			bad(at+"/Metadata/BuildMethod", "BuildMethod is %v; want makefile (sam build then runs make build-%s)", orNone(meta["BuildMethod"]), id)
			continue
		}
		mk, err := readMakefile(filepath.Join(codeDir, "Makefile"))
		if err != nil {
			bad(at+"/Metadata/BuildMethod", "sam build runs make in CodeUri %q: %v", codeURI, err)
			continue
		}
		recipe, ok := mk.recipe("build-" + id)
		if !ok {
			bad(at+"/Metadata/BuildMethod", "the Makefile has no target build-%s, which sam build runs", id)
			continue
		}
		for _, want := range []string{
			"GOOS=linux",
			"GOARCH=" + goArch[arch],
			"$(ARTIFACTS_DIR)/bootstrap",
			"./" + pkg,
		} {
			if !strings.Contains(recipe, want) {
				bad(at+"/Metadata/BuildMethod", "the recipe of build-%s does not contain %q (Architectures %s, package %s)", id, want, arch, pkg)
			}
		}
	}
	return out
}

func orNone(v any) string {
	if v == nil {
		return "not set"
	}
	return fmt.Sprintf("%q", fmt.Sprint(v))
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// mainPackage checks that dir holds a Go package main with a func main.
func mainPackage(dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return errors.New("no Go files there")
	}
	fset := token.NewFileSet()
	found := false
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if file.Name.Name != "main" {
			return fmt.Errorf("%s is package %s, not main", filepath.Base(f), file.Name.Name)
		}
		for _, d := range file.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && fn.Name.Name == "main" {
				found = true
			}
		}
	}
	if !found {
		return errors.New("no func main")
	}
	return nil
}

// makefile is the part of a Makefile this check reads: simple variable
// definitions and the recipes of explicit targets.
type makefile struct {
	vars    map[string]string
	recipes map[string][]string
}

var (
	makeVar    = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)\s*(?::=|\?=|=)\s*(.*)$`)
	makeRule   = regexp.MustCompile(`^([^\t#=:][^=:]*?):(?:[^=]|$)`)
	makeVarUse = regexp.MustCompile(`\$[({]([A-Za-z_][A-Za-z0-9_]*)[)}]`)
)

func readMakefile(path string) (*makefile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	mk := &makefile{vars: map[string]string{}, recipes: map[string][]string{}}
	var current []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "\t") {
			for _, target := range current {
				mk.recipes[target] = append(mk.recipes[target], strings.TrimSpace(line))
			}
			continue
		}
		if m := makeVar.FindStringSubmatch(line); m != nil {
			mk.vars[m[1]] = strings.TrimSpace(m[2])
			current = nil
			continue
		}
		if m := makeRule.FindStringSubmatch(line); m != nil {
			current = strings.Fields(m[1])
			for _, target := range current {
				if _, ok := mk.recipes[target]; !ok {
					mk.recipes[target] = nil
				}
			}
			continue
		}
		if strings.TrimSpace(line) != "" && !strings.HasPrefix(line, "#") {
			current = nil
		}
	}
	return mk, sc.Err()
}

// recipe returns target's recipe with the Makefile's own variables
// expanded (ARTIFACTS_DIR, set by sam build, stays as written).
func (mk *makefile) recipe(target string) (string, bool) {
	lines, ok := mk.recipes[target]
	if !ok {
		return "", false
	}
	s := strings.Join(lines, "\n")
	for range 10 { // variables may name variables; 10 levels is plenty
		next := makeVarUse.ReplaceAllStringFunc(s, func(use string) string {
			name := makeVarUse.FindStringSubmatch(use)[1]
			if v, ok := mk.vars[name]; ok {
				return v
			}
			return use
		})
		if next == s {
			break
		}
		s = next
	}
	return s, true
}
