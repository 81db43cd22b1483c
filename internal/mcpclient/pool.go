// Package mcpclient keeps one MCP client per remote server for the life of
// a (warm) process: it connects in the background, discovers tools once and
// refreshes them on notifications/tools/list_changed or a TTL, re-initialises
// expired sessions, reconnects dropped servers with exponential backoff, and
// serves validated, time-bounded, size-bounded tool calls whose results are
// normalised to JSON values a script can use.
//
// Protocol: over streamable HTTP the pool speaks MCP 2026-07-28
// (ModernProtocolVersion) where the server does: mcp-go's client probes
// with server/discover and falls back to the initialize handshake of
// 2025-11-25 (ProtocolVersion) when the server does not answer it (the
// probe is bounded, see discoverTimeout). On 2026-07-28 every request
// carries its metadata and headers (modern.go), tools/list's ttlMs sets
// when the catalog is refreshed, and list changes arrive on
// subscriptions/listen; on 2025-11-25 they arrive on the session's GET
// stream, and an expired session is re-initialised. The HTTP+SSE transport
// is pinned to 2025-11-25. A server may answer with an older revision
// (2024-11-05 and later); Health reports what was agreed.
//
// Concurrency: each server has its own small mutex guarding its state, never
// held over I/O; the live connection and tool catalog are read lock-free, so
// a slow or dead server never blocks calls to the others.
package mcpclient

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/pml-sandbox/pml/internal/ask"
	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/oauthclient"
	"github.com/pml-sandbox/pml/internal/redact"
	"github.com/pml-sandbox/pml/internal/secretref"
)

// ProtocolVersion is the MCP revision the pool asks for with the
// initialize handshake, from a server that does not speak
// ModernProtocolVersion. See the package doc.
const ProtocolVersion = mcp.ProtocolVersion20251125

// State is a server's health as callers see it.
type State string

// Server states.
const (
	// StateHealthy: connected, catalog fresh.
	StateHealthy State = "healthy"
	// StateDegraded: connected and serving calls, but the last catalog
	// refresh failed, so its tools may be stale.
	StateDegraded State = "degraded"
	// StateUnavailable: not connected (connecting, reconnecting, or given up
	// until the next call or Tools). Calls fail at once with UNAVAILABLE.
	StateUnavailable State = "unavailable"
)

// ServerHealth is one server's state. It never holds a secret: URL shows
// the server's URL without userinfo and query values, and LastError is
// scrubbed of every secret the pool knows.
type ServerHealth struct {
	Name  string `json:"name"`
	URL   string `json:"url"`
	State State  `json:"state"`
	// LastError says why the server is not healthy.
	LastError string `json:"last_error,omitempty"`
	// Since is when State last changed.
	Since time.Time `json:"since"`
	// Tools counts the tools the server exposes through the pool: while it
	// is down, its last known ones.
	Tools           int    `json:"tools"`
	Transport       string `json:"transport,omitempty"`
	ProtocolVersion string `json:"protocol_version,omitempty"`
}

// Stats counts the pool's protocol traffic since New. A warm execution that
// reuses discovery leaves Initializes and ToolLists unchanged.
type Stats struct {
	Initializes int64 `json:"initializes"`
	// ToolLists counts tools/list requests (one per page).
	ToolLists  int64 `json:"tool_lists"`
	Calls      int64 `json:"calls"`
	Reconnects int64 `json:"reconnects"`
}

// CallOptions are the per-request switches of one call.
type CallOptions struct {
	// AllowDestructive lets a destructiveHint tool run, if the server's
	// config allows it too.
	AllowDestructive bool
	// ParseJSONText parses a text result as JSON (when it is JSON) even if
	// the tool declares no output schema.
	ParseJSONText bool
	// MaxResultBytes caps the normalised result; zero means the pool's
	// default. It cannot raise the pool's per-message cap.
	MaxResultBytes int
	// Retry sends the call again with the answers to the question the
	// server asked (the *execution.Question Call returned).
	Retry *execution.Retry
}

type options struct {
	logger          *slog.Logger
	refreshTTL      time.Duration
	connectTimeout  time.Duration
	backoffInitial  time.Duration
	backoffMax      time.Duration
	maxAttempts     int
	maxMessageBytes int64
	auth            authOptions
	// answerer answers 2025-11-25 servers' questions in line
	// (WithAnswerer).
	answerer ask.Answerer
	// refs resolves the secret references of the servers' credentials
	// (WithSecretRefs).
	refs *secretref.Resolver
}

// defaultMaxResultBytes caps a normalised result whose call sets no cap
// (CallOptions.MaxResultBytes).
const defaultMaxResultBytes = 1 << 20

