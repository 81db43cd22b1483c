// Package ranking ranks what discovery shows (tools.search, search_tools,
// the d.ts) by the lexical score plus what the traces say of published
// capabilities: how often their runs succeed, how often they are called,
// and which tools they call, weighed by the co-occurrence graph.
package ranking

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/js/analysis"
	"github.com/pml-sandbox/pml/internal/js/script"
	"github.com/pml-sandbox/pml/internal/learn"
	"github.com/pml-sandbox/pml/internal/trace"
)

// Ranker ranks tools for search (tools.search, search_tools) and
// annotates capabilities with their evidence (tools.describe and the d.ts
// of GET /tools): the lexical score (catalog.Search), and for a published
// capability
//
//	score = (lexical + graph) × min(1.5, 2 × success rate) × (1 + 0.1·log10(1 + calls))
//
// where graph is what the tools it calls bring: when the query matches two
// or more of them, their lexical scores summed, raised by up to a fifth
// where the trace store's co-occurrence graph has seen them together; when
// it matches one, 0.4 of its score (the tool itself stays first). So a
// query that matches tools A and B ranks a capability that calls A then B
// above A and above B, and a capability whose runs mostly fail sinks below
// the tools (the success rate assumes one success and one failure before
// any run: 0.5, a factor of 1, when nothing is known; a proven capability
// gains up to half again).
//
// What it reads: the process's capability index (as discovery already
// does), whose code it parses once per version; and, refreshed in the
// background at most every Interval, never while a search waits, the
// capability runs the Store counted and the co-occurrence of the tools
// capabilities call. A search never waits for a store.
type Ranker struct {
	// Capabilities lists the published capabilities (the process's
	// capability.Index); nil ranks lexically.
	Capabilities func(ctx context.Context) ([]capability.Capability, error)
	// Store counts capability runs (nil: no success rates).
	Store learn.Store
	// Related reads tool co-occurrence: the tools seen in executions with
	// tool, with counts (tracedb.Reader.RelatedTools; nil: none).
	Related func(ctx context.Context, tool string) (map[string]int64, error)
	// Interval bounds how often the evidence is read (default 1 minute).
	Interval time.Duration
	Log      *slog.Logger

	mu       sync.Mutex
	parsed   map[string][]string // capability id → tools its code names, in order
	snap     *evidence
	fetched  time.Time
	fetching bool
	closed   bool
	wg       sync.WaitGroup
}

// evidence is what the background refresh read.
type evidence struct {
	runs  map[string]learn.Runs
	pairs map[[2]string]int64 // co-occurrence of two tools, both orders
}

// maxParsePerSearch bounds the capability versions one search parses;
// the rest are parsed by the next searches (a registry of thousands is
// read in a few steps, never in one request).
const maxParsePerSearch = 200

// maxGraphTools bounds the tools whose co-occurrence a refresh reads.
const maxGraphTools = 32

// entry is a capability as ranking sees it.
type entry struct {
	calls int64
	tools []string
}

// capabilities are the published capabilities by name, with the tools
// their code names.
func (r *Ranker) capabilities(ctx context.Context) map[string]entry {
	if r == nil || r.Capabilities == nil {
		return nil
	}
	caps, err := r.Capabilities(ctx)
	if err != nil {
		r.logger().WarnContext(ctx, "ranking without capability evidence", "err", err.Error())
		return nil
	}
	out := make(map[string]entry, len(caps))
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.parsed == nil {
		r.parsed = map[string][]string{}
	}
	budget := maxParsePerSearch
	for _, c := range caps {
		tools, ok := r.parsed[c.ID]
		if !ok && budget > 0 {
			budget--
			tools = codeTools(c.Code)
			r.parsed[c.ID] = tools
		}
		out[c.Name] = entry{calls: c.Calls, tools: tools}
	}
	return out
}

// codeTools are the tools code names statically, in the order of their
// first mention.
func codeTools(code string) []string {
	p, err := script.Prepare(code, script.LangAuto)
	if err != nil || !p.Checked {
		return nil
	}
	refs := slices.Clone(p.Refs.Tools)
	slices.SortStableFunc(refs, func(a, b analysis.Ref) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
	})
	out := make([]string, len(refs))
	for i, ref := range refs {
		out[i] = ref.FullName()
	}
	return out
}

