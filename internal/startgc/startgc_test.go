package startgc

import (
	"math"
	"os"
	"os/exec"
	"runtime/debug"
	"testing"
)

func gcPercent() int {
	p := debug.SetGCPercent(-1)
	debug.SetGCPercent(p)
	return p
}

func memoryLimit() int64 { return debug.SetMemoryLimit(-1) }

// TestOffUntilDone runs in a process started with the environment's
// defaults (the child below when GOGC or GOMEMLIMIT are set here).
func TestOffUntilDone(t *testing.T) {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestOffUntilDone$", "-test.count=1")
		cmd.Env = append(os.Environ(), "GOGC=", "GOMEMLIMIT=")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return
	}
	// The fallback may have fired already on a slow machine; only then
	// is the collector allowed to be on before Done.
	if p, l := gcPercent(), memoryLimit(); !done.Load() && (p != -1 || l != startLimit) {
		t.Errorf("before Done: GC percent %d, memory limit %d; want off under %d", p, l, startLimit)
	}
	Done()
	Done() // a second call changes nothing
	if p, l := gcPercent(), memoryLimit(); p != 100 || l != math.MaxInt64 {
		t.Errorf("after Done: GC percent %d, memory limit %d; want the defaults", p, l)
	}
}

// TestEnvironmentStands: GOGC=off and a lower GOMEMLIMIT are the
// operator's, before Done and after.
func TestEnvironmentStands(t *testing.T) {
	if os.Getenv("STARTGC_CHILD") == "" {
		for _, env := range [][]string{{"GOGC=off"}, {"GOGC=50", "GOMEMLIMIT=8MiB"}} {
			cmd := exec.Command(os.Args[0], "-test.run=^TestEnvironmentStands$", "-test.count=1")
			cmd.Env = append(append(os.Environ(), "STARTGC_CHILD=1"), env...)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%v: %v\n%s", env, err, out)
			}
		}
		return
	}
	check := func(when string) {
		switch os.Getenv("GOGC") {
		case "off":
			if p := gcPercent(); p != -1 {
				t.Errorf("GOGC=off %s: GC percent %d", when, p)
			}
		case "50":
			if l := memoryLimit(); l != 8<<20 {
				t.Errorf("GOMEMLIMIT=8MiB %s: memory limit %d", when, l)
			}
			if p := gcPercent(); when == "after Done" && p != 50 {
				t.Errorf("GOGC=50 after Done: GC percent %d", p)
			}
		}
	}
	check("before Done")
	Done()
	check("after Done")
}
