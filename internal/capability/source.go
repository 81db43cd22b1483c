package capability

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pml-sandbox/pml/internal/argcheck"
	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/js/analysis"
	"github.com/pml-sandbox/pml/internal/js/script"
	"github.com/pml-sandbox/pml/internal/tracectx"
)

// DefaultMaxDepth bounds nesting: a script may call a capability that calls
// a capability that calls a capability, and no deeper.
const DefaultMaxDepth = 3

// Invoker runs capabilities somewhere: in this process, or in the
// capability Lambda.
type Invoker interface {
	Invoke(ctx context.Context, inv execution.Invocation) (*execution.Response, error)
}

// Source offers the registry's capabilities to the executor as tools. It is
// an execution.ResolvingSource: an execution resolves the names its code
// references (Resolve: one registry Lookup), discovery lists the Index
// (Tools), and calls are counted in batches (Counter).
type Source struct {
	reg      Registry
	inv      Invoker
	maxDepth int
	log      *slog.Logger
	index    *Index
	counter  *Counter

	// latest is the newest version of each capability this process
	// resolved: what Call runs (the execution that calls it resolved it
	// first, so it is at least as new as what that execution saw).
	latestMu sync.Mutex
	latest   map[string]Capability

	mu         sync.Mutex
	validators map[string]*argcheck.Validator // by capability id
	refs       map[string]analysis.Refs       // by capability id
}

// SourceOptions are the parts of a Source a process shares or tunes; zero
// fields get their defaults over the source's registry.
type SourceOptions struct {
	// MaxDepth bounds nesting (0: DefaultMaxDepth).
	MaxDepth int
	Logger   *slog.Logger
	// Index serves discovery (default: NewIndex with IndexOptions{}).
	Index *Index
	// Counter counts calls (default: NewCounter with its defaults).
	Counter *Counter
}

// NewSource returns a Source; maxDepth ≤ 0 means DefaultMaxDepth.
func NewSource(reg Registry, inv Invoker, maxDepth int, log *slog.Logger) *Source {
	return NewSourceWith(reg, inv, SourceOptions{MaxDepth: maxDepth, Logger: log})
}

// NewSourceWith returns a Source with o's parts.
func NewSourceWith(reg Registry, inv Invoker, o SourceOptions) *Source {
	if o.MaxDepth <= 0 {
		o.MaxDepth = DefaultMaxDepth
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Index == nil {
		o.Index = NewIndex(reg, IndexOptions{Logger: o.Logger})
	}
	if o.Counter == nil {
		o.Counter = NewCounter(reg, 0, o.Logger)
	}
	return &Source{reg: reg, inv: inv, maxDepth: o.MaxDepth, log: o.Logger, index: o.Index, counter: o.Counter,
		latest: map[string]Capability{}, validators: map[string]*argcheck.Validator{}, refs: map[string]analysis.Refs{}}
}

// Tools implements execution.ToolSource for discovery: the latest version
// of each capability, from the index.
func (s *Source) Tools(ctx context.Context) ([]catalog.Tool, error) {
	return s.index.Tools(ctx)
}

// Resolve implements execution.ResolvingSource: one Lookup of the names
// that can be capability names.
func (s *Source) Resolve(ctx context.Context, names []string) ([]catalog.Tool, error) {
	want := make([]string, 0, len(names))
	for _, n := range names {
		if _, _, err := ParseName(n); err == nil {
			want = append(want, n)
		}
	}
	if len(want) == 0 {
		return nil, nil
	}
	found, err := s.reg.Lookup(ctx, want)
	if err != nil {
		return nil, err
	}
	out := make([]catalog.Tool, 0, len(found))
	for _, name := range want {
		c, ok := found[name]
		if !ok {
			continue
		}
		s.remember(c)
		out = append(out, toolOf(c))
	}
	return out, nil
}

// remember keeps c as the latest version of its name unless a newer one
// is already kept.
func (s *Source) remember(c Capability) {
	s.latestMu.Lock()
	defer s.latestMu.Unlock()
	if old, ok := s.latest[c.Name]; !ok || old.Version < c.Version {
		s.latest[c.Name] = c
	}
}

// latestOf is the newest version of name this process resolved.
func (s *Source) latestOf(name string) (Capability, bool) {
	s.latestMu.Lock()
	defer s.latestMu.Unlock()
	c, ok := s.latest[name]
	return c, ok
}

// HasServer implements execution.ResolvingSource: the index knows the
// namespace, or else the registry does now.
func (s *Source) HasServer(ctx context.Context, ns string) (bool, error) {
	if s.index.hasNamespace(ns) {
		return true, nil
	}
	if !partRE().MatchString(ns) {
		return false, nil
	}
	return s.reg.HasNamespace(ctx, ns)
}

// Flush implements execution.Flusher: the call counts, if their period is
// over.
func (s *Source) Flush(ctx context.Context) error { return s.counter.Flush(ctx) }

// Close writes the pending call counts.
func (s *Source) Close(ctx context.Context) error { return s.counter.Close(ctx) }

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
	c, err := s.version(ctx, name, opt.Pins)
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
		// A caller outside an execution is a request tree of its own.
		budget = execution.NewBudget(execution.DefaultSandboxes)
	}
	reserved, ok := budget.Reserve(s.share(ctx, c, depth))
	if !ok {
		return nil, fault.Limitf(fault.LimitSandboxes,
			"no sandbox left to run %s: this run's share of the request's sandbox budget (%d) is spent or held by calls in flight",
			name, budget.Share()).WithTool(name)
	}
	s.counter.Add(name)
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
		opt.OnChild(resp.ExecutionID, c.Version, resp.Calls)
	}
	if !resp.OK {
		return nil, childError(name, resp.Error)
	}
	if len(resp.Result) == 0 {
		return json.RawMessage("null"), nil
	}
	return resp.Result, nil
}

