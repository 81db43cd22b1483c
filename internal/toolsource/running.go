package toolsource

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pml-sandbox/pml/internal/argcheck"
	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/compensate"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/redact"
	"github.com/pml-sandbox/pml/internal/trace"
)

// State is a server's health as callers see it.
type State string

// Server states.
const (
	// StateHealthy: loaded, catalog fresh.
	StateHealthy State = "healthy"
	// StateDegraded: serving calls, but its catalog may be stale (a
	// refresh failed).
	StateDegraded State = "degraded"
	// StateUnavailable: not loaded, or lost since (loading, retrying, or
	// given up until the next Tools or Call). Calls fail at once with
	// UNAVAILABLE.
	StateUnavailable State = "unavailable"
)

// Health is one server's state. It never holds a secret: URL is without
// credentials, and LastError is scrubbed of every secret the Set knows.
type Health struct {
	Name  string `json:"name"`
	URL   string `json:"url"`
	State State  `json:"state"`
	// LastError says why the server is not healthy.
	LastError string `json:"last_error,omitempty"`
	// Since is when State last changed.
	Since time.Time `json:"since"`
	// Tools counts the tools the server exposes: while it is down, its
	// last known ones.
	Tools int `json:"tools"`
	// Transport is how the server is reached: an MCP server's transport
	// ("streamable", "sse"), else the kind's type.
	Transport       string `json:"transport,omitempty"`
	ProtocolVersion string `json:"protocol_version,omitempty"`
}

// running is one configured server inside a Set: its lifecycle and its
// checked catalog; the kind's Server does the rest.
type running struct {
	set    *Set
	info   KindInfo
	cfg    Config
	srv    Server
	handle *Handle
	log    *slog.Logger
	drops  *catalog.DropLog
	// red knows what this server is sent: its results are masked with
	// it before a script sees them.
	red *redact.Redactor

	// cat and ready are read on every call without locking.
	cat   atomic.Pointer[toolSet]
	ready atomic.Bool

	// firstDone closes once the first load has ended, whatever its
	// outcome: only a cold start waits for discovery.
	firstDone chan struct{}
	firstOnce sync.Once

	mu       sync.Mutex // guards the fields below; never held over I/O
	state    State
	lastErr  string
	lastPerm error // the last load's error, when permanent
	since    time.Time
	loading  bool
	// again: a round was asked for while one ran (a Lost right after
	// the round's load succeeded); it runs once this one ends.
	again    bool
	loadedAt int // loads that succeeded: the next ones are reloads
	// losses and updates count Lost and Update: a load that one came
	// in during yields to it, as what the server said then is newer
	// than what its Load listed (a connection that dropped, or a list
	// that changed, as soon as it was made).
	losses, updates uint64

	// instMu serialises installing catalogs, so that a load's listing
	// cannot land over an Update that came after it.
	instMu sync.Mutex
}

// toolSet is one immutable catalog of a server.
type toolSet struct {
	byName  map[string]*entry
	visible []catalog.Tool
}

type entry struct {
	tool catalog.Tool
	ref  any
	// denied: hidden by the allow and deny lists, kept so that a call is
	// FORBIDDEN rather than TOOL_NOT_FOUND.
	denied bool
	input  *argcheck.Validator
}

func (ts *toolSet) lookup(name string) *entry {
	if ts == nil {
		return nil
	}
	return ts.byName[name]
}

// emptyObjectSchema stands in for a tool that declares no input schema.
var emptyObjectSchema = json.RawMessage(`{"type":"object"}`)

func newRunning(s *Set, info KindInfo, cfg Config) *running {
	if info.ToolNoun == "" {
		info.ToolNoun = "tool"
	}
	log := s.log.With(slog.String(info.Type+"_server", cfg.Name))
	r := &running{set: s, info: info, cfg: cfg, log: log, drops: catalog.NewDropLog(log),
		red: redact.New(), firstDone: make(chan struct{}), state: StateUnavailable, lastErr: "not loaded yet",
		since: time.Now()}
	r.handle = &Handle{r: r}
	return r
}

