package samcheck

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Runtimes whose entry point is an executable named bootstrap.
var bootstrapRuntimes = []string{"provided.al2023", "provided.al2"}

// goArch maps Lambda architectures to GOARCH.
var goArch = map[string]string{"arm64": "arm64", "x86_64": "amd64"}

// artifactsDir stands in for the directory sam build passes as
// ARTIFACTS_DIR, so the recipe make prints shows where it writes.
const artifactsDir = "/sam-artifacts"

// packageDir is where the Go main package of a function lives, relative to
// its CodeUri: ExecuteFunction → functions/execute, CapabilityFunction →
// functions/capability (the logical id without "Function", lower-cased).
func packageDir(logicalID string) string {
	return "functions/" + strings.ToLower(strings.TrimSuffix(logicalID, "Function"))
}

// checkFunctions checks what `sam build` with BuildMethod makefile needs of
// each AWS::Serverless::Function: a bootstrap handler on an OS-only
// runtime, the CodeUri directory with a Makefile, and a build-<LogicalId>
// target whose commands (as `make -n` prints them) build the function's Go
// main package for Linux and the function's architecture into
// $(ARTIFACTS_DIR)/bootstrap. The error says make could not be run.
func (t *template) checkFunctions() ([]Problem, error) {
	var out []Problem
	bad := func(at, rule, format string, a ...any) {
		out = append(out, Problem{Path: at, Rule: "pml:" + rule, Message: fmt.Sprintf(format, a...)})
	}
	var makeErr error
	ids := make([]string, 0, len(t.resources))
	for id, r := range t.resources {
		if typeOf(r) == "AWS::Serverless::Function" {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		r := t.resources[id]
		props := propertiesOf(r)
		prop := func(name string) any {
			if v, ok := props[name]; ok {
				return v
			}
			return t.globals[name]
		}
		if h := prop("Handler"); h != "bootstrap" {
			bad(pointer("Resources", id, "Properties", "Handler"), "handler", "handler is %v; a Go function on an OS-only runtime is the executable bootstrap", orNone(h))
		}
		if runtime, _ := prop("Runtime").(string); !slices.Contains(bootstrapRuntimes, runtime) {
			bad(pointer("Resources", id, "Properties", "Runtime"), "runtime", "runtime is %q; want one of %v", runtime, bootstrapRuntimes)
		}
		arch := "x86_64" // Lambda's default
		if a, ok := prop("Architectures").([]any); ok && len(a) == 1 {
			arch, _ = a[0].(string)
		}
		codeURI, ok := prop("CodeUri").(string)
		codeDir := filepath.Join(t.dir, filepath.FromSlash(codeURI))
		if st, err := os.Stat(codeDir); !ok || err != nil || !st.IsDir() {
			bad(pointer("Resources", id, "Properties", "CodeUri"), "codeuri", "CodeUri %v is not a directory next to the template (the module root)", orNone(prop("CodeUri")))
			continue
		}
		pkg := packageDir(id)
		if err := mainPackage(filepath.Join(codeDir, filepath.FromSlash(pkg))); err != nil {
			bad(pointer("Resources", id), "package", "Go main package %s (in CodeUri %q): %v", pkg, codeURI, err)
		}
		at := pointer("Resources", id, "Metadata", "BuildMethod")
		meta, _ := r.(map[string]any)["Metadata"].(map[string]any)
		if meta["BuildMethod"] != "makefile" {
			bad(at, "make", "BuildMethod is %v; want makefile (sam build then runs make build-%s)", orNone(meta["BuildMethod"]), id)
			continue
		}
		if _, err := os.Stat(filepath.Join(codeDir, "Makefile")); err != nil {
			bad(at, "make", "sam build runs make in CodeUri %q: %v", codeURI, err)
			continue
		}
		commands, err := dryRun(codeDir, "build-"+id)
		var exit *exec.ExitError
		switch {
		case errors.As(err, &exit):
			bad(at, "make", "make -n build-%s in CodeUri %q, as sam build runs it, fails: %v", id, codeURI, err)
			continue
		case err != nil:
			makeErr = err
			continue
		}
		for _, want := range []string{"GOOS=linux", "GOARCH=" + goArch[arch], artifactsDir + "/bootstrap", "./" + pkg} {
			if !strings.Contains(commands, want) {
				bad(at, "make", "make build-%s does not run %q (Architectures %s, package %s); it runs:\n%s", id, want, arch, pkg, commands)
			}
		}
	}
	return out, makeErr
}

// dryRun returns the commands `make target` would run in dir, as sam build
// runs it (ARTIFACTS_DIR set), without running them: make -n expands every
// variable, include and pattern rule as make itself does. The flags of a
// make that runs this test are not passed on.
func dryRun(dir, target string) (string, error) {
	cmd := exec.Command("make", "--no-print-directory", "-n", target, "ARTIFACTS_DIR="+artifactsDir)
	cmd.Dir = dir
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return slices.Contains([]string{"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES"}, name)
	})
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return "", fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
		}
		return "", fmt.Errorf("make could not be run; the build targets were not checked: %w", err)
	}
	return strings.TrimSpace(stdout.String()), nil
}

func orNone(v any) string {
	if v == nil {
		return "not set"
	}
	return fmt.Sprintf("%q", fmt.Sprint(v))
}

// mainPackage checks that dir holds a Go package main with a func main
// (go vet does not notice a main package without one; only the link does).
func mainPackage(dir string) error {
	pkg, err := build.ImportDir(dir, 0)
	if err != nil {
		return err
	}
	if pkg.Name != "main" {
		return fmt.Errorf("package %s, not main", pkg.Name)
	}
	fset := token.NewFileSet()
	for _, name := range pkg.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && fn.Name.Name == "main" {
				return nil
			}
		}
	}
	return errors.New("no func main")
}