// version is the version of name a call runs: the one pins pin (read
// once per process: versions never change), else the newest this process
// resolved, which the calling execution resolved first.
func (s *Source) version(ctx context.Context, name string, pins map[string]int) (Capability, error) {
	if v, ok := pins[name]; ok {
		c, err := s.reg.Get(ctx, name, v)
		if fault.CodeOf(err) == fault.NotFound {
			return Capability{}, pinMissing(name, v)
		}
		return c, err
	}
	if c, ok := s.latestOf(name); ok {
		return c, nil
	}
	c, err := s.reg.Get(ctx, name, 0)
	if err != nil {
		return Capability{}, err
	}
	s.remember(c)
	return c, nil
}

// pinMissing is the error of a pin to a version that does not exist.
func pinMissing(name string, version int) *fault.Error {
	return &fault.Error{Code: fault.InvalidRequest, Tool: name,
		Message: fmt.Sprintf("capabilities pins %s version %d, which does not exist", name, version),
		Details: map[string]any{"capability": name, "version": version}}
}

// CheckPins implements execution.PinChecker: every pinned version exists
// (one read per pin, none again in this process: versions never change).
func (s *Source) CheckPins(ctx context.Context, pins map[string]int) error {
	for _, name := range slices.Sorted(maps.Keys(pins)) {
		if _, _, err := ParseName(name); err != nil {
			return fault.Wrap(fault.InvalidRequest, err, "capabilities")
		}
		if _, err := s.version(ctx, name, pins); err != nil {
			return err
		}
	}
	return nil
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
func (s *Source) share(ctx context.Context, c Capability, depth int) func(rest int) int {
	if depth >= s.maxDepth || !s.mayCallCapabilities(ctx, c) {
		return func(int) int { return 0 }
	}
	return func(rest int) int { return (rest + 1) / 2 }
}

// mayCallCapabilities reports whether c's code may call a capability:
// dynamic access to mcp, or a static name that is a capability (an MCP
// tool of the same name would win, so this errs on the generous side).
// Whether a name is a capability is what this process resolved or its
// index holds; before the index is first loaded every name counts as one.
func (s *Source) mayCallCapabilities(ctx context.Context, c Capability) bool {
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
	if len(refs.Tools) == 0 {
		return false
	}
	if _, err := s.index.current(ctx); err != nil {
		return true
	}
	for _, r := range refs.Tools {
		if _, ok := s.latestOf(r.FullName()); ok {
			return true
		}
		if has, loaded := s.index.knows(r.FullName()); has || !loaded {
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
	if err := CheckCode(c); err != nil {
		return nil, err
	}
	req, ferr := inv.Request(c.Code)
	if ferr != nil {
		return nil, ferr
	}
	// The version's own pins apply to its calls, below what the callers
	// above pinned (execution.Request.Pins); traces name the version.
	req.Capabilities = c.Pins
	req.Parent.Version, req.Parent.Provenance = c.Version, c.Provenance
	if !tracectx.Has(ctx) {
		// From another process (the capability function): the calling
		// span came in the lineage.
		ctx = tracectx.Extract(ctx, inv.Parent.TraceParent, inv.Parent.TraceState)
	}
	return r.Executor.Execute(ctx, req), nil
}
