package admission

import (
	"context"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
)

// Admit returns exec with its executions run within c's budget: each
// waits for its ticket first (a refusal is the execution's UNAVAILABLE
// error, 503 with Retry-After on HTTP), runs with the ticket in its
// context so its sandboxes charge their growth to the budget, and a run
// that failed because the budget refused that growth says so (Explain).
// Capability runs happen inside their caller's execution and under its
// ticket.
func (c *Controller) Admit(exec execution.Executor) execution.Executor {
	return admitted{Executor: exec, budget: c}
}

type admitted struct {
	execution.Executor
	budget *Controller
}

func (s admitted) Execute(ctx context.Context, req execution.Request) *execution.Response {
	t, ferr := s.budget.Acquire(ctx)
	if ferr != nil {
		return execution.Failed(req.ExecutionID, ferr)
	}
	defer t.Release()
	ctx = t.Context(ctx)
	resp := s.Executor.Execute(ctx, req)
	if e := Explain(ctx, resp.Error); e != nil {
		resp.Error = e
	}
	return resp
}

func (s admitted) Resume(ctx context.Context, rr execution.ResumeRequest) (*execution.Response, *fault.Error) {
	t, ferr := s.budget.Acquire(ctx)
	if ferr != nil {
		return nil, ferr
	}
	defer t.Release()
	ctx = t.Context(ctx)
	resp, ferr := s.Executor.Resume(ctx, rr)
	if resp != nil {
		if e := Explain(ctx, resp.Error); e != nil {
			resp.Error = e
		}
	}
	return resp, ferr
}

func (s admitted) Rollback(ctx context.Context, rr execution.RollbackRequest) (*execution.Rollback, *fault.Error) {
	if rr.DryRun {
		return s.Executor.Rollback(ctx, rr)
	}
	t, ferr := s.budget.Acquire(ctx)
	if ferr != nil {
		return nil, ferr
	}
	defer t.Release()
	ctx = t.Context(ctx)
	rb, ferr := s.Executor.Rollback(ctx, rr)
	if rb != nil && rb.Execution != nil {
		if e := Explain(ctx, rb.Execution.Error); e != nil {
			rb.Execution.Error = e
		}
	}
	return rb, ferr
}
