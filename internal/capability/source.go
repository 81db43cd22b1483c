package capability

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pml-sandbox/pml/internal/analysis"
	"github.com/pml-sandbox/pml/internal/argcheck"
	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/script"
	"github.com/pml-sandbox/pml/internal/trace"
)

// DefaultMaxDepth bounds nesting: a script may call a capability that calls
// a capability that calls a capability, and no deeper.
const DefaultMaxDepth = 3

// Invoker runs capabilities somewhere: in this process, or in the
// capability Lambda.
type Invoker interface {
	Invoke(ctx context.Context, inv execution.Invocation) (*execution.Response, error)
}

// Source offers the registry's capabilities to the bridge as tools.
type Source struct {
	reg      Registry
	inv      Invoker
	maxDepth int
	log      *slog.Logger

	// names are the capabilities the last Tools call listed, to tell which
	// names a capability's code calls are capabilities.
	names atomic.Pointer[map[string]bool]

	mu         sync.Mutex
	validators map[string]*argcheck.Validator // by capability id
	refs       map[string]analysis.Refs       // by capability id
}

// NewSource returns a Source; maxDepth ≤ 0 means DefaultMaxDepth.
func NewSource(reg Registry, inv Invoker, maxDepth int, log *slog.Logger) *Source {
	if maxDepth <= 0 {
		maxDepth = DefaultMaxDepth
	}
	if log == nil {
		log = slog.Default()
	}
	return &Source{reg: reg, inv: inv, maxDepth: maxDepth, log: log, validators: map[string]*argcheck.Validator{}, refs: map[string]analysis.Refs{}}
}

// Tools implements execution.ToolSource: the latest version of each capability.
func (s *Source) Tools(ctx context.Context) ([]catalog.Tool, error) {
	caps, err := s.reg.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]catalog.Tool, 0, len(caps))
	names := make(map[string]bool, len(caps))
	for _, c := range caps {
		out = append(out, catalog.Tool{Server: c.Namespace(), Name: c.Action(), Description: c.Description,
			InputSchema: c.InputSchema, Kind: trace.KindCapability})
		names[c.Name] = true
	}
	s.names.Store(&names)
	return out, nil
}

// Call implements execution.ToolSource: checks depth, cycles and
// arguments, takes a sandbox and a share of the caller's budget for the
// run, then runs the capability through the invoker.
func (s *Source) Call(ctx context.Context, t catalog.Tool, args json.RawMessage, opt execution.CallOptions) (json.RawMessage, error) {
	name := t.FullName()
	chain := slices.Clone(opt.Chain)
	depth := opt.Depth() + 1
	if slices.Contains(chain, name) {
		return nil, &fault.Error{Code: fault.CapabilityCycle, Tool: name,
			Message: "capability cycle: " + strings.Join(append(chain, name), " → "), Details: map[string]any{"chain": append(chain, name)}}
	}
	if depth > s.maxDepth {
		return nil, fault.Limitf(fault.LimitDepth, "capabilities nest at most %d deep: %s", s.maxDepth, strings.Join(append(chain, name), " → ")).WithTool(name)
	}
	c, err := s.reg.Get(ctx, name, 0)
	if err != nil {
		return nil, fault.As(err).WithTool(name)
	}
	args, ferr := s.validator(c).Check(args)
	if ferr != nil {
		return nil, ferr.WithTool(name)
	}
	timeoutMS := 0
	if d, ok := ctx.Deadline(); ok {
		left := time.Until(d).Milliseconds()
		if left < 1 {
			return nil, fault.New(fault.Timeout, "no time left to run %s", name).WithTool(name)
		}
		timeoutMS = int(left)
	}
	budget := opt.Sandboxes
	if budget == nil {
		// A caller outside a bridge execution is a request tree of its own.
		budget = execution.NewBudget(execution.DefaultSandboxes)
	}
	reserved, ok := budget.Reserve(s.share(c, depth))
	if !ok {
		return nil, fault.Limitf(fault.LimitSandboxes,
			"no sandbox left to run %s: this run's share of the request's sandbox budget (%d) is spent or held by calls in flight",
			name, budget.Share()).WithTool(name)
	}
	if err := s.reg.IncrementCalls(ctx, name); err != nil {
		s.log.WarnContext(ctx, "capability call count not updated", "capability", name, "err", err)
	}
	inv := execution.Invocation{
		Parent:  execution.Parent{Lineage: opt.Lineage, Capability: name, Sandboxes: reserved - 1},
		Version: c.Version, Args: args, TimeoutMS: timeoutMS,
	}
	resp, err := s.inv.Invoke(ctx, inv)
	if err != nil {
		// The run may have started, and may still be running in another
		// process: all it was given counts as spent.
		budget.Settle(reserved, reserved)
		return nil, fault.As(err).WithTool(name)
	}
	budget.Settle(reserved, 1+resp.Sandboxes)
	if opt.OnChild != nil && resp.ExecutionID != "" {
		opt.OnChild(resp.ExecutionID, resp.Calls)
	}
	if !resp.OK {
		return nil, childError(name, resp.Error)
	}
	if len(resp.Result) == 0 {
		return json.RawMessage("null"), nil
	}
	return resp.Result, nil
}

