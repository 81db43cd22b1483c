package policy

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Snapshotter is an Authorizer whose answers are those of one Set at a
// time (a Set, or a source.Watcher of one): Snapshot is the set in force
// now. A Gate keeps that set's answers to call requests that give no
// arguments, by the set: a new set starts over.
type Snapshotter interface{ Snapshot() *Set }

// Snapshot implements Snapshotter.
func (s *Set) Snapshot() *Set { return s }

// decisionCache keeps a Set's answers to call requests without
// arguments. Such a request is a function of its key alone (principal,
// tool, server and context; Set.Authorize reads nothing else and no
// clock), so the answer kept is the answer the set would give again.
// Bounded: it starts over when full.
type decisionCache struct {
	mu  sync.Mutex
	set *Set
	m   map[string]Decision
}

// maxDecisions bounds a decisionCache.
const maxDecisions = 4096

// callKey is everything callInput reads of c when it leaves the
// arguments out.
func callKey(c Call) string {
	parts := append([]string{c.Principal, toolKey(c.Tool), c.Tool.Server, c.Source, c.ExecutionID, c.Session,
		strconv.FormatBool(c.Consent), strconv.FormatBool(c.Approved)}, c.Chain...)
	return strings.Join(parts, "\x00")
}

// authorizeCached is s's answer to c without its arguments (s reads none),
// from the cache when s gave it before.
func (g *Gate) authorizeCached(ctx context.Context, s *Set, c Call) (Decision, error) {
	key := callKey(c)
	dc := &g.decisions
	dc.mu.Lock()
	d, ok := dc.m[key]
	if ok && dc.set == s {
		dc.mu.Unlock()
		return cloneDecision(d), nil
	}
	dc.mu.Unlock()
	in, err := callInput(c, false, &g.entities)
	if err != nil {
		return Decision{}, err
	}
	d, err = s.Authorize(ctx, in)
	if err != nil || len(d.Errors) > 0 {
		return d, err // not kept: an error is answered afresh
	}
	dc.mu.Lock()
	if dc.set != s || dc.m == nil || len(dc.m) >= maxDecisions {
		dc.set, dc.m = s, make(map[string]Decision)
	}
	dc.m[key] = cloneDecision(d)
	dc.mu.Unlock()
	return d, nil
}

// cloneDecision copies d's slices: a caller may not change what the
// cache keeps.
func cloneDecision(d Decision) Decision {
	d.Policies = slices.Clone(d.Policies)
	d.Errors = slices.Clone(d.Errors)
	d.Limits = slices.Clone(d.Limits)
	return d
}
