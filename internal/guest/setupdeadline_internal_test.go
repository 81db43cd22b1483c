package guest

import (
	"context"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/fault"
)

// TestDeadlinePassedWhileLoading: a deadline that passes while the host is
// still handing the sandbox its configuration and code (a loaded machine
// and a short timeout: the soak test met it) ends the run as TIMEOUT, as
// it would a moment later inside the script — never as a SANDBOX_ERROR.
// The guest's allocator checks in on its loops, so the deadline is met
// there.
func TestDeadlinePassedWhileLoading(t *testing.T) {
	ctx := context.Background()
	e, err := New(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	req := Request{Code: "return 1"}
	limits := req.Limits.withDefaults(e.defaults).capped(e.max)
	in, err := e.instance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer e.release(in, false)
	x := newExecution(ctx, e, req, limits, &Result{ExecutionID: "ex_late"}, time.Now())
	defer x.shutdown()
	x.deadline = time.Now().Add(-time.Second)
	cctx := context.WithValue(x.ctx, execKey{}, x) // as run calls the guest
	// The allocator's loops spend the check-in budget the instance was left
	// with; allocate until one of them checks in.
	for i := range 100_000 {
		_, ferr := x.put(cctx, in, make([]byte, 64+i%4096), "loading the configuration")
		if ferr == nil {
			continue
		}
		if ferr.Code != fault.Timeout || x.checkIns == 0 {
			t.Fatalf("after %d allocations and %d check-ins: %v, want TIMEOUT", i, x.checkIns, ferr)
		}
		return
	}
	t.Fatalf("100,000 allocations never checked in (%d check-ins)", x.checkIns)
}
