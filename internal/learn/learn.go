// Package learn is the learning loop of procedural memory: it turns the
// executions that worked into suggested capabilities.
//
// Every execution that succeeds and calls tools is a candidate, keyed by a
// fingerprint of its code: comments, layout and local names ignored, its
// literals lifted out (Read, from the tree the static analysis already
// parsed: no second parse). The execution's trace record carries its
// Pattern (the fingerprint, the tools it called in order, this run's
// literals with the secret-looking ones withheld, the args keys it reads,
// and once per process the code with the literals cut out); nothing else
// is written on the hot path. The counters are kept off it: deployed, the
// aggregator on the traces table's stream (Extract, beside tracedb's
// co-occurrence); locally, a fold over the trace file (Local).
//
// A candidate seen succeed at least K times (default 3, counting every
// principal's runs) is suggested (Suggest) to each principal that ran it,
// made of that principal's own runs only: a proposed ns:action name, a
// description from the tools it calls and its comments, an input schema
// from the args keys it reads and the literals that varied (or were
// withheld), which its code then reads from args. What one principal's
// runs held — the values of its literals (addresses, notes), its comments,
// its code — never reaches another, approvers included: what principals
// share is the counts (runs, principals). Another principal's program
// reaches an approver as the draft its author proposes, with its author
// named; publishing a suggestion goes through the capability registry's
// guarded path like any save.
//
// The capability runs it counts (Store.Runs) are the evidence
// internal/ranking ranks search with.
package learn

import (
	"slices"
	"sync"

	"github.com/pml-sandbox/pml/internal/redact"
	"github.com/pml-sandbox/pml/internal/trace"
)

// MaxTools bounds the tools a pattern lists (in the order of their first
// call), as tracedb.MaxCountedTools bounds co-occurrence.
const MaxTools = 32

// maxSent bounds the principal's fingerprints a Learner remembers having
// sent a template for; past it, it forgets them all (and sends each once
// more).
const maxSent = 10_000

// Learner makes the patterns of one process's executions. It remembers
// for which principal and fingerprint it has handed a template to a trace
// record, so that the template (the longest part) travels once per
// process, principal and fingerprint, not with every run: each principal's
// suggestion is made from a template of its own. Safe for concurrent use.
type Learner struct {
	known *redact.Redactor

	mu   sync.Mutex
	sent map[string]bool
}

// NewLearner returns a Learner that also withholds the secrets known
// knows (may be nil).
func NewLearner(known *redact.Redactor) *Learner {
	return &Learner{known: known, sent: map[string]bool{}}
}

// Known is the redactor of the deployment's known secrets (may be nil).
func (l *Learner) Known() *redact.Redactor { return l.known }

// Pattern is the pattern of principal's execution of code of shape sh
// that made calls (its own, in any order): nil when it called no tool
// (built-ins do not count) or sh is nil.
func (l *Learner) Pattern(principal string, sh *Shape, calls []trace.Call) *trace.Pattern {
	if sh == nil {
		return nil
	}
	tools := calledTools(calls)
	if len(tools) == 0 {
		return nil
	}
	p := &trace.Pattern{Fingerprint: sh.Fingerprint, Tools: tools, Literals: sh.Literals, ArgsKeys: sh.ArgsKeys, ArgsWhole: sh.ArgsWhole}
	key := sh.Fingerprint + "\x00" + principal
	l.mu.Lock()
	send := !l.sent[key]
	if send {
		if len(l.sent) >= maxSent {
			clear(l.sent)
		}
		// Sent, or found to hold a secret: either way not tried again.
		l.sent[key] = true
	}
	l.mu.Unlock()
	if send {
		p.Template = sh.Template()
	}
	return p
}

// calledTools are the distinct tools of calls, in the order of their
// first call (by call id), at most MaxTools; built-ins are left out.
func calledTools(calls []trace.Call) []string {
	byID := func(a, b trace.Call) int { return a.CallID - b.CallID }
	if !slices.IsSortedFunc(calls, byID) {
		calls = slices.Clone(calls)
		slices.SortStableFunc(calls, byID)
	}
	var tools []string
	for _, c := range calls {
		if c.Server == "" || c.Tool == "" || c.Status != "" {
			continue
		}
		n := c.Server + ":" + c.Tool
		if !slices.Contains(tools, n) {
			tools = append(tools, n)
			if len(tools) == MaxTools {
				break
			}
		}
	}
	return tools
}
