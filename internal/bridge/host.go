package bridge

import (
	"context"
	"encoding/json"
	"slices"
	"sync"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/trace"
	"github.com/pml-sandbox/pml/internal/tsdecl"
)

// toolHost serves the calls of one execution: it is the guest's ToolHost.
type toolHost struct {
	service *Service
	req     *execution.Request
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

	mu       sync.Mutex
	children map[int]string // call id → child execution id (capability runs)
	descend  []trace.Call   // the calls those child executions made
}

// CallTool implements guest.ToolHost.
func (h *toolHost) CallTool(ctx context.Context, c guest.Call) (json.RawMessage, error) {
	if c.Server == "" {
		return h.builtin(c)
	}
	full := c.Server + ":" + c.Tool
	e, ok := h.entries[full]
	if !ok && h.forbidden[full] {
		return nil, forbiddenErr(full, "", h.req.Inherited())
	}
	if !ok {
		// Reached only through dynamic access the static check could not
		// see; it is served only if it resolves now, never waited for.
		return nil, fault.New(fault.ToolNotFound, "%s is not a tool of this execution", full).WithTool(full)
	}
	// A call that needs approval and reaches here unparked either was
	// approved, or cannot wait for a decision.
	approved := h.approved[c.ID] && e.tool.NeedsApproval()
	if e.tool.NeedsApproval() && !h.req.AllowDestructive && !approved {
		return nil, needsApproval(full, e.tool, h.req)
	}
	return e.source.Call(ctx, e.tool, c.Args, execution.CallOptions{
		// An approved call was consented to, as allow_destructive would:
		// the source's own check (the MCP pool's) must let it through.
		Lineage:       h.req.CallLineage(c.ID, approved),
		ParseJSONText: h.req.ParseJSONText,
		Sandboxes:     h.budget,
		OnChild:       func(id string, calls []trace.Call) { h.setChild(c.ID, id, calls) },
	})
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
	if t.IsDestructive() {
		return fault.New(fault.Forbidden, "%s is annotated destructive; the request must set allow_destructive to run it "+
			`(or approval "suspend" to ask for approval)`, full).WithTool(full)
	}
	return fault.New(fault.Forbidden, "%s requires approval (its server's require_approval); the request must set "+
		`approval "suspend" to ask for it, or allow_destructive to run it without asking`, full).WithTool(full)
}

func (h *toolHost) setChild(callID int, execID string, calls []trace.Call) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.children == nil {
		h.children = map[int]string{}
	}
	h.children[callID] = execID
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

func (h *toolHost) childOf(callID int) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.children[callID]
}

// builtin serves the `tools` global: discovery from inside the sandbox,
// over exactly the tools this execution may call.
func (h *toolHost) builtin(c guest.Call) (json.RawMessage, error) {
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
		hits := catalog.Search(h.visible, a.Query, a.Limit)
		out := make([]toolSummary, len(hits))
		for i, hit := range hits {
			out[i] = summarize(hit.Tool)
			out[i].Score = &hit.Score
		}
		return json.Marshal(out)
	case "tools.list":
		out := make([]toolSummary, len(h.visible))
		for i, t := range h.visible {
			out[i] = summarize(t)
		}
		return json.Marshal(out)
	case "tools.describe":
		return json.Marshal(tsdecl.Declarations(h.visible))
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
