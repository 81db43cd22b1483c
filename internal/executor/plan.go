package executor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"sync"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/js/script"
	"github.com/pml-sandbox/pml/internal/policy"
	"github.com/pml-sandbox/pml/internal/trace"
)

// The plan of an execution that may wait for a person (approval
// "suspend"), and the grants that let more than one of its calls run on
// one decision.
//
// A call is identified by its call site as the engine reports it
// (guest.Call.Line and Column: the call's opening parenthesis in the
// frame of the run's own script that made it), which the static analysis
// computes alike for the calls it sees (script.CallSite.Key); it lives in
// the run's memory, so a run resumed in another process reports the same
// sites. The plan lists every site of a tool that needs a person: those
// the analysis found before the run, and those calls reach by computed
// names as they happen. It is kept with the suspended execution, and so
// are the grants: a grant covers calls of one tool at one site of one
// execution, at most Max of them, while the arguments it pins keep their
// values, and goes when the execution ends.

// The plan's bounds: what the suspended execution's record holds of it
// must stay small (suspend.MaxBridgeBytes for the whole record).
const (
	maxPlanSites   = 100
	maxGrants      = 32
	maxPinPreview  = 120
	maxGrantPinned = execution.MaxGrantPins
)

// planState is what the suspended execution's record keeps of its plan.
type planState struct {
	Sites     []execution.PlanSite `json:"sites,omitempty"`
	Grants    []execution.Grant    `json:"grants,omitempty"`
	Truncated bool                 `json:"truncated,omitempty"`
}

// siteKey is a call's site, "line:column", or "" when it has none.
func siteKey(line, col int) string {
	if line < 1 || col < 1 {
		return ""
	}
	return strconv.Itoa(line) + ":" + strconv.Itoa(col)
}

// newPlan is the plan of a script about to run: its static call sites of
// tools that need a person.
func newPlan(sites []script.CallSite, entries map[string]entry) *planState {
	p := &planState{}
	for _, s := range sites {
		e, ok := entries[s.FullName()]
		if !ok || !e.tool.NeedsApproval() {
			continue
		}
		if len(p.Sites) == maxPlanSites {
			p.Truncated = true
			break
		}
		p.Sites = append(p.Sites, execution.PlanSite{Site: s.Key, Server: s.Server, Tool: s.Tool, Line: s.Line, Column: s.Column, InLoop: s.InLoop})
	}
	return p
}

// gate decides, for a run that may park calls, which call waits for a
// person: it counts each call of a tool that needs one at its site, lets
// through those a grant covers (marking them approved), and parks the
// rest. The guest asks it on the script's goroutine; the calls it let
// through are served on others, which ask covered.
type gate struct {
	mu      sync.Mutex
	plan    *planState
	sites   map[string]int // tool "@" site → index in plan.Sites
	covered map[int]bool   // call ids let run under a grant
}

func newGate(p *planState) *gate {
	g := &gate{plan: p, sites: map[string]int{}, covered: map[int]bool{}}
	for i, s := range p.Sites {
		g.sites[s.Server+":"+s.Tool+"@"+s.Site] = i
	}
	return g
}

// count adds a call to its site's count, the site learned from the call
// when the plan did not list it.
func (g *gate) count(c guest.Call) {
	g.mu.Lock()
	defer g.mu.Unlock()
	site := siteKey(c.Line, c.Column)
	k := c.Server + ":" + c.Tool + "@" + site
	i, ok := g.sites[k]
	if !ok {
		if len(g.plan.Sites) == maxPlanSites {
			g.plan.Truncated = true
			return
		}
		i = len(g.plan.Sites)
		g.plan.Sites = append(g.plan.Sites, execution.PlanSite{Site: site, Server: c.Server, Tool: c.Tool, Line: c.Line, Column: c.Column, Computed: true})
		g.sites[k] = i
	}
	g.plan.Sites[i].Calls++
}

