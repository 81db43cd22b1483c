package executor

import "github.com/pml-sandbox/pml/internal/execution"

// budget is a new execution's share of its request tree's sandbox budget
// (execution.Budget): the whole budget for a request, the share its caller
// handed down (never more than the whole) for a capability run.
func (s *Service) budget(p *execution.Parent) *execution.Budget {
	if p == nil {
		return execution.NewBudget(s.sandbox)
	}
	return execution.NewBudget(min(p.Sandboxes, s.sandbox))
}
