package executor

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/policy"
	"github.com/pml-sandbox/pml/internal/trace"
	"github.com/pml-sandbox/pml/internal/tsdecl"
)

// maxLookups bounds the names one execution may have resolved as its
// script reaches them (each may cost the registry a read).
const maxLookups = 100

// toolHost serves the calls of one execution: it is the guest's ToolHost,
// and its Resolver for names the tool set lacks.
type toolHost struct {
	service *Service
	req     *execution.Request
	// entries and visible are the tool set the run started with;
	// read-only once it runs.
	entries map[string]entry
	visible []catalog.Tool
	// forbidden names the catalog's tools an inherited narrowing excludes.
	forbidden map[string]bool
	// budget is what this execution's capability calls may spend.
	budget *execution.Budget
	// approved are the parked calls a resumption approved (by call id):
	// they run although they need approval. Set before the run starts,
	// read-only after.
	approved map[int]bool
	// gate parks the calls that wait for a person and lets through those
	// a grant covers (plan.go); nil when the run cannot park.
	gate *gate

	mu       sync.Mutex
	children map[int]child // call id → the capability run it started
	descend  []trace.Call  // the calls those child executions made

	rmu sync.Mutex
	// resolved are the tools resolved as the script reached them, and
	// names to refuse when called (a source that failed, a narrowing that
	// forbids them), by full name.
	resolved map[string]resolvedEntry
	// asked are the names (and "server:" for a server) asked of the
	// sources, found or not; lookups counts them.
	asked   map[string]bool
	lookups int
	// discovery is what tools.* show, built on the first such call.
	discovery []catalog.Tool

	// effects is the execution's journal of effects (effects.go).
	effects *effectLog

	// session is the session the run belongs to ("" outside one).
	session string
	vmu     sync.Mutex
	// verdicts are the policy set's outcomes of the run's calls, by call
	// id (gate.go).
	verdicts map[int]policy.Outcome
}

// resolvedEntry is a tool resolved at run time, or the refusal its calls
// get.
type resolvedEntry struct {
	entry
	refuse *fault.Error
}

// CallTool implements guest.ToolHost.
func (h *toolHost) CallTool(ctx context.Context, c guest.Call) (json.RawMessage, error) {
	if c.Server == "" {
		return h.builtin(ctx, c)
	}
	full := c.Server + ":" + c.Tool
	e, ok := h.entries[full]
	if !ok && h.forbidden[full] {
		return nil, forbiddenErr(full, "", h.req.Inherited())
	}
	if !ok {
		// Resolved as the script reached it (Resolve), or a name the
		// guest was never given.
		r, found := h.resolvedEntry(full)
		if !found {
			return nil, fault.New(fault.ToolNotFound, "%s is not a tool of this execution", full).WithTool(full)
		}
		if r.refuse != nil {
			refusal := *r.refuse
			return nil, &refusal
		}
		e = r.entry
	}
	retry, err := retryOf(c)
	if err != nil {
		return nil, fault.Wrap(fault.Internal, err, "").WithTool(full)
	}
	// The policy set decides every call (gate.go): a call that needs a
	// person and reaches here unparked was approved (on its own, or under
	// a grant: plan.go), or would be refused whatever a person said, or
	// cannot wait for a decision.
	approved := (h.approved[c.ID] || h.gate.covers(c.ID)) && e.tool.NeedsApproval()
	decided := h.verdict(ctx, c, e, retry != nil)
	if ferr := refusal(full, decided, h, e); ferr != nil {
		if decided.Verdict == policy.Ask {
			// The one rule: a call no person could let run says why.
			if pf := h.precheck(ctx, e, c); pf != nil {
				return nil, pf
			}
		}
		return nil, ferr
	}
	if sp, ok := h.service.sink.(trace.Spans); ok {
		ctx = sp.StartCall(ctx, trace.Call{ExecutionID: h.req.ExecutionID, CallID: c.ID, Server: c.Server, Tool: c.Tool, Kind: e.tool.Kind})
	}
	opts := execution.CallOptions{
		// An approved call was consented to, as allow_destructive would:
		// the source's own check (the MCP pool's) must let it through.
		// So was one sent again with the answers to its server's
		// question: it was let through before it asked.
		Lineage:       h.req.CallLineage(c.ID, consentedFor(e, decided, approved, retry != nil)),
		ParseJSONText: h.req.ParseJSONText,
		Sandboxes:     h.budget,
		OnChild:       func(id string, version int, calls []trace.Call) { h.setChild(c.ID, id, version, calls) },
		Retry:         retry,
	}
	var notSent atomic.Bool
	if len(decided.Charged) > 0 {
		opts.NotSent = func() { notSent.Store(true) }
	}
	out, err := h.send(ctx, e, c, opts)
	if notSent.Load() {
		// Nothing of the call left the host: it counts against no limit.
		h.service.gate.Refund(ctx, decided.Charged)
	}
	if q, ok := isQuestion(err); ok {
		if h.answersInLine() {
			out, err = h.answerInLine(ctx, e, c, opts, q)
		} else {
			out, err = nil, h.parkQuestion(full, q)
		}
		h.effects.unanswered(ctx, c.ID, err)
		return out, err
	}
	return out, err
}