// cover finds a grant in force that covers c, spends one of its calls on
// it and returns the approval c runs under; nil when none does.
func (g *gate) cover(c guest.Call) *trace.Approval {
	site := siteKey(c.Line, c.Column)
	if site == "" {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := range g.plan.Grants {
		gr := &g.plan.Grants[i]
		if gr.Server != c.Server || gr.Tool != c.Tool || gr.Site != site || gr.Left() == 0 || !pinsMatch(gr.Pinned, c.Args) {
			continue
		}
		gr.Used++
		g.covered[c.ID] = true
		return &trace.Approval{By: gr.By, Via: gr.Via, Grant: gr.ID}
	}
	return nil
}

// covers reports whether call id was let run under a grant.
func (g *gate) covers(id int) bool {
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.covered[id]
}

// line is where the plan places a call's site in the script as written:
// the line of a site it listed, else the call's own.
func (p *planState) line(server, tool string, line, col int) int {
	if p == nil {
		return line
	}
	site := siteKey(line, col)
	for _, s := range p.Sites {
		if s.Site == site && s.Server == server && s.Tool == tool {
			return s.Line
		}
	}
	return line
}

// doc is the plan as a suspended execution's document shows it.
func (p *planState) doc(maxGrant int) *execution.Plan {
	if p == nil {
		return nil
	}
	return &execution.Plan{Sites: append([]execution.PlanSite{}, p.Sites...), Grants: p.Grants, MaxGrant: maxGrant, Truncated: p.Truncated}
}

// park is the run's Park hook: a call of a tool that needs a person is
// counted at its site, then refused at once when it could never run (it
// runs on to CallTool, which refuses it: see precheck), let run when a
// grant covers it, and parked otherwise.
func (h *toolHost) park(ctx context.Context, c guest.Call) guest.Gate {
	e, ok := h.lookup(c.Server + ":" + c.Tool)
	if !ok || h.verdict(ctx, c, e, false).Verdict != policy.Ask {
		// The policy set lets it run, or refuses it whatever a person
		// said: CallTool says which.
		return guest.Gate{}
	}
	h.gate.count(c)
	if h.precheck(ctx, e, c) != nil {
		return guest.Gate{}
	}
	if a := h.gate.cover(c); a != nil {
		h.forget(c.ID) // decided again, as approved
		return guest.Gate{Approval: a}
	}
	return guest.Gate{Park: true}
}

// precheck is the refusal a call that needs a person would get if a
// person approved it (execution.Prechecker), nil when its source sees
// none: a question is put to a person only about a call that can run.
func (h *toolHost) precheck(ctx context.Context, e entry, c guest.Call) *fault.Error {
	pc, ok := e.source.(execution.Prechecker)
	if !ok {
		return nil
	}
	err := pc.Precheck(ctx, e.tool, c.Args, execution.CallOptions{Lineage: h.req.CallLineage(c.ID, true)})
	if err == nil {
		return nil
	}
	fe := fault.As(err)
	if fe.Tool == "" {
		fe.Tool = e.tool.FullName()
	}
	return fe
}

// pinned reads the pinned arguments of a grant from the call it was
// made on: each key must be one of its arguments' top-level keys.
func pinned(args json.RawMessage, keys []string) ([]execution.PinnedArg, *fault.Error) {
	if len(keys) == 0 {
		return nil, nil
	}
	top, ok := topLevel(args)
	if !ok {
		return nil, fault.New(fault.InvalidRequest, "a grant pins arguments by key, and this call's arguments are not an object")
	}
	var out []execution.PinnedArg
	seen := map[string]bool{}
	for _, k := range keys {
		v, ok := top[k]
		switch {
		case seen[k]:
			continue
		case !ok:
			return nil, fault.New(fault.InvalidRequest, "a grant pins argument %q, which this call does not have", k)
		}
		seen[k] = true
		d, ok := digest(v)
		if !ok {
			return nil, fault.New(fault.InvalidRequest, "argument %q cannot be pinned: it is not JSON", k)
		}
		out = append(out, execution.PinnedArg{Key: k, Value: cutText(string(v), maxPinPreview), Digest: d})
	}
	return out, nil
}

// pinsMatch reports whether args has every pinned argument with its
// pinned value (compared canonically: key order and spacing aside).
func pinsMatch(pins []execution.PinnedArg, args json.RawMessage) bool {
	if len(pins) == 0 {
		return true
	}
	top, ok := topLevel(args)
	if !ok {
		return false
	}
	for _, p := range pins {
		v, ok := top[p.Key]
		if !ok {
			return false
		}
		if d, ok := digest(v); !ok || d != p.Digest {
			return false
		}
	}
	return true
}

// topLevel splits a JSON object into its members; false for anything
// else, or an object that names a key twice (which of the two a tool
// reads is the tool's business: no grant can vouch for it).
func topLevel(args json.RawMessage) (map[string]json.RawMessage, bool) {
	dec := jsontext.NewDecoder(bytes.NewReader(args))
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return nil, false
	}
	top := map[string]json.RawMessage{}
	for dec.PeekKind() != '}' {
		k, err := dec.ReadToken()
		if err != nil {
			return nil, false
		}
		name := k.String()
		v, err := dec.ReadValue()
		if err != nil {
			return nil, false
		}
		if _, dup := top[name]; dup {
			return nil, false
		}
		top[name] = json.RawMessage(v.Clone())
	}
	return top, true
}

// digest is the SHA-256 of v's canonical JSON (RFC 8785).
func digest(v json.RawMessage) (string, bool) {
	c := jsontext.Value(append([]byte(nil), v...))
	if err := c.Canonicalize(); err != nil {
		return "", false
	}
	sum := sha256.Sum256(c)
	return hex.EncodeToString(sum[:]), true
}
