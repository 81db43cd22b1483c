package capability

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pml-sandbox/pml/internal/argcheck"
	"github.com/pml-sandbox/pml/internal/bridge"
	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/trace"
)

// DefaultMaxDepth bounds nesting: a script may call a capability that calls
// a capability that calls a capability, and no deeper.
const DefaultMaxDepth = 3

// Invocation is one capability run, with what links it to its caller.
type Invocation struct {
	Capability        string          `json:"capability"`
	Version           int             `json:"version"`
	Args              json.RawMessage `json:"args"`
	ParentExecutionID string          `json:"parent_execution_id"`
	ParentCallID      int             `json:"parent_call_id"`
	Depth             int             `json:"depth"` // of the run being started (1 = called from a root script)
	Chain             []string        `json:"chain"` // capabilities from the root down to this one, this one last
	TraceHeader       string          `json:"trace_header,omitempty"`
	AllowDestructive  bool            `json:"allow_destructive,omitempty"`
	// Narrowing is the tools filter of every run above, one entry per run
	// that narrowed: the child may use only tools each allows.
	Narrowing [][]string `json:"narrowing,omitempty"`
	// TimeoutMS is what is left of the caller's deadline, so a child run
	// never outlives its caller (0: no deadline known).
	TimeoutMS int `json:"timeout_ms,omitempty"`
}

// Invoker runs capabilities somewhere: in this process, or in the
// capability Lambda.
type Invoker interface {
	Invoke(ctx context.Context, inv Invocation) (*bridge.Response, error)
}

// Source offers the registry's capabilities to the bridge as tools.
type Source struct {
	reg      Registry
	inv      Invoker
	maxDepth int
	log      *slog.Logger

	mu         sync.Mutex
	validators map[string]*argcheck.Validator // by capability id
}

// NewSource returns a Source; maxDepth ≤ 0 means DefaultMaxDepth.
func NewSource(reg Registry, inv Invoker, maxDepth int, log *slog.Logger) *Source {
	if maxDepth <= 0 {
		maxDepth = DefaultMaxDepth
	}
	if log == nil {
		log = slog.Default()
	}
	return &Source{reg: reg, inv: inv, maxDepth: maxDepth, log: log, validators: map[string]*argcheck.Validator{}}
}

// Tools implements bridge.ToolSource: the latest version of each capability.
func (s *Source) Tools(ctx context.Context) ([]catalog.Tool, error) {
	caps, err := s.reg.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]catalog.Tool, 0, len(caps))
	for _, c := range caps {
		out = append(out, catalog.Tool{Server: c.Namespace(), Name: c.Action(), Description: c.Description,
			InputSchema: c.InputSchema, Kind: trace.KindCapability})
	}
	return out, nil
}

// Call implements bridge.ToolSource: checks depth, cycles and arguments,
// then runs the capability through the invoker.
func (s *Source) Call(ctx context.Context, t catalog.Tool, args json.RawMessage, opt bridge.CallOptions) (json.RawMessage, error) {
	name := t.FullName()
	var chain []string
	depth := 1
	if p := opt.Parent; p != nil {
		chain = slices.Clone(p.Chain)
		depth = p.Depth + 1
	}
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
	if err := s.reg.IncrementCalls(ctx, name); err != nil {
		s.log.WarnContext(ctx, "capability call count not updated", "capability", name, "err", err)
	}
	inv := Invocation{
		Capability: name, Version: c.Version, Args: args,
		ParentExecutionID: opt.ExecutionID, ParentCallID: opt.CallID,
		Depth: depth, Chain: append(chain, name),
		TraceHeader: opt.TraceHeader, AllowDestructive: opt.AllowDestructive,
		Narrowing: opt.Narrowing,
	}
	if d, ok := ctx.Deadline(); ok {
		left := time.Until(d).Milliseconds()
		if left < 1 {
			return nil, fault.New(fault.Timeout, "no time left to run %s", name).WithTool(name)
		}
		inv.TimeoutMS = int(left)
	}
	resp, err := s.inv.Invoke(ctx, inv)
	if err != nil {
		return nil, fault.As(err).WithTool(name)
	}
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

// InProcess runs each capability in a fresh bridge.Service from newService
// (over the process's one engine: every run is a fresh sandbox instance).
// It stands in for the capability Lambda locally and in tests.
type InProcess struct {
	Registry   Registry
	NewService func() *bridge.Service
}

// Invoke implements Invoker.
func (p InProcess) Invoke(ctx context.Context, inv Invocation) (*bridge.Response, error) {
	return Run(ctx, p.Registry, p.NewService(), inv)
}

// Run loads the capability's version and runs it as a child execution on
// svc. The capability Lambda's handler and the in-process invoker share it.
func Run(ctx context.Context, reg Registry, svc *bridge.Service, inv Invocation) (*bridge.Response, error) {
	c, err := reg.Get(ctx, inv.Capability, inv.Version)
	if err != nil {
		return nil, err
	}
	return svc.Execute(ctx, bridge.Request{
		Code:             c.Code,
		TimeoutMS:        inv.TimeoutMS,
		Args:             inv.Args,
		AllowDestructive: inv.AllowDestructive,
		Source:           "capability",
		TraceHeader:      inv.TraceHeader,
		Parent: &bridge.Parent{ExecutionID: inv.ParentExecutionID, CallID: inv.ParentCallID,
			Capability: inv.Capability, Depth: inv.Depth, Chain: inv.Chain, Narrowing: inv.Narrowing},
	}), nil
}

// LocalServices returns a factory of services that run capabilities
// in-process: each service offers sources plus the registry's capabilities,
// and each capability call it serves runs in a new service from the same
// factory. `pml` and tests use it; the Lambda functions invoke the
// capability function instead.
func LocalServices(engine *guest.Engine, sources []bridge.ToolSource, reg Registry, sink trace.Sink, log *slog.Logger) func() *bridge.Service {
	var newService func() *bridge.Service
	newService = func() *bridge.Service {
		src := NewSource(reg, InProcess{Registry: reg, NewService: func() *bridge.Service { return newService() }}, 0, log)
		return bridge.New(engine, bridge.Options{Sources: append(slices.Clone(sources), src), Sink: sink, Logger: log})
	}
	return newService
}