// clientInfo is how the pool introduces itself in initialize.
var clientInfo = mcp.Implementation{Name: "pml-sandbox", Version: "0.1.0"}

func defaultOptions() options {
	return options{
		logger:          slog.Default(),
		refreshTTL:      5 * time.Minute,
		connectTimeout:  10 * time.Second,
		backoffInitial:  time.Second,
		backoffMax:      30 * time.Second,
		maxAttempts:     8,
		maxMessageBytes: 16 << 20,
	}
}

// Option configures a Pool.
type Option func(*options)

// WithLogger sets the logger (default slog.Default()). Every record carries
// the server name. The pool logs through a handler that scrubs every secret
// of the configs (header values, URL credentials and query values) from
// each record, its own and mcp-go's alike.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.logger = l
		}
	}
}

// WithRefreshTTL sets how old a catalog may get before it is refreshed in
// the background (default 5 min). The refresh is lazy, on the next Tools or
// Call, because a frozen Lambda has no use for a timer.
func WithRefreshTTL(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.refreshTTL = d
		}
	}
}

// WithConnectTimeout bounds one connect attempt: stream setup, initialize
// and the full tools/list (default 10 s).
func WithConnectTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.connectTimeout = d
		}
	}
}

// WithReconnectBackoff sets the reconnect schedule: the first retry after
// initial, doubling up to max, for at most attempts attempts in all
// (default 1 s, 30 s, 8).
func WithReconnectBackoff(initial, max time.Duration, attempts int) Option {
	return func(o *options) {
		if initial > 0 {
			o.backoffInitial = initial
		}
		if max >= initial && max > 0 {
			o.backoffMax = max
		}
		if attempts > 0 {
			o.maxAttempts = attempts
		}
	}
}

// WithMaxMessageBytes caps any one message a server sends (default 16 MiB):
// a larger one fails its call with LIMIT_EXCEEDED before it is buffered.
func WithMaxMessageBytes(n int64) Option {
	return func(o *options) {
		if n > 0 {
			o.maxMessageBytes = n
		}
	}
}

// Pool holds the clients of a fixed set of servers. It is safe for
// concurrent use; Close releases everything it started.
type Pool struct {
	log  *slog.Logger
	opts options
	// red knows every secret of the configs; whatever leaves the pool
	// (call errors, Health, log records) passes through it.
	red     *redact.Redactor
	servers map[string]*remote
	order   []*remote

	// ctx is the pool's lifetime: connections and background work hang off
	// it, never off a caller's context.
	ctx    context.Context
	cancel context.CancelFunc

	// mu guards closed so that no goroutine is added to wg once Close has
	// started waiting. It is never held over I/O.
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup

	initializes, toolLists, calls, reconnects atomic.Int64

	merged atomic.Pointer[mergedTools] // see Tools
}

var errPoolClosed = errors.New("mcp client pool is closed")

// New validates cfgs and starts connecting to every server in the
// background; it does not wait for any of them. ctx's values are kept for
// background work, its cancellation is not: the pool lives until Close.
func New(ctx context.Context, cfgs []ServerConfig, opts ...Option) (*Pool, error) {
	if err := validateConfigs(cfgs); err != nil {
		return nil, fault.Wrap(fault.InvalidRequest, err, "mcp config")
	}
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	red := redact.New()
	for _, c := range cfgs {
		red.Add(c.secrets()...)
	}
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &Pool{
		log:     slog.New(red.Handler(o.logger.Handler())),
		opts:    o,
		red:     red,
		servers: make(map[string]*remote, len(cfgs)),
		ctx:     pctx,
		cancel:  cancel,
	}
	if f := o.auth.secrets; f != nil {
		// One Secrets Manager client for all the pool's servers, made
		// when the first needs it.
		get := sync.OnceValues(func() (oauthclient.SecretsAPI, error) { return f(pctx) })
		p.opts.auth.secrets = func(context.Context) (oauthclient.SecretsAPI, error) { return get() }
	}
	if p.opts.refs == nil {
		var client func(context.Context) (secretref.API, error)
		if f := p.opts.auth.secrets; f != nil {
			client = func(ctx context.Context) (secretref.API, error) { return f(ctx) }
		}
		p.opts.refs = secretref.New(client, secretref.Options{})
	}
	for _, c := range cfgs {
		s := newServer(p, c)
		s.setupAuth()
		p.servers[c.Name] = s
		p.order = append(p.order, s)
	}
	for _, s := range p.order {
		s.mu.Lock()
		s.startConnectLocked()
		s.mu.Unlock()
	}
	return p, nil
}

// spawn runs f in a goroutine Close waits for; it reports false (and does
// not run f) once the pool is closing.
func (p *Pool) spawn(f func()) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		f()
	}()
	return true
}