// needsApproval is the FORBIDDEN of a call that needs approval and gets
// neither allow_destructive nor a decision.
func needsApproval(full string, t catalog.Tool, req *execution.Request) *fault.Error {
	if req.Approval == execution.ApprovalSuspend && req.Parent != nil {
		// The run that would suspend is a child of another, maybe in
		// another process; suspending a tree of runs is not supported.
		return fault.New(fault.Forbidden, "%s needs approval, and approval inside a capability is not supported: "+
			"call the tool from the script itself, or set allow_destructive to run it without asking", full).WithTool(full)
	}
	if t.DestructiveByDefault() {
		return fault.New(fault.Forbidden, "%s does not say it is read-only or not destructive, so it is destructive (MCP's defaults); "+
			`the request must set allow_destructive to run it (or approval "suspend" to ask for approval)`, full).WithTool(full)
	}
	if t.IsDestructive() {
		return fault.New(fault.Forbidden, "%s is annotated destructive; the request must set allow_destructive to run it "+
			`(or approval "suspend" to ask for approval)`, full).WithTool(full)
	}
	return fault.New(fault.Forbidden, "%s requires approval (its server's require_approval); the request must set "+
		`approval "suspend" to ask for it, or allow_destructive to run it without asking`, full).WithTool(full)
}

// child is the capability run a call started: its execution and the
// capability version it ran.
type child struct {
	executionID string
	version     int
}

func (h *toolHost) setChild(callID int, execID string, version int, calls []trace.Call) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.children == nil {
		h.children = map[int]child{}
	}
	h.children[callID] = child{execID, version}
	h.descend = append(h.descend, calls...)
}

// descendantCalls returns the child executions' calls, oldest first.
func (h *toolHost) descendantCalls() []trace.Call {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := slices.Clone(h.descend)
	slices.SortStableFunc(out, func(a, b trace.Call) int { return a.StartedAt.Compare(b.StartedAt) })
	return out
}

func (h *toolHost) childOf(callID int) child {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.children[callID]
}

// lookup finds a tool of the run: of its tool set, or resolved since.
func (h *toolHost) lookup(full string) (entry, bool) {
	if e, ok := h.entries[full]; ok {
		return e, true
	}
	r, ok := h.resolvedEntry(full)
	if !ok || r.refuse != nil {
		return entry{}, false
	}
	return r.entry, true
}

func (h *toolHost) resolvedEntry(full string) (resolvedEntry, bool) {
	h.rmu.Lock()
	defer h.rmu.Unlock()
	r, ok := h.resolved[full]
	return r, ok
}

