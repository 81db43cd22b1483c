package bench

import (
	"context"
	"math"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pml-sandbox/pml/internal/capability"
)

// TestServedThroughput drives the in-process pml serve briefly with each
// throughput script, then holds a few executions for the memory figure,
// and checks that nothing is left running afterwards.
func TestServedThroughput(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a guest engine")
	}
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx := context.Background()
	s, err := startServed(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	for _, code := range []string{scriptReturn, scriptOneCall} {
		t.Run(code, func(t *testing.T) {
			rps, err := s.throughput(ctx, code, ServeClients, 50*time.Millisecond, 300*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			if !(rps > 0) || math.IsInf(rps, 0) {
				t.Errorf("throughput %v executions/s; want a positive number", rps)
			}
		})
	}
	t.Run("a failing script fails the figure", func(t *testing.T) {
		if _, err := s.throughput(ctx, "throw new Error('no')", 2, 0, 10*time.Millisecond); err == nil {
			t.Error("a failing script gave a throughput")
		}
	})
	t.Run("memory", func(t *testing.T) {
		mem, err := s.memoryPerExecution(ctx, 4)
		if err != nil {
			t.Fatal(err)
		}
		// Four executions are too few for a stable figure; the run must
		// only hold them all and let them go.
		if math.IsNaN(mem.PSS) || math.IsNaN(mem.RSS) || math.IsNaN(mem.Private) || math.IsNaN(mem.Heap) {
			t.Errorf("%+v KiB", mem)
		}
		t.Logf("per held execution: %.0f KiB proportional, %.0f KiB resident, %.0f KiB private, %.0f KiB Go heap", mem.PSS, mem.RSS, mem.Private, mem.Heap)
	})
}

// TestServedWithCapabilities: a server started over a seeded registry
// answers both capability scripts back to back, and a missing capability
// fails the figure.
func TestServedWithCapabilities(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a guest engine")
	}
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx := context.Background()
	s, err := startServedWith(ctx, "", func(path string) error { return capability.SeedFile(path, SeedCapabilities(50)) }, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	for _, code := range []string{capScriptReturn, capScriptOneCall, "return await mcp.ns4.action42({a: 1})"} {
		if d, err := inTurn(ctx, []*served{s}, code); err != nil || d[0] <= 0 {
			t.Fatalf("%s: %v %v", code, d, err)
		}
	}
	if _, err := inTurn(ctx, []*served{s}, "return await mcp.ns9.action999({a: 1})"); err == nil {
		t.Fatal("a capability never saved was answered")
	}
}