// first runs the first load and its retries, waiting for the first
// attempt; a permanent error is returned (an eager kind's New fails).
func (r *running) first(ctx context.Context) error {
	err := r.loadOnce(ctx)
	r.firstOnce.Do(func() { close(r.firstDone) })
	if err == nil {
		return nil
	}
	if IsPermanent(err) {
		return fmt.Errorf("%s %q: %w", r.info.Noun, r.cfg.Name, errors.Unwrap(err))
	}
	r.log.Warn(r.info.Noun+" unavailable; tried again in the background", "err", err)
	r.start()
	return nil
}

// start begins a round of loads by the retry policy unless one is
// running.
func (r *running) start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ready.Load() {
		// Loaded since the caller looked (a demand racing a round's
		// end): a round now would only load again what it just did.
		return
	}
	if r.loading {
		r.again = true
		return
	}
	if r.set.spawn(r.rounds) {
		r.loading = true
	}
}

// demand is a Tools or Call asking for the server: a ready one may
// freshen its catalog; one that is down and whose round has ended starts
// another.
func (r *running) demand() {
	if r.ready.Load() {
		if f, ok := r.srv.(Freshener); ok {
			f.Freshen()
		}
		return
	}
	r.start()
}

// rounds runs rounds of loads while they are asked for.
func (r *running) rounds() {
	for {
		r.round()
		r.mu.Lock()
		again := r.again && !r.ready.Load() && r.set.ctx.Err() == nil
		r.again = false
		if !again {
			r.loading = false
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
	}
}

// round is one round of loads by the retry policy.
func (r *running) round() {
	attempt := 0
	err := r.set.env.Retry.run(r.set.ctx, func() error {
		attempt++
		err := r.loadOnce(r.set.ctx)
		r.firstOnce.Do(func() { close(r.firstDone) })
		return err
	}, func(err error, next time.Duration) {
		r.log.Warn(r.info.Noun+" load failed", "attempt", attempt, "retry_in", next, "err", err)
	})
	if err != nil && r.set.ctx.Err() == nil {
		r.log.Error(r.info.Noun+" unavailable; next attempt on demand", "attempts", attempt, "err", err)
	}
}

// loadOnce makes one load and installs what it lists, unless the server
// said otherwise while it ran: a Lost keeps it unavailable (the round
// Lost asked for runs next), an Update's catalog stands.
func (r *running) loadOnce(ctx context.Context) error {
	r.mu.Lock()
	losses, updates := r.losses, r.updates
	r.mu.Unlock()
	tools, err := r.srv.Load(ctx)
	if err != nil {
		if r.set.ctx.Err() == nil {
			r.mu.Lock()
			r.lastPerm = nil
			if IsPermanent(err) {
				r.lastPerm = err
			}
			r.setStateLocked(StateUnavailable, err.Error())
			r.mu.Unlock()
		}
		return err
	}
	r.instMu.Lock()
	r.mu.Lock()
	updated := r.updates != updates
	r.mu.Unlock()
	if !updated {
		r.install(tools)
	}
	r.instMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.loadedAt++
	r.lastPerm = nil
	if r.losses != losses {
		return nil
	}
	r.setStateLocked(StateHealthy, "")
	r.ready.Store(true)
	return nil
}

func (r *running) setStateLocked(st State, lastErr string) {
	if st != r.state {
		r.since = time.Now()
		r.log.Info(r.info.Noun+" state", "state", string(st), "err", r.set.red.String(lastErr))
	}
	r.state, r.lastErr = st, lastErr
}

// install checks a listing and makes it the catalog: names the guest
// cannot hold and schemas past the bounds are dropped (each told once),
// the allow and deny lists and require_approval applied, and compiled
// schemas that did not change reused.
func (r *running) install(tools []Tool) {
	prev := r.cat.Load()
	ts := &toolSet{byName: make(map[string]*entry, len(tools))}
	ctx := context.Background()
	undo := r.compensations(tools)
	for _, t := range tools {
		name := t.Name
		if err := catalog.ValidName(name); err != nil {
			r.drops.Drop(ctx, r.cfg.Name, name, err.Error())
			continue
		}
		if ts.byName[name] != nil {
			r.drops.Drop(ctx, r.cfg.Name, name, "the server lists the name twice")
			continue
		}
		t.Server, t.SourceKind = r.cfg.Name, r.info.Type
		if t.Kind == "" {
			// A server's tool, whatever protocol reaches it: traces tell
			// them from capabilities.
			t.Kind = trace.KindMCP
		}
		if len(t.InputSchema) == 0 {
			t.InputSchema = emptyObjectSchema
		}
		// Its compile (on first call) cannot be cancelled and grows faster
		// than the schema: no server may hand one past the bounds.
		if err := argcheck.CheckBounds(t.InputSchema); err != nil {
			r.drops.Drop(ctx, r.cfg.Name, name, "input schema out of bounds: "+err.Error())
			continue
		}
		// Decided here, with the configuration at hand, so that the
		// service sees it on the tool like an annotation.
		t.RequireApproval = r.cfg.RequiresApproval(name)
		t.IdempotencyKeys = r.cfg.IdempotencyKeys
		t.Compensate = undo[name]
		e := &entry{tool: t.Tool, ref: t.Ref}
		if why := r.cfg.Refusal(name); why != "" {
			e.denied = true
			r.drops.Drop(ctx, r.cfg.Name, name, why)
		}
		if old := prev.lookup(name); old != nil && bytes.Equal(old.input.Schema(), t.InputSchema) {
			e.input = old.input
		} else {
			e.input = argcheck.New(t.InputSchema)
		}
		ts.byName[name] = e
		if !e.denied {
			ts.visible = append(ts.visible, t.Tool)
		}
	}
	sort.Slice(ts.visible, func(i, j int) bool { return ts.visible[i].Name < ts.visible[j].Name })
	r.cat.Store(ts)
}

// compensations are the configured compensations that hold for this
// listing: a tool it lists, undone by a tool it lists that the allow and
// deny lists expose — never another server's, never a tool the
// deployment hides. One that does not hold is left off (its effects are
// then skipped by a rollback, which says there is no compensation), and
// said once per listing.
func (r *running) compensations(tools []Tool) map[string]*compensate.Template {
	if len(r.cfg.Compensate) == 0 {
		return nil
	}
	listed := make(map[string]bool, len(tools))
	for _, t := range tools {
		listed[t.Name] = true
	}
	out := make(map[string]*compensate.Template, len(r.cfg.Compensate))
	for name, tpl := range r.cfg.Compensate {
		why := ""
		switch {
		case !listed[name]:
			why = "the server does not list " + name
		case !listed[tpl.Tool]:
			why = "the server does not list its undo " + tpl.Tool
		case r.cfg.Refusal(tpl.Tool) != "":
			why = "its undo " + tpl.Tool + " is not exposed"
		}
		if why != "" {
			r.log.Warn("compensation not in force", "tool", name, "undo", tpl.Tool, "why", why)
			continue
		}
		out[name] = tpl
	}
	return out
}

// waitFirst waits for the first load to end, at most until ctx is done.
func (r *running) waitFirst(ctx context.Context) {
	select {
	case <-r.firstDone:
	case <-ctx.Done():
	}
}

// call checks one call and hands it to the server. A call refused by the
// checks was never sent, and says so (CallOptions.Refused).
func (r *running) call(ctx context.Context, name string, args json.RawMessage, opt execution.CallOptions) (json.RawMessage, error) {
	c, ferr := r.prepare(ctx, name, args, opt)
	if ferr != nil {
		opt.Refused()
		return nil, ferr
	}
	return r.srv.Call(ctx, c)
}

// prepare is everything before a call is sent: the Set open, the server
// ready, the tool listed and allowed (check), its arguments valid.
func (r *running) prepare(ctx context.Context, name string, args json.RawMessage, opt execution.CallOptions) (Call, *fault.Error) {
	full := r.cfg.Name + ":" + name
	if r.set.isClosed() {
		return Call{}, fault.Wrap(fault.Unavailable, errClosed, "").WithTool(full)
	}
	if !r.ready.Load() {
		r.waitFirst(ctx)
		if !r.ready.Load() {
			r.start()
			return Call{}, r.unavailable(full)
		}
	}
	e, checked, ferr := r.check(name, args, opt)
	if ferr != nil {
		return Call{}, ferr
	}
	if f, ok := r.srv.(Freshener); ok {
		f.Freshen()
	}
	return Call{Tool: e.tool, Ref: e.ref, Args: checked, Timeout: r.cfg.Timeout(), Options: opt}, nil
}

// check is what is checked of a call before anything is sent: the tool
// exists, the lists and the destructive policy let it run, its arguments
// match its input schema (which returns them as sent: an absent object
// reads {}).
func (r *running) check(name string, args json.RawMessage, opt execution.CallOptions) (*entry, json.RawMessage, *fault.Error) {
	full := r.cfg.Name + ":" + name
	e := r.cat.Load().lookup(name)
	if e == nil {
		return nil, nil, fault.New(fault.ToolNotFound, "%s %q has no %s %q", r.info.Noun, r.cfg.Name, r.info.ToolNoun, name).WithTool(full)
	}
	if ferr := r.allowed(e, opt); ferr != nil {
		return nil, nil, ferr.WithTool(full)
	}
	checked, ferr := e.input.Check(args)
	if ferr != nil {
		return nil, nil, ferr.WithTool(full)
	}
	return e, checked, nil
}

// precheck is check without waiting and without sending: nil while the
// server is not loaded (nothing can be told yet).
func (r *running) precheck(name string, args json.RawMessage, opt execution.CallOptions) *fault.Error {
	if r.set.isClosed() || !r.ready.Load() {
		return nil
	}
	_, _, ferr := r.check(name, args, opt)
	return ferr
}

// allowed applies the allow and deny lists and the destructive policy.
func (r *running) allowed(e *entry, opt execution.CallOptions) *fault.Error {
	switch {
	case e.denied:
		return fault.New(fault.Forbidden, "tool is not allowed by the configuration of server %q", r.cfg.Name)
	case !e.tool.IsDestructive():
		return nil
	case !r.cfg.AllowDestructive && e.tool.DestructiveByDefault():
		return fault.New(fault.Forbidden, "destructive tool: server %q does not allow destructive tools, and this one does not say it is "+
			"read-only or not destructive (MCP's defaults make it destructive; a deployment whose server under-annotates sets "+
			"assume_not_destructive in its configuration). %s", r.cfg.Name, letDecide)
	case !r.cfg.AllowDestructive:
		return fault.New(fault.Forbidden, "destructive tool: server %q does not allow destructive tools. %s", r.cfg.Name, letDecide)
	case !opt.AllowDestructive:
		return fault.New(fault.Forbidden, "destructive tool: the request does not allow destructive tools")
	}
	return nil
}

// letDecide says how a deployment lets a person decide the destructive
// calls of a server that refuses them all.
const letDecide = "No call of it can run, so none is put to a person: to let a person decide each call, the deployment sets " +
	"allow_destructive: true in the server's configuration (a call then still needs a person's approval, or the request's allow_destructive)"

// unavailable is the error of a call to a server that cannot serve now:
// retryable, unless its last load failed permanently (retrying will not
// log anyone in), whose error then speaks for itself.
func (r *running) unavailable(full string) *fault.Error {
	if r.set.isClosed() {
		return fault.Wrap(fault.Unavailable, errClosed, "").WithTool(full)
	}
	r.mu.Lock()
	last, perm := r.lastErr, r.lastPerm
	r.mu.Unlock()
	if perm != nil {
		return fault.Wrap(fault.Unavailable, errors.Unwrap(perm), "").WithTool(full)
	}
	e := fault.Wrap(fault.Unavailable, errors.New(last), fmt.Sprintf("%s %q is unavailable", r.info.Noun, r.cfg.Name)).WithTool(full)
	e.Retryable = true
	return e
}

func (r *running) health() Health {
	r.mu.Lock()
	h := Health{Name: r.cfg.Name, State: r.state, LastError: r.lastErr, Since: r.since, Transport: r.info.Type}
	r.mu.Unlock()
	if ts := r.cat.Load(); ts != nil {
		h.Tools = len(ts.visible)
	}
	if d, ok := r.srv.(Describer); ok {
		d.Describe(&h)
	}
	return h
}

// Handle is a running server's way back to its Set: what it learns and
// what happens to it between loads.
type Handle struct{ r *running }

// Name is the server's name.
func (h *Handle) Name() string { return h.r.cfg.Name }

// Logger logs as the server, scrubbed of every secret the Set knows.
func (h *Handle) Logger() *slog.Logger { return h.r.log }

// Env is the process's shared dependencies.
func (h *Handle) Env() Env { return h.r.set.env }

// Context is the Set's life: what the server starts in the background
// hangs off it, never off a caller's context.
func (h *Handle) Context() context.Context { return h.r.set.ctx }

// Spawn runs f in the background, waited for by Close; false (f not run)
// once the Set is closing.
func (h *Handle) Spawn(f func()) bool { return h.r.set.spawn(f) }

// Learn makes secrets known: the server's results are masked with them,
// and everything the Set lets out. Call it before a secret is sent
// anywhere (a resolved header, a token).
func (h *Handle) Learn(secrets ...string) {
	h.r.red.Add(secrets...)
	h.r.set.red.Add(secrets...)
}

// Redactor knows what this server is sent.
func (h *Handle) Redactor() *redact.Redactor { return h.r.red }

// Scrubber knows every secret the Set knows: what the Set masks errors
// and log lines with. A kind that bounds a text on its way into an error
// (a service's answer quoted) bounds it with Scrubber().Cut, which masks
// before it cuts: cut first, a secret would leave a start that no longer
// matches it.
func (h *Handle) Scrubber() *redact.Redactor { return h.r.set.red }

// Drop keeps a tool the server lists out of the catalog for a reason of
// the kind's (an invalid header binding), told once.
func (h *Handle) Drop(tool, reason string) {
	h.r.drops.Drop(context.Background(), h.r.cfg.Name, tool, reason)
}

// Update replaces the catalog (a list the server said had changed); a
// ready server is healthy again. During a load it wins over what that
// load lists.
func (h *Handle) Update(tools []Tool) {
	h.r.instMu.Lock()
	h.r.mu.Lock()
	h.r.updates++
	h.r.mu.Unlock()
	h.r.install(tools)
	h.r.instMu.Unlock()
	h.r.mu.Lock()
	if h.r.ready.Load() {
		h.r.setStateLocked(StateHealthy, "")
	}
	h.r.mu.Unlock()
}

// Degraded says the server still serves but its catalog may be stale.
func (h *Handle) Degraded(err error) {
	h.r.mu.Lock()
	if h.r.state != StateUnavailable {
		h.r.setStateLocked(StateDegraded, err.Error())
	}
	h.r.mu.Unlock()
}

// Lost says the server cannot serve until it is loaded again (a dropped
// connection): calls fail UNAVAILABLE at once, its last tools stay listed,
// and a round of loads starts. During a load it wins over that load's
// success.
func (h *Handle) Lost(err error) {
	h.r.mu.Lock()
	// Under mu, so that a load ending now cannot mark the server ready
	// after this.
	h.r.ready.Store(false)
	h.r.losses++
	h.r.setStateLocked(StateUnavailable, err.Error())
	h.r.mu.Unlock()
	h.r.start()
}

// Reloading reports whether a load has succeeded before: the next is a
// reconnect, not a first connect (what the server counts as such).
func (h *Handle) Reloading() bool {
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	return h.r.loadedAt > 0
}