// Resolve implements guest.Resolver: a name the script reached that its
// tool set lacks is looked up now, by name, in the source that would own
// it (a configured server's current listing, else the resolving sources:
// capabilities saved since the run started are found). A tool the request
// filters out is not found; one an inherited narrowing forbids, or whose
// source cannot be read, is handed to the guest with the refusal its calls
// get (FORBIDDEN, a retryable UNAVAILABLE). Each name is asked once per
// run, and at most maxLookups names. The guest calls it from the script's
// goroutine only, one name at a time; calls in flight read what it
// records.
func (h *toolHost) Resolve(ctx context.Context, server, tool string) (guest.Tool, bool) {
	if catalog.ValidName(server) != nil || (tool != "" && catalog.ValidName(tool) != nil) {
		return guest.Tool{}, false
	}
	key := server + ":" + tool
	h.rmu.Lock()
	if r, ok := h.resolved[key]; ok {
		h.rmu.Unlock()
		return guestTool(r.tool), true
	}
	known := tool == "" && h.hasServer(server)
	asked, wasAsked := h.asked[key]
	over := h.lookups >= maxLookups
	if !known && !wasAsked && (!over || tool != "") {
		h.lookups++
	}
	// Past twice the bound a name is simply not found: each refusal is a
	// tool in the run's table, which must stay bounded too.
	spent := h.lookups > 2*maxLookups
	h.rmu.Unlock()
	switch {
	case known:
		return guest.Tool{}, true
	case wasAsked:
		return guest.Tool{}, asked
	case over && tool == "":
		return guest.Tool{}, true // its tools get the refusal
	case spent:
		return guest.Tool{}, false
	case over:
		h.record(key, resolvedEntry{entry: entry{tool: catalog.Tool{Server: server, Name: tool}},
			refuse: fault.Limitf(fault.LimitLookups, "a script may reach at most %d names its code does not name literally; %s is one more", maxLookups, key).WithTool(key)})
		return guest.Tool{Server: server, Name: tool}, true
	}
	// The look-up runs unlocked: calls in flight keep reading what was
	// resolved before.
	var r *resolvedEntry
	var found bool
	if tool == "" || h.req.Filter().Allows(server, tool) {
		// A name the request narrowed away is missing: not worth a
		// look-up (a registry read, for a capability).
		r, found = h.resolveName(ctx, server, tool)
	}
	if r != nil {
		if r.refuse == nil && !h.req.Inherited().Allows(r.tool.Server, r.tool.Name) {
			r.refuse = forbiddenErr(r.tool.FullName(), "", h.req.Inherited())
		}
		h.record(key, *r)
	}
	h.rmu.Lock()
	if h.asked == nil {
		h.asked = map[string]bool{}
	}
	h.asked[key] = found
	h.rmu.Unlock()
	if r != nil {
		return guestTool(r.tool), true
	}
	return guest.Tool{}, found
}

// record keeps what a name resolved to.
func (h *toolHost) record(key string, r resolvedEntry) {
	h.rmu.Lock()
	defer h.rmu.Unlock()
	if h.resolved == nil {
		h.resolved = map[string]resolvedEntry{}
	}
	h.resolved[key] = r
}

// hasServer reports whether a tool the run resolved is under server.
// Callers hold rmu.
func (h *toolHost) hasServer(server string) bool {
	for _, r := range h.resolved {
		if r.tool.Server == server {
			return true
		}
	}
	return false
}

// resolveName asks the sources for server:tool: the tool with its source
// (and the refusal its calls get when the source failed), or, with the
// empty tool, whether server has tools to resolve (a nil entry).
func (h *toolHost) resolveName(ctx context.Context, server, tool string) (*resolvedEntry, bool) {
	s := h.service
	owners := s.serverOwners()
	if o, owned := owners[server]; owned {
		if tool == "" {
			return nil, false // a configured server whose tools the run lacks: none to resolve
		}
		tools, _ := o.source.Tools(ctx)
		for _, t := range tools {
			if t.Server == server && t.Name == tool {
				return &resolvedEntry{entry: entry{tool: t, source: s.sources[o.index]}}, true
			}
		}
		return nil, false
	}
	full := server + ":" + tool
	for _, src := range s.sources {
		rs, ok := src.(execution.ResolvingSource)
		if !ok {
			continue
		}
		if tool == "" {
			has, err := rs.HasServer(ctx, server)
			if err != nil {
				s.log.WarnContext(ctx, "tool source unavailable", "err", err)
				return nil, true // its tools get the refusal
			}
			if has {
				return nil, true
			}
			continue
		}
		tools, err := rs.Resolve(ctx, []string{full})
		if err != nil {
			s.log.WarnContext(ctx, "tool source unavailable", "err", err)
			fe := fault.Wrap(fault.Unavailable, err, full+" could not be resolved")
			fe.Retryable, fe.Tool = true, full
			return &resolvedEntry{entry: entry{tool: catalog.Tool{Server: server, Name: tool}, source: src}, refuse: fe}, true
		}
		for _, t := range tools {
			if t.FullName() == full {
				return &resolvedEntry{entry: entry{tool: t, source: src}}, true
			}
		}
	}
	return nil, false
}

