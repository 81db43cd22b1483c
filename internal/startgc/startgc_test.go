package startgc

import (
	"context"
	"math"
	"os"
	"os/exec"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

// gcPercent reads GOGC without setting it (debug.SetGCPercent only
// reads by setting, which would race the fallback's restore).
func gcPercent() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(int64(s[0].Value.Uint64())) // GOGC=off reads as -1
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
	// Nothing turns collection off but Begin: importing the package
	// leaves the process as the environment set it.
	if p, l := gcPercent(), memoryLimit(); p != 100 || l != math.MaxInt64 {
		t.Errorf("before Begin: GC percent %d, memory limit %d; want the defaults", p, l)
	}
	end := Begin()
	if p, l := gcPercent(), memoryLimit(); p != -1 || l != startLimit {
		t.Errorf("before Done: GC percent %d, memory limit %d; want off under %d", p, l, startLimit)
	}
	end()
	end() // a second call changes nothing
	if p, l := gcPercent(), memoryLimit(); p != 100 || l != math.MaxInt64 {
		t.Errorf("after Done: GC percent %d, memory limit %d; want the defaults", p, l)
	}
}

// TestFallback: a start that never says it is over gets the collector
// back all the same, and a late call then changes nothing.
func TestFallback(t *testing.T) {
	before, limit := gcPercent(), memoryLimit()
	end := begin(10 * time.Millisecond)
	deadline := time.Now().Add(10 * time.Second)
	for gcPercent() != before && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if p, l := gcPercent(), memoryLimit(); p != before || l != limit {
		t.Errorf("after the fallback: GC percent %d, memory limit %d; want %d, %d", p, l, before, limit)
	}
	end()
	if p, l := gcPercent(), memoryLimit(); p != before || l != limit {
		t.Errorf("end after the fallback: GC percent %d, memory limit %d; want %d, %d", p, l, before, limit)
	}
}

// TestContext: End calls the function NewContext carries, and does
// nothing for a context without one.
func TestContext(t *testing.T) {
	End(context.Background())
	calls := 0
	ctx := NewContext(context.Background(), func() { calls++ })
	End(context.WithoutCancel(ctx))
	if calls != 1 {
		t.Errorf("End called the start's function %d times, want 1", calls)
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
	end := Begin()
	check("before Done")
	end()
	check("after Done")
}

// TestHoldThenBegin: Begin takes over the start Hold began at package
// initialisation, and its function ends that start.
func TestHoldThenBegin(t *testing.T) {
	before, limit := gcPercent(), memoryLimit()
	for round := range 2 {
		Hold()
		Hold() // a second Hold keeps the first start
		if p, l := gcPercent(), memoryLimit(); p != -1 || l != min(limit, startLimit) {
			t.Fatalf("round %d, after Hold: GC percent %d, memory limit %d; want off", round, p, l)
		}
		end := Begin()
		if p := gcPercent(); p != -1 {
			t.Fatalf("round %d, after Begin: GC percent %d; want still off", round, p)
		}
		end()
		if p, l := gcPercent(), memoryLimit(); p != before || l != limit {
			t.Fatalf("round %d, after end: GC percent %d, memory limit %d; want %d, %d", round, p, l, before, limit)
		}
	}
}
