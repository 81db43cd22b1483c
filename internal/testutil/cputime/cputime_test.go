//go:build unix

package cputime

import "testing"

func TestProcessGrows(t *testing.T) {
	before := Process()
	x := 0
	for i := range 50_000_000 {
		x += i % 7
	}
	if Process() <= before || x == 0 {
		t.Fatalf("CPU time did not grow over a busy loop: %v -> %v", before, Process())
	}
}