func guestTool(t catalog.Tool) guest.Tool {
	return guest.Tool{Server: t.Server, Name: t.Name, Description: t.Description, InputSchema: t.InputSchema}
}

// discoverable is what tools.* show: every tool of the catalog the run may
// call (the sources' indexes, narrowed as the run is), with those it
// resolved, built once per run on the first such call.
func (h *toolHost) discoverable(ctx context.Context) []catalog.Tool {
	h.rmu.Lock()
	done := h.discovery
	var resolved []catalog.Tool
	for _, r := range h.resolved {
		if r.refuse == nil {
			resolved = append(resolved, r.tool)
		}
	}
	h.rmu.Unlock()
	if done != nil {
		return done
	}
	// Built unlocked (the index may be refreshed meanwhile); two
	// built-ins at once may both build it, the first kept.
	out := h.service.discoverable(ctx, h.req, h.visible, resolved)
	if out == nil {
		out = []catalog.Tool{}
	}
	h.rmu.Lock()
	defer h.rmu.Unlock()
	if h.discovery == nil {
		h.discovery = out
	}
	return h.discovery
}

// builtin serves the `tools` global: discovery from inside the sandbox,
// over the tools this execution may call.
func (h *toolHost) builtin(ctx context.Context, c guest.Call) (json.RawMessage, error) {
	switch c.Tool {
	case "tools.search":
		var a struct {
			Query string `json:"query"`
			Limit int    `json:"limit"`
		}
		if err := decodeBuiltinArgs(c.Args, &a); err != nil {
			return nil, err
		}
		if a.Limit <= 0 {
			a.Limit = 10
		}
		hits := h.service.ranker.Search(ctx, h.discoverable(ctx), a.Query, a.Limit)
		out := make([]toolSummary, len(hits))
		for i, hit := range hits {
			out[i] = summarize(hit.Tool)
			out[i].Score = &hit.Score
		}
		return json.Marshal(out)
	case "tools.list":
		visible := h.discoverable(ctx)
		out := make([]toolSummary, len(visible))
		for i, t := range visible {
			out[i] = summarize(t)
		}
		return json.Marshal(out)
	case "tools.describe":
		return json.Marshal(tsdecl.Declarations(h.service.ranker.Annotate(ctx, h.discoverable(ctx))))
	}
	return nil, fault.New(fault.ToolNotFound, "no built-in %q", c.Tool)
}

// toolSummary is what tools.list and tools.search return for each tool:
// exactly the ToolSummary interface tsdecl declares (TestToolSummaryShape
// holds the two together).
type toolSummary struct {
	Server      string          `json:"server"`
	Name        string          `json:"name"`
	Call        string          `json:"call"` // how to call it from the script
	Title       string          `json:"title,omitempty"`
	Description string          `json:"description,omitempty"`
	Kind        trace.Kind      `json:"kind"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
	// Score is tools.search's alone; a pointer so that a score of 0 is
	// still there, as the declaration promises.
	Score *float64 `json:"score,omitempty"`
}

func summarize(t catalog.Tool) toolSummary {
	return toolSummary{Server: t.Server, Name: t.Name, Call: tsdecl.CallExpr(t), Title: t.Title, Description: t.Description, Kind: t.Kind, InputSchema: t.InputSchema}
}

// decodeBuiltinArgs accepts the object form ({query, limit}); the prelude
// maps positional calls onto it.
func decodeBuiltinArgs(raw json.RawMessage, v any) error {
	if len(raw) == 0 {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fault.Wrap(fault.InvalidArguments, err, "bad arguments to a tools.* built-in")
	}
	return nil
}