// spawnOrRun runs f in the background, or right here when closing.
func (p *Pool) spawnOrRun(f func()) {
	if !p.spawn(f) {
		f()
	}
}

func (p *Pool) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// Tools returns the catalog of every server, sorted by server (config
// order) then tool name. It waits, at most until ctx is done, for each
// server's first connect attempt. A server that is down keeps its last
// known tools, so that a call to one fails with a retryable UNAVAILABLE
// instead of looking like a missing tool; a server never reached has none
// (CheckServer and Health say why). Tools hidden by allow/deny lists are
// left out. Destructive tools stay listed (their annotations say so)
// because mcp-go servers mark every tool destructiveHint=true unless told
// otherwise, as the MCP default says; Call refuses them unless allowed.
// The slice is shared until the catalog changes: callers must not modify
// it.
func (p *Pool) Tools(ctx context.Context) ([]catalog.Tool, error) {
	if p.isClosed() {
		return nil, fault.Wrap(fault.Unavailable, errPoolClosed, "")
	}
	var stack [4]*toolSet
	sets := stack[:0]
	for _, s := range p.order {
		select {
		case <-s.firstDone:
		case <-ctx.Done():
		}
		if c := s.conn.Load(); c != nil {
			s.maybeRefresh(c)
		} else {
			s.kick()
		}
		sets = append(sets, s.cat.Load())
	}
	if m := p.merged.Load(); m != nil && slices.Equal(m.from, sets) {
		return m.tools, nil
	}
	m := &mergedTools{from: slices.Clone(sets)}
	for _, ts := range sets {
		if ts != nil {
			m.tools = append(m.tools, ts.visible...)
		}
	}
	p.merged.Store(m)
	return m.tools, nil
}

// mergedTools is the list Tools last answered and the servers' lists it
// joins. Tools hands out the same slice until one of them changes, so
// that a caller (the bridge, on every execution) can tell an unchanged
// catalog by its identity; nobody may modify it.
type mergedTools struct {
	from  []*toolSet
	tools []catalog.Tool
}

// Health reports every server, in config order.
func (p *Pool) Health() []ServerHealth {
	out := make([]ServerHealth, 0, len(p.order))
	for _, s := range p.order {
		h := s.health()
		h.LastError = p.red.String(h.LastError)
		out = append(out, h)
	}
	return out
}

// Stats returns the protocol counters.
func (p *Pool) Stats() Stats {
	return Stats{
		Initializes: p.initializes.Load(),
		ToolLists:   p.toolLists.Load(),
		Calls:       p.calls.Load(),
		Reconnects:  p.reconnects.Load(),
	}
}

// Close stops background work, closes every connection (ending streamable
// HTTP sessions politely, within a short bound) and waits for the pool's
// goroutines. Calls in flight fail with UNAVAILABLE.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()
	var wg sync.WaitGroup
	for _, s := range p.order {
		if c := s.conn.Swap(nil); c != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.close(errPoolClosed)
			}()
		}
	}
	wg.Wait()
	for _, s := range p.order {
		s.httpTransport.CloseIdleConnections()
	}
	return nil
}

// newHTTPTransport gives each server its own connection pool, so that
// Close can drop its idle connections and one server's connections never
// queue behind another's.
func newHTTPTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	// Parallel calls from one execution would otherwise churn connections
	// beyond the default 2 idle per host.
	t.MaxIdleConnsPerHost = 64
	return t
}

// Redactor knows the secrets of the pool's configurations (header values,
// credentials in URLs): whatever else must not hold them (the learning
// loop's literals) asks it.
func (p *Pool) Redactor() *redact.Redactor { return p.red }

// Servers returns the configured server names, in config order. Every
// mcp.<name>.* of these names is the pool's, whether or not the server can
// be reached: no other tool source may serve it.
func (p *Pool) Servers() []string {
	out := make([]string, len(p.order))
	for i, s := range p.order {
		out[i] = s.cfg.Name
	}
	return out
}

// CheckServer reports whether server can serve calls now, without waiting:
// nil when it is connected (so a tool it does not list is missing), a
// retryable UNAVAILABLE *fault.Error when it is configured but down or was
// never reached (a tool it does not list may exist), TOOL_NOT_FOUND when no
// server has that name. Messages are scrubbed like Call's.
func (p *Pool) CheckServer(server string) error {
	s := p.servers[server]
	switch {
	case s == nil:
		return fault.New(fault.ToolNotFound, "no MCP server named %q", server)
	case p.isClosed():
		return fault.Wrap(fault.Unavailable, errPoolClosed, "")
	case s.conn.Load() != nil:
		return nil
	}
	fe := s.unavailable("", nil)
	fe.Message = p.red.String(fe.Message)
	return fe
}
