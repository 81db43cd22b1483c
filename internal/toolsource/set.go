package toolsource

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/redact"
	"github.com/pml-sandbox/pml/internal/secretref"
)

// errClosed is the cause of every call after Close.
var errClosed = errors.New("tool sources are closed")

// Set is the running servers of one server list, of every kind: one
// execution.ServerSource that owns every configured name. It is safe for
// concurrent use; Close releases everything it started.
type Set struct {
	env Env
	log *slog.Logger
	// red knows every secret of every server (its configuration's, and
	// what each learns while it runs: resolved headers, tokens): every
	// error, health line and log record leaves through it.
	red    *redact.Redactor
	byName map[string]*running
	order  []*running

	// ctx is the Set's life: loads and background work hang off it, never
	// off a caller's context.
	ctx    context.Context
	cancel context.CancelFunc
	// mu guards closed, so that no goroutine joins wg once Close waits.
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup

	merged atomic.Pointer[mergedTools]
}

// New checks specs (known kinds, unique names), opens every server, and
// starts loading them: the eager kinds' servers before it returns, the
// others in the background. ctx's values are kept for the background
// work, its cancellation is not. A configuration error is a *fault.Error
// with code INVALID_REQUEST.
func New(ctx context.Context, reg *Registry, specs []Spec, env Env) (*Set, error) {
	if env.Logger == nil {
		env.Logger = slog.Default()
	}
	if env.Refs == nil {
		env.Refs = secretref.New(nil, secretref.Options{})
	}
	red := redact.New()
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &Set{env: env, red: red, log: slog.New(red.Handler(env.Logger.Handler())),
		byName: make(map[string]*running, len(specs)), ctx: sctx, cancel: cancel}
	for i, spec := range specs {
		r, err := s.open(ctx, reg, spec)
		if err != nil {
			s.Close()
			return nil, fault.Wrap(fault.InvalidRequest, fmt.Errorf("servers[%d]: %w", i, err), "")
		}
		s.byName[r.cfg.Name] = r
		s.order = append(s.order, r)
	}
	var eager []*running
	for _, r := range s.order {
		if r.info.Eager {
			eager = append(eager, r)
		} else {
			r.start()
		}
	}
	if err := s.loadEager(ctx, eager); err != nil {
		s.Close()
		return nil, fault.Wrap(fault.InvalidRequest, errors.New(red.String(err.Error())), "")
	}
	return s, nil
}

// open validates one spec and builds its server.
func (s *Set) open(ctx context.Context, reg *Registry, spec Spec) (*running, error) {
	cfg := spec.Base()
	kind, err := reg.Kind(cfg.Type)
	if err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if s.byName[cfg.Name] != nil {
		return nil, fmt.Errorf("two servers are named %q", cfg.Name)
	}
	r := newRunning(s, kind.Info(), cfg)
	for _, v := range cfg.Headers {
		// Literal values are the secrets themselves; references are
		// learned by the kind once resolved.
		if !secretref.Has(v) {
			r.handle.Learn(secretref.HeaderSecrets(v)...)
		}
	}
	srv, err := kind.Open(ctx, spec, r.handle)
	if err != nil {
		return nil, fmt.Errorf("server %q: %w", cfg.Name, err)
	}
	r.srv = srv
	return r, nil
}

