package capability

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/trace"
)

// Default refresh periods of an Index over a registry whose changes cost a
// request to learn (DynamoDB).
const (
	DefaultIndexInterval  = 5 * time.Second
	DefaultIndexFullEvery = 5 * time.Minute
)

// IndexOptions say how often an Index asks its registry for changes.
type IndexOptions struct {
	// Interval is the most an Index waits before asking for changes again
	// when it is read: a capability saved in another process is in the
	// index within Interval of reaching the registry's listing. 0 means
	// DefaultIndexInterval, except over a FileRegistry, whose changes a
	// stat tells, where every read asks; negative asks on every read.
	Interval time.Duration
	// FullEvery is how often the Index reads the whole listing instead of
	// the changes since its last read, which also refreshes call counts
	// (0 means DefaultIndexFullEvery).
	FullEvery time.Duration
	// Logger receives refresh failures (the Index then serves what it
	// has); default slog.Default().
	Logger *slog.Logger
}

// Index is the discovery view of a registry, kept per process (a Lambda
// container, `pml serve`): every capability's latest version, the
// namespaces, and the capabilities as catalog tools. tools.search,
// tools.list, /tools, search_tools and list_capabilities read it; an
// execution never rebuilds it, and it is refreshed only when read, at most
// once per Interval, from the registry's changes (a Query of what was saved
// since the last refresh on DynamoDB, a stat of the file for the file
// registry). It is safe for concurrent use.
type Index struct {
	reg       Registry
	interval  time.Duration
	fullEvery time.Duration
	log       *slog.Logger

	snap atomic.Pointer[indexSnap]

	mu       sync.Mutex // held while refreshing; guards the fields below
	mark     string
	checked  time.Time
	lastFull time.Time
}

// indexSnap is one state of the index; never changed once published.
type indexSnap struct {
	caps       []Capability // sorted by name
	byName     map[string]int
	namespaces map[string]bool
	tools      []catalog.Tool
}

// NewIndex returns an empty index over reg; the first read loads it.
func NewIndex(reg Registry, o IndexOptions) *Index {
	if o.Interval == 0 {
		o.Interval = DefaultIndexInterval
		if _, ok := unwrap(reg).(*FileRegistry); ok {
			o.Interval = -1
		}
	}
	if o.FullEvery <= 0 {
		o.FullEvery = DefaultIndexFullEvery
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Index{reg: reg, interval: o.Interval, fullEvery: o.FullEvery, log: o.Logger}
}

// List returns every capability's latest version, sorted by name. The
// slice is shared: callers must not modify it.
func (x *Index) List(ctx context.Context) ([]Capability, error) {
	s, err := x.current(ctx)
	if err != nil {
		return nil, err
	}
	return s.caps, nil
}

// Tools returns the capabilities as catalog tools, sorted by name. The
// slice is shared: callers must not modify it.
func (x *Index) Tools(ctx context.Context) ([]catalog.Tool, error) {
	s, err := x.current(ctx)
	if err != nil {
		return nil, err
	}
	return s.tools, nil
}

// Saved puts a capability this process just saved into the index, so
// that this process lists it at once whatever the interval.
func (x *Index) Saved(c Capability) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if s := x.snap.Load(); s != nil {
		x.snap.Store(merge(s, Changes{Caps: []Capability{c}}))
	}
}

// knows reports, without refreshing, whether the index holds name; loaded
// is false before the first load.
func (x *Index) knows(name string) (has, loaded bool) {
	s := x.snap.Load()
	if s == nil {
		return false, false
	}
	_, has = s.byName[name]
	return has, true
}

// hasNamespace reports, without refreshing, whether the index holds a
// capability in ns.
func (x *Index) hasNamespace(ns string) bool {
	s := x.snap.Load()
	return s != nil && s.namespaces[ns]
}

// current returns the snapshot, refreshed first when Interval has passed.
// While one reader refreshes, the others read the snapshot as it is; a
// failed refresh is logged and the old snapshot served (an error only when
// there is none yet).
func (x *Index) current(ctx context.Context) (*indexSnap, error) {
	s := x.snap.Load()
	if s != nil && x.interval > 0 {
		// Never wait for the lock: its holder is checking or refreshing
		// the snapshot, a Query on DynamoDB, and s is what this reader
		// would serve meanwhile.
		if !x.mu.TryLock() {
			return s, nil
		}
	} else {
		x.mu.Lock()
	}
	defer x.mu.Unlock()
	if s = x.snap.Load(); s != nil && x.interval > 0 && time.Since(x.checked) < x.interval {
		return s, nil
	}
	mark := x.mark
	if time.Since(x.lastFull) >= x.fullEvery {
		mark = ""
	}
	start := time.Now()
	ch, err := x.reg.Changes(ctx, mark)
	if err != nil {
		if s == nil {
			return nil, err
		}
		x.checked = start
		x.log.WarnContext(ctx, "capability index not refreshed; serving the last one", "err", err)
		return s, nil
	}
	x.checked, x.mark = start, ch.Next
	if ch.Full {
		x.lastFull = start
	}
	next := merge(s, ch)
	if next != s {
		x.snap.Store(next)
	}
	return next, nil
}

// merge applies ch to s (nil: empty), returning s itself when nothing
// changed.
func merge(s *indexSnap, ch Changes) *indexSnap {
	if ch.Full {
		if s != nil && sameCaps(s.caps, ch.Caps) {
			return s
		}
		return build(slices.Clone(ch.Caps))
	}
	if s == nil {
		s = build(nil)
	}
	var changed []Capability
	for _, c := range ch.Caps {
		i, ok := s.byName[c.Name]
		if !ok || c.Version > s.caps[i].Version {
			changed = append(changed, c)
		}
	}
	if len(changed) == 0 {
		return s
	}
	byName := make(map[string]Capability, len(s.caps)+len(changed))
	for _, c := range s.caps {
		byName[c.Name] = c
	}
	for _, c := range changed {
		byName[c.Name] = c
	}
	caps := make([]Capability, 0, len(byName))
	for _, c := range byName {
		caps = append(caps, c)
	}
	return build(caps)
}

func sameCaps(a, b []Capability) bool {
	return slices.EqualFunc(a, b, func(x, y Capability) bool {
		return x.ID == y.ID && x.Calls == y.Calls && x.UpdatedAt.Equal(y.UpdatedAt)
	})
}

func build(caps []Capability) *indexSnap {
	if caps == nil {
		caps = []Capability{} // lists as [], not null
	}
	slices.SortFunc(caps, func(a, b Capability) int { return strings.Compare(a.Name, b.Name) })
	s := &indexSnap{caps: caps, byName: make(map[string]int, len(caps)), namespaces: map[string]bool{},
		tools: make([]catalog.Tool, len(caps))}
	for i, c := range caps {
		s.byName[c.Name] = i
		s.namespaces[c.Namespace()] = true
		s.tools[i] = toolOf(c)
	}
	return s
}

// toolOf is the catalog tool a capability is offered as.
func toolOf(c Capability) catalog.Tool {
	return catalog.Tool{Server: c.Namespace(), Name: c.Action(), Description: c.Description,
		InputSchema: c.InputSchema, Kind: trace.KindCapability}
}
