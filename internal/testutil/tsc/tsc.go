// Package tsc finds the TypeScript compiler for tests that type-check
// generated declarations and the README's examples: the version
// scripts/typescript.sh pins, installed from npm on first use (never
// committed).
package tsc

import (
	"os"
	"os/exec"
	"sync"
	"testing"

	"github.com/pml-sandbox/pml/internal/testutil/installer"
)

var (
	once    sync.Once
	tscPath string
	errMsg  string
)

// Path returns the tsc to run. $PML_TSC names one outright. Without node
// and npm the test is skipped with a message saying so, except under CI
// (CI=true), where a check that cannot run is a failure, never a skip.
func Path(tb testing.TB) string {
	tb.Helper()
	if p := os.Getenv("PML_TSC"); p != "" {
		return p
	}
	once.Do(install)
	if errMsg != "" {
		if os.Getenv("CI") != "" {
			tb.Fatalf("TypeScript compiler: %s", errMsg)
		}
		tb.Skipf("TypeScript compiler unavailable (%s): install node and npm, or set PML_TSC", errMsg)
	}
	return tscPath
}

func install() {
	for _, bin := range []string{"node", "npm"} {
		if _, err := exec.LookPath(bin); err != nil {
			errMsg = bin + " is not installed"
			return
		}
	}
	p, err := installer.Run("typescript.sh")
	if err != nil {
		errMsg = err.Error()
		return
	}
	tscPath = p
}

// Check type-checks one file strictly (no emit) against the ES2022
// library alone, or with extra options after (a later --lib wins), and
// returns tsc's output.
func Check(tsc, file string, extra ...string) ([]byte, error) {
	args := append([]string{tsc, "--noEmit", "--strict", "--target", "es2022", "--lib", "es2022"}, extra...)
	return exec.Command("node", append(args, file)...).CombinedOutput()
}