// loadEager runs the first load of the eager servers, concurrently; a
// permanent failure of any is New's error.
func (s *Set) loadEager(ctx context.Context, eager []*running) error {
	errs := make([]error, len(eager))
	var wg sync.WaitGroup
	for i, r := range eager {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.first(ctx)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// spawn runs f in a goroutine Close waits for; false (f not run) once
// closing.
func (s *Set) spawn(f func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
	return true
}

func (s *Set) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Tools implements execution.ToolSource: every server's catalog, in
// configuration order, each sorted by name. It waits, at most until ctx is
// done, for each server's first load. A server that is down keeps its
// last known tools (a call to one then fails with a retryable
// UNAVAILABLE, not TOOL_NOT_FOUND); one never loaded has none (CheckServer
// and Health say why). Tools the allow and deny lists hide are left out;
// destructive ones stay listed, their annotations say so, and Call
// refuses them unless allowed. The slice is shared until a catalog
// changes: callers must not modify it.
func (s *Set) Tools(ctx context.Context) ([]catalog.Tool, error) {
	if s.isClosed() {
		return nil, fault.Wrap(fault.Unavailable, errClosed, "")
	}
	var stack [8]*toolSet
	sets := stack[:0]
	for _, r := range s.order {
		r.waitFirst(ctx)
		r.demand()
		sets = append(sets, r.cat.Load())
	}
	if m := s.merged.Load(); m != nil && slices.Equal(m.from, sets) {
		return m.tools, nil
	}
	m := &mergedTools{from: slices.Clone(sets)}
	for _, ts := range sets {
		if ts != nil {
			m.tools = append(m.tools, ts.visible...)
		}
	}
	s.merged.Store(m)
	return m.tools, nil
}

// mergedTools is the list Tools last answered and the catalogs it joins:
// the same slice goes out until one of them changes, so that a caller
// (the execution service, on every execution) can tell an unchanged
// catalog by its identity.
type mergedTools struct {
	from  []*toolSet
	tools []catalog.Tool
}

// Servers implements execution.ServerSource: every configured name, in
// configuration order, whether or not it can be reached.
func (s *Set) Servers() []string {
	out := make([]string, len(s.order))
	for i, r := range s.order {
		out[i] = r.cfg.Name
	}
	return out
}

// CheckServer implements execution.ServerSource, without waiting: nil
// when server can serve calls now (so a tool it does not list is
// missing), a retryable UNAVAILABLE when it is configured but down or not
// loaded yet (a tool it does not list may exist), TOOL_NOT_FOUND when no
// server has that name.
func (s *Set) CheckServer(server string) error {
	r := s.byName[server]
	switch {
	case r == nil:
		return fault.New(fault.ToolNotFound, "no server named %q", server)
	case s.isClosed():
		return fault.Wrap(fault.Unavailable, errClosed, "")
	case r.ready.Load():
		return nil
	}
	r.demand()
	return s.scrub(r.unavailable(""))
}

// Call implements execution.ToolSource. Before anything is sent it checks
// that the tool exists (TOOL_NOT_FOUND), that the allow and deny lists and
// the destructive policy let it run (FORBIDDEN) and that args match its
// input schema (INVALID_ARGUMENTS); a server that is down fails at once
// with a retryable UNAVAILABLE (a cold start waits for its first load).
// Errors are scrubbed of every secret the Set knows; results (and the
// questions a server asks) of every secret the server is sent.
func (s *Set) Call(ctx context.Context, t catalog.Tool, args json.RawMessage, opt execution.CallOptions) (json.RawMessage, error) {
	r := s.byName[t.Server]
	if r == nil {
		opt.Refused()
		return nil, fault.New(fault.ToolNotFound, "no server named %q", t.Server).WithTool(t.FullName())
	}
	out, err := r.call(ctx, t.Name, args, opt)
	var q *execution.Question
	if errors.As(err, &q) {
		// The question goes to a person and into the suspension: one that
		// quotes a configured secret must not show it.
		for k, raw := range q.Requests {
			q.Requests[k] = json.RawMessage(r.red.JSON(raw))
		}
		return nil, q
	}
	if err != nil {
		return nil, s.scrub(fault.As(err))
	}
	return r.red.JSON(out), nil
}

// Precheck implements execution.Prechecker: Call's checks (the tool, the
// lists and the destructive policy under opt, the input schema), without
// sending anything and without waiting for a server to load (one not
// loaded yet is not refused here).
func (s *Set) Precheck(_ context.Context, t catalog.Tool, args json.RawMessage, opt execution.CallOptions) error {
	r := s.byName[t.Server]
	if r == nil {
		return fault.New(fault.ToolNotFound, "no server named %q", t.Server).WithTool(t.FullName())
	}
	if ferr := r.precheck(t.Name, args, opt); ferr != nil {
		return s.scrub(ferr)
	}
	return nil
}

// scrub masks every known secret in an error's message.
func (s *Set) scrub(fe *fault.Error) *fault.Error {
	fe.Message = s.red.String(fe.Message)
	return fe
}

// Health reports every server, in configuration order.
func (s *Set) Health() []Health {
	out := make([]Health, 0, len(s.order))
	for _, r := range s.order {
		h := r.health()
		h.LastError = s.red.String(h.LastError)
		out = append(out, h)
	}
	return out
}

// Redactor knows every secret of every server: whatever else must not
// hold them (the learning loop's literals) asks it.
func (s *Set) Redactor() *redact.Redactor { return s.red }

// Close stops background work, waits for it, then closes every server.
// Calls in flight fail as their server's Close makes them.
func (s *Set) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	var wg sync.WaitGroup
	errs := make([]error, len(s.order))
	for i, r := range s.order {
		if r.srv == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.srv.Close()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

var (
	_ execution.ServerSource = (*Set)(nil)
	_ execution.Prechecker   = (*Set)(nil)
)
