package execution

import (
	"encoding/json"
	"errors"
	"slices"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/fault"
)

// Lineage describes one tool call by where it sits in its request tree:
// the execution that made it, the capability runs above that execution,
// and what a run the call starts inherits. One type serves wherever a call
// is described: the options a tool source receives (CallOptions), the
// parent of a capability run (Parent), and the capability function's
// payload (Invocation).
type Lineage struct {
	// ExecutionID and CallID name the call: the execution that made it
	// and its number there.
	ExecutionID string `json:"execution_id"`
	CallID      int    `json:"call_id"`
	// Chain is the capabilities from the root down to the calling
	// execution (empty when a root execution made the call).
	Chain []string `json:"chain,omitempty"`
	// Narrowing is the tools filter of every run from the root down to
	// and including the calling execution that narrowed: a run the call
	// starts may use only tools each of them allows.
	Narrowing Narrowing `json:"narrowing,omitempty"`
	// TraceHeader is the X-Ray trace header the calling execution runs
	// under.
	TraceHeader string `json:"trace_header,omitempty"`
	// TraceParent and TraceState are the call's W3C trace context (its
	// span, under OpenTelemetry), set where the call leaves the process
	// (capability.LambdaInvoker): in process the context carries it.
	TraceParent string `json:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty"`
	// Approval is the calling request's approval mode: a capability run
	// never parks a call, but says why it refuses one.
	Approval string `json:"approval,omitempty"`
	// AllowDestructive is whether the call was consented to (the
	// request's allow_destructive, or an approval): the source lets a
	// destructive tool run, and a run the call starts inherits it.
	AllowDestructive bool `json:"allow_destructive,omitempty"`
	// Pins are the capability versions the call, and every run below it,
	// runs (Request.Pins): the request's, then each capability's own.
	Pins map[string]int `json:"pins,omitempty"`
}

// Depth is how many capability runs the calling execution is below its
// root (0 for a root execution).
func (l Lineage) Depth() int { return len(l.Chain) }

// Parent is the call that started a capability run, with what the run is
// given: the capability's name and its share of the request tree's
// sandbox budget.
type Parent struct {
	Lineage
	// Capability is the capability the run runs ("namespace:action").
	Capability string `json:"capability"`
	// Sandboxes is the run's share of the request tree's sandbox budget:
	// how many capability runs it and its descendants may start.
	Sandboxes int `json:"sandboxes"`
	// Version and Provenance are the capability version the run runs and
	// the executions it came from, set by the runner once it read the
	// version: traces name them. Never in a payload.
	Version    int      `json:"-"`
	Provenance []string `json:"-"`
}

// Depth is the run's depth: 1 for a capability a root script called.
func (p *Parent) Depth() int { return len(p.Chain) + 1 }

// Path is the capabilities from the root down to this run, this one last.
func (p *Parent) Path() []string { return append(slices.Clone(p.Chain), p.Capability) }

// Invocation is a capability run as the capability function receives it
// (and the in-process runner): the call that started it, the version of
// the capability to run and its arguments.
type Invocation struct {
	Parent Parent `json:"parent"`
	// Version is the capability's version to run (the one the caller
	// resolved, so a save during the call changes nothing).
	Version int             `json:"version"`
	Args    json.RawMessage `json:"args"`
	// TimeoutMS is what is left of the caller's deadline, so a child run
	// never outlives its caller (0: no deadline known).
	TimeoutMS int `json:"timeout_ms,omitempty"`
}

// DecodeInvocation reads an invocation strictly and checks its shape.
func DecodeInvocation(data []byte) (Invocation, *fault.Error) {
	var inv Invocation
	if ferr := decodeStrict(data, &inv, "a capability invocation"); ferr != nil {
		return Invocation{}, ferr
	}
	if err := inv.check(); err != nil {
		return Invocation{}, fault.Wrap(fault.InvalidRequest, err, "a capability invocation")
	}
	return inv, nil
}

func (inv Invocation) check() error {
	switch {
	case inv.Parent.Capability == "":
		return errors.New("parent.capability is missing")
	case inv.Parent.Sandboxes < 0:
		return errors.New("parent.sandboxes must not be negative")
	case inv.Version < 0:
		return errors.New("version must not be negative")
	case inv.TimeoutMS < 0:
		return errors.New("timeout_ms must not be negative")
	}
	if ferr := CheckPins(inv.Parent.Pins); ferr != nil {
		return errors.New("parent.pins: " + ferr.Message)
	}
	return nil
}

// Request is the capability run's execute request, validated: the
// capability's code with the invocation's arguments, deadline and parent,
// and what the run inherits from the call that started it.
func (inv Invocation) Request(code string) (Request, *fault.Error) {
	p := inv.Parent
	r := Request{Code: code, Args: inv.Args, TimeoutMS: inv.TimeoutMS, AllowDestructive: p.AllowDestructive,
		Approval: p.Approval, Source: SourceCapability, TraceHeader: p.TraceHeader, Parent: &p}
	if ferr := r.Validate(); ferr != nil {
		return Request{}, ferr
	}
	return r, nil
}

// Narrowing is the tools filters of the runs above a capability run, one
// per run that narrowed, parsed. They stay a list rather than one computed
// intersection because an empty intersection must keep meaning "nothing",
// where an empty filter means "everything". In JSON it is a list of
// pattern lists.
type Narrowing []catalog.Filter

// Allows reports whether every filter allows server:tool.
func (n Narrowing) Allows(server, tool string) bool {
	for _, f := range n {
		if !f.Allows(server, tool) {
			return false
		}
	}
	return true
}

// Patterns is the narrowing as pattern lists, as it travels in JSON and
// error details.
func (n Narrowing) Patterns() [][]string {
	out := make([][]string, len(n))
	for i, f := range n {
		out[i] = f.Patterns()
	}
	return out
}

// MarshalJSON implements json.Marshaler.
func (n Narrowing) MarshalJSON() ([]byte, error) { return json.Marshal(n.Patterns()) }

// ParseNarrowing parses pattern lists, each as a request's tools filter
// is.
func ParseNarrowing(lists [][]string) (Narrowing, error) {
	out := make(Narrowing, 0, len(lists))
	for _, l := range lists {
		f, err := catalog.ParseFilter(l)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// UnmarshalJSON implements json.Unmarshaler (ParseNarrowing).
func (n *Narrowing) UnmarshalJSON(b []byte) error {
	var lists [][]string
	if err := json.Unmarshal(b, &lists); err != nil {
		return err
	}
	out, err := ParseNarrowing(lists)
	if err != nil {
		return err
	}
	*n = out
	return nil
}
