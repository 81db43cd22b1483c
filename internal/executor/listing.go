package executor

import (
	"context"
	"maps"
	"slices"
	"strings"
	"unsafe"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/guest"
)

// listing is what the listing sources (every source that is not an
// execution.ResolvingSource: MCP servers, OpenAPI services, demo tools)
// offered at one moment, merged by the catalog's rules, and the tool set
// of an execution that narrows nothing and resolves nothing more built
// from it. Every execution starts from it, so it is built once per change
// of a source's list rather than once per execution (merging, checking
// and sorting every listed tool, and the maps of the tool set, were most
// of the service's own work for a script that calls one tool or none).
// A listing is never modified once built: executions share it.
type listing struct {
	keys []listKey
	// merged is the builder after the listing sources: out in source
	// order, seen holding every name taken.
	merged builder
	// plain is the tool set of an execution with no filter, no
	// inherited narrowing and no name left to resolve, with its guest
	// tools.
	plain *toolSet
	// sorted is merged's entries sorted by full name.
	sorted []entry
}

// listKey identifies one source's answer: the array its tools are in and
// how many. Sources keep their lists in memory and hand out the same
// slice until the list changes (they must not modify a slice they handed
// out: every caller may keep it), so an unchanged key is an unchanged
// list. A source that builds a fresh slice on every call is merged anew
// every time, as before the cache.
type listKey struct {
	data *catalog.Tool
	n    int
}

func keyOf(tools []catalog.Tool) listKey {
	return listKey{data: unsafe.SliceData(tools), n: len(tools)}
}

// listingFirst reports whether every listing source comes before every
// resolving one, the order internal/app wires and the only one the
// cached listing serves: a resolving source ahead of a listing one would
// take names before it (first wins), so the merge depends on the names
// each execution resolves.
func listingFirst(sources []execution.ToolSource) bool {
	resolving := false
	for _, src := range sources {
		_, rs := src.(execution.ResolvingSource)
		if !rs && resolving {
			return false
		}
		resolving = resolving || rs
	}
	return true
}

// listed returns the current listing: each listing source is asked for
// its tools as always (a source refreshes or reconnects when asked), and
// the cached merge is reused when every answer is the slice it was built
// from.
func (s *Service) listed(ctx context.Context) *listing {
	n := 0
	for _, src := range s.sources {
		if _, rs := src.(execution.ResolvingSource); !rs {
			n++
		}
	}
	var stack [4][]catalog.Tool
	lists := stack[:0]
	if n > len(stack) {
		lists = make([][]catalog.Tool, 0, n)
	}
	for _, src := range s.sources[:n] {
		tools, err := src.Tools(ctx)
		if err != nil {
			s.log.WarnContext(ctx, "tool source unavailable", "err", err)
		}
		lists = append(lists, tools)
	}
	if l := s.listing.Load(); l != nil && len(l.keys) == n {
		same := true
		for i, tools := range lists {
			if keyOf(tools) != l.keys[i] {
				same = false
				break
			}
		}
		if same {
			return l
		}
	}
	l := &listing{keys: make([]listKey, n), merged: *s.newBuilder()}
	for i, tools := range lists {
		l.keys[i] = keyOf(tools)
		l.merged.add(ctx, i, s.sources[i], tools)
	}
	l.sorted = slices.Clone(l.merged.out)
	slices.SortFunc(l.sorted, func(a, b entry) int { return strings.Compare(a.tool.FullName(), b.tool.FullName()) })
	l.plain = plainToolSet(l.sorted)
	s.listing.Store(l)
	return l
}

// plainToolSet is the tool set of sorted entries for an execution that
// narrows nothing.
func plainToolSet(sorted []entry) *toolSet {
	tools := make([]catalog.Tool, len(sorted))
	entries := make(map[string]entry, len(sorted))
	for i, e := range sorted {
		tools[i] = e.tool
		entries[e.tool.FullName()] = e
	}
	gtools := make([]guest.Tool, len(tools))
	for i, t := range tools {
		gtools[i] = guestTool(t)
	}
	return &toolSet{all: tools, visible: tools, entries: entries, guest: gtools}
}

// clone is a builder holding what l merged, to add resolved tools to.
func (l *listing) clone() *builder {
	b := l.merged
	b.out = slices.Clone(b.out)
	b.seen = maps.Clone(b.seen)
	return &b
}
