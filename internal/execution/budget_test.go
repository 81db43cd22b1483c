package execution_test

import (
	"testing"

	"github.com/pml-sandbox/pml/internal/execution"
)

func TestBudgetReservesAndSettles(t *testing.T) {
	half := func(rest int) int { return rest / 2 }
	none := func(int) int { return 0 }
	greedy := func(rest int) int { return rest + 100 }
	b := execution.NewBudget(10)
	steps := []struct {
		share func(int) int
		want  int
	}{{half, 5}, {half, 3}, {none, 1}, {greedy, 1}}
	var got []int
	for _, s := range steps {
		n, ok := b.Reserve(s.share)
		if !ok || n != s.want {
			t.Fatalf("reserved %d (%v) after %v; want %d", n, ok, got, s.want)
		}
		got = append(got, n)
	}
	if _, ok := b.Reserve(none); ok || b.Used() != 10 {
		t.Fatalf("reserved past the budget: used %d", b.Used())
	}
	b.Settle(5, 2)  // a run that spent 2 of 5 gives 3 back
	b.Settle(1, 7)  // a run cannot report more than it was given
	b.Settle(3, -1) // nor less than nothing: all 3 come back
	if b.Used() != 4 || b.Share() != 10 {
		t.Fatalf("used %d of %d, want 4 of 10", b.Used(), b.Share())
	}
	if n, ok := execution.NewBudget(-4).Reserve(none); ok || n != 0 {
		t.Fatal("a negative budget must hold nothing")
	}
}
