package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestInitWithoutCollector: startgc/atinit is initialised before the
// packages that allocate most at initialisation (santhosh-tekuri's
// meta-schemas, the project's own), and no collection runs from there to
// the end of package initialisation.
func TestInitWithoutCollector(t *testing.T) {
	if os.Getenv("PML_INIT_CHILD") == "1" {
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestInitWithoutCollector$", "-test.count=1")
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1,gctrace=1", "PML_INIT_CHILD=1", "GOGC=", "GOMEMLIMIT=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	const atinit = "init github.com/pml-sandbox/pml/internal/startgc/atinit "
	lines := strings.Split(string(out), "\n")
	held, lastInit, schemas := -1, -1, -1
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, atinit):
			held = i
		case strings.HasPrefix(l, "init github.com/santhosh-tekuri/jsonschema/v6 "):
			schemas = i
		}
		if strings.HasPrefix(l, "init ") {
			lastInit = i
		}
	}
	if held < 0 || schemas < 0 {
		t.Fatalf("no init trace of atinit (%d) or the JSON Schema package (%d):\n%s", held, schemas, out)
	}
	if schemas < held {
		t.Errorf("the JSON Schema package was initialised before atinit")
	}
	for _, l := range lines[held:lastInit] {
		if strings.HasPrefix(l, "gc ") {
			t.Errorf("a collection during package initialisation after atinit: %s", l)
		}
	}
}