// childError keeps the child's code and names the capability, so a caller
// sees "math:sum: TOOL_ERROR ..." and can still branch on the code.
func childError(name string, e *fault.Error) *fault.Error {
	if e == nil {
		return fault.New(fault.Internal, "%s failed without an error", name).WithTool(name)
	}
	out := *e
	out.Message = name + ": " + e.Message
	if out.Tool == "" {
		out.Tool = name
	} else if out.Tool != name {
		d := map[string]any{"capability": name, "inner_tool": e.Tool}
		if e.Details != nil {
			d["details"] = e.Details
		}
		out.Details = d
		out.Tool = name
	}
	return &out
}

// share returns how much of what is left of its caller's budget (after its
// own sandbox) a run of c gets for its own capability calls.
//
// Without a counter shared across processes, every run must be handed its
// share up front, before its caller knows how many siblings will follow
// (Promise.all issues its calls one by one). So a run that may call
// capabilities gets half of what is left (rounded up, so that the last
// sandbox is usable): siblings started together get 1/2, 1/4, 1/8... and
// can never claim more than the whole between them,
// while a lone call (the common "one capability orchestrates" case) still
// gets half of the budget. Whatever a run does not spend comes back when it
// returns, so calls made one after another each find the budget as the
// previous ones left it. A run that provably calls no capability — it is
// at the depth limit, or its code names no capability and reaches mcp only
// statically — gets nothing beyond its own sandbox, so a wide Promise.all
// over such leaves costs exactly one sandbox per call.
func (s *Source) share(c Capability, depth int) func(rest int) int {
	if depth >= s.maxDepth || !s.mayCallCapabilities(c) {
		return func(int) int { return 0 }
	}
	return func(rest int) int { return (rest + 1) / 2 }
}

// mayCallCapabilities reports whether c's code may call a capability:
// dynamic access to mcp, or a static name that is a capability (an MCP
// tool of the same name would win, so this errs on the generous side).
// Unknown capability names (no listing yet) count as capabilities.
func (s *Source) mayCallCapabilities(c Capability) bool {
	s.mu.Lock()
	refs, ok := s.refs[c.ID]
	s.mu.Unlock()
	if !ok {
		p, err := script.Prepare(c.Code, script.LangAuto)
		if err != nil || !p.Checked {
			return true // unread or failing: be generous rather than wrong
		}
		refs = p.Refs
		s.mu.Lock()
		s.refs[c.ID] = refs
		s.mu.Unlock()
	}
	if refs.Dynamic {
		return true
	}
	names := s.names.Load()
	for _, r := range refs.Tools {
		if names == nil || (*names)[r.FullName()] {
			return true
		}
	}
	return false
}

func (s *Source) validator(c Capability) *argcheck.Validator {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.validators[c.ID]
	if !ok {
		v = argcheck.New(c.InputSchema)
		s.validators[c.ID] = v
	}
	return v
}

// Runner runs capability invocations on an executor: in this process, the
// executor of every other execution (each run is a fresh sandbox anyway);
// in the capability function, that function's. It is the in-process
// Invoker, and what the capability function's handler calls.
type Runner struct {
	Registry Registry
	// Executor runs the capability's code. The one that serves the
	// executions whose calls reach this runner may be built after it
	// (its capability source needs the runner): set it before the first
	// call.
	Executor execution.Executor
}

// Invoke implements Invoker: Run.
func (r *Runner) Invoke(ctx context.Context, inv execution.Invocation) (*execution.Response, error) {
	return r.Run(ctx, inv)
}

// Run loads the invocation's capability version and runs it as a child
// execution. Errors are refusals (nothing ran): a bad name, a capability or
// version that does not exist.
func (r *Runner) Run(ctx context.Context, inv execution.Invocation) (*execution.Response, error) {
	if _, _, err := ParseName(inv.Parent.Capability); err != nil {
		return nil, err
	}
	c, err := r.Registry.Get(ctx, inv.Parent.Capability, inv.Version)
	if err != nil {
		return nil, err
	}
	req, ferr := inv.Request(c.Code)
	if ferr != nil {
		return nil, ferr
	}
	return r.Executor.Execute(ctx, req), nil
}