// current returns the evidence read last (nil before the first read) and,
// when it is older than the interval, starts reading it anew in the
// background.
func (r *Ranker) current(ctx context.Context, caps map[string]entry) *evidence {
	if r.Store == nil && r.Related == nil {
		return nil
	}
	interval := r.Interval
	if interval <= 0 {
		interval = time.Minute
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.fetching && !r.closed && time.Since(r.fetched) >= interval {
		r.fetching = true
		r.wg.Add(1)
		go r.refresh(context.WithoutCancel(ctx), caps)
	}
	return r.snap
}

// Refresh reads the evidence now, waiting for it (tests, and a process
// that wants it before its first search).
func (r *Ranker) Refresh(ctx context.Context) {
	caps := r.capabilities(ctx)
	r.mu.Lock()
	if r.fetching || r.closed {
		r.mu.Unlock()
		r.wg.Wait()
		r.mu.Lock()
	}
	r.fetching = true
	r.wg.Add(1)
	r.mu.Unlock()
	r.refresh(ctx, caps)
}

func (r *Ranker) refresh(ctx context.Context, caps map[string]entry) {
	defer r.wg.Done()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ev := &evidence{pairs: map[[2]string]int64{}}
	if r.Store != nil {
		runs, err := r.Store.Runs(ctx)
		if err != nil {
			r.logger().WarnContext(ctx, "capability evidence not read", "err", err.Error())
		}
		ev.runs = runs
	}
	if r.Related != nil {
		// The tools capabilities call, the most called capabilities'
		// first.
		names := make([]string, 0, len(caps))
		for n := range caps {
			names = append(names, n)
		}
		slices.SortFunc(names, func(a, b string) int { return cmp.Or(cmp.Compare(caps[b].calls, caps[a].calls), cmp.Compare(a, b)) })
		var tools []string
		for _, n := range names {
			for _, t := range caps[n].tools {
				if len(tools) < maxGraphTools && !slices.Contains(tools, t) {
					tools = append(tools, t)
				}
			}
		}
		for _, t := range tools {
			rel, err := r.Related(ctx, t)
			if err != nil {
				r.logger().WarnContext(ctx, "co-occurrence not read", "tool", t, "err", err.Error())
				break
			}
			for o, n := range rel {
				ev.pairs[[2]string{t, o}] = max(ev.pairs[[2]string{t, o}], n)
				ev.pairs[[2]string{o, t}] = max(ev.pairs[[2]string{o, t}], n)
			}
		}
	}
	r.mu.Lock()
	r.snap, r.fetched, r.fetching = ev, time.Now(), false
	r.mu.Unlock()
}

// Close waits for a refresh under way and stops starting new ones.
func (r *Ranker) Close(context.Context) error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.wg.Wait()
	return nil
}

func (r *Ranker) logger() *slog.Logger {
	if r.Log != nil {
		return r.Log
	}
	return slog.Default()
}

// Search ranks tools for query (see Ranker), best first, at most limit
// (all with limit ≤ 0). A nil Ranker is catalog.Search.
func (r *Ranker) Search(ctx context.Context, tools []catalog.Tool, query string, limit int) []catalog.Hit {
	if r == nil {
		return catalog.Search(tools, query, limit)
	}
	lexical := map[string]float64{}
	for _, h := range catalog.Search(tools, query, 0) {
		lexical[h.Tool.FullName()] = h.Score
	}
	caps := r.capabilities(ctx)
	ev := r.current(ctx, caps)
	var hits []catalog.Hit
	for _, t := range tools {
		score := lexical[t.FullName()]
		if t.Kind == trace.KindCapability {
			if e, ok := caps[capName(t)]; ok {
				score = capabilityScore(score, e, ev, capName(t), lexical)
				t = annotate(t, e, ev)
			}
		}
		if score > 0 {
			hits = append(hits, catalog.Hit{Tool: t, Score: score})
		}
	}
	slices.SortFunc(hits, func(a, b catalog.Hit) int {
		return cmp.Or(cmp.Compare(b.Score, a.Score), cmp.Compare(a.Tool.FullName(), b.Tool.FullName()))
	})
	if limit > 0 && len(hits) > limit {
		hits = hits[:limit]
	}
	return hits
}

// Annotate returns tools with each published capability's evidence added
// to its description: what tools.describe and the d.ts show.
func (r *Ranker) Annotate(ctx context.Context, tools []catalog.Tool) []catalog.Tool {
	if r == nil {
		return tools
	}
	caps := r.capabilities(ctx)
	ev := r.current(ctx, caps)
	out := slices.Clone(tools)
	for i, t := range out {
		if e, ok := caps[capName(t)]; ok && t.Kind == trace.KindCapability {
			out[i] = annotate(t, e, ev)
		}
	}
	return out
}

func capName(t catalog.Tool) string { return t.Server + ":" + t.Name }

func capabilityScore(own float64, e entry, ev *evidence, name string, lexical map[string]float64) float64 {
	var matched []string
	for _, t := range e.tools {
		if lexical[t] > 0 && !slices.Contains(matched, t) {
			matched = append(matched, t)
		}
	}
	graph := 0.0
	switch len(matched) {
	case 0:
	case 1:
		graph = 0.4 * lexical[matched[0]]
	default:
		together := int64(0)
		for i, a := range matched {
			for _, b := range matched[i+1:] {
				if ev != nil {
					together = max(together, ev.pairs[[2]string{a, b}])
				}
			}
		}
		for _, t := range matched {
			graph += lexical[t]
		}
		graph *= 1 + 0.2*min(1, math.Log10(1+float64(together))/4)
	}
	score := own + graph
	if score == 0 {
		return 0
	}
	rate := learn.Runs{}.SuccessRate()
	if ev != nil {
		rate = ev.runs[name].SuccessRate()
	}
	return score * min(1.5, 2*rate) * (1 + 0.1*math.Log10(1+float64(e.calls)))
}

// annotate adds what is known of a capability's use to its description.
func annotate(t catalog.Tool, e entry, ev *evidence) catalog.Tool {
	var parts []string
	if e.calls > 0 {
		parts = append(parts, fmt.Sprintf("called %d times", e.calls))
	}
	if ev != nil {
		if r, ok := ev.runs[capName(t)]; ok && r.OK+r.Failed > 0 {
			parts = append(parts, fmt.Sprintf("%d of %d recent runs succeeded", r.OK, r.OK+r.Failed))
		}
	}
	if len(e.tools) > 0 {
		parts = append(parts, "calls "+strings.Join(e.tools, ", then "))
	}
	if len(parts) == 0 {
		return t
	}
	note := "Evidence: " + strings.Join(parts, "; ") + "."
	if t.Description != "" {
		note = t.Description + "\n\n" + note
	}
	t.Description = note
	return t
}
