// Package mcp is the tool-source kind of remote MCP servers ("type":
// "mcp", the default): one client per configured server for the life of
// a (warm) process, which connects in the background, discovers tools
// once and refreshes them on notifications/tools/list_changed or a TTL,
// re-initialises expired sessions, probes a server whose call failed in
// the transport, and serves time-bounded, size-bounded tool calls whose
// results are normalised to JSON values a script can use. What every
// kind shares (the lifecycle and its reconnect schedule, the checks
// before a call, health, redaction) is internal/toolsource's: a server
// here is only the protocol.
//
// Protocol: over streamable HTTP a server speaks MCP 2026-07-28
// (ModernProtocolVersion) where the server does: mcp-go's client probes
// with server/discover and falls back to the initialize handshake of
// 2025-11-25 (ProtocolVersion) when the server does not answer it. On
// 2026-07-28 every request carries its metadata and headers (modern.go),
// tools/list's ttlMs sets when the catalog is refreshed, list changes
// arrive on subscriptions/listen, and a question comes back as
// input_required (an *execution.Question); on 2025-11-25 list changes
// arrive on the session's GET stream, an expired session is
// re-initialised, and a question is answered in line when the Kind has an
// Answerer (elicit.go). The HTTP+SSE transport is pinned to 2025-11-25. A
// server may answer with an older revision (2024-11-05 and later); Health
// reports what was agreed. Every message a server sends is capped
// (httpcap.go), every request carries the call's trace context, and
// OAuth is internal/oauthclient's (auth.go).
//
// Concurrency: each server has its own small mutex guarding its state,
// never held over I/O; the live connection is read lock-free, so a slow
// or dead server never blocks calls to the others.
//
// The package's name is the protocol's; mark3labs' package is imported
// as mcpgo.
package mcp

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"gopkg.in/yaml.v3"

	"github.com/pml-sandbox/pml/internal/elicit"
	"github.com/pml-sandbox/pml/internal/toolsource"
)

// Type is the server list's "type" of this kind.
const Type = "mcp"

// ProtocolVersion is the MCP revision asked for with the initialize
// handshake, from a server that does not speak ModernProtocolVersion. See
// the package doc.
const ProtocolVersion = mcpgo.ProtocolVersion20251125

// Defaults of the Kind's options.
const (
	DefaultRefreshTTL      = 5 * time.Minute
	DefaultConnectTimeout  = 10 * time.Second
	DefaultMaxMessageBytes = 16 << 20
	DefaultMaxResultBytes  = 1 << 20
)

// clientInfo is how the client introduces itself in initialize.
var clientInfo = mcpgo.Implementation{Name: "pml-sandbox", Version: "0.1.0"}

// Kind is the kind of MCP servers. Its fields are the options every one
// of its servers shares; the zero value takes the defaults. It counts the
// protocol traffic of all its servers (Stats), so it is used by pointer.
type Kind struct {
	// RefreshTTL is how old a catalog may get before it is refreshed in
	// the background (DefaultRefreshTTL when zero). The refresh is lazy,
	// on the next Tools or Call, because a frozen Lambda has no use for a
	// timer.
	RefreshTTL time.Duration
	// ConnectTimeout bounds one connect attempt: stream setup, the
	// handshake and the full tools/list (DefaultConnectTimeout when zero;
	// a server's connect_timeout wins).
	ConnectTimeout time.Duration
	// MaxMessageBytes caps any one message a server sends
	// (DefaultMaxMessageBytes when zero): a larger one fails its call with
	// LIMIT_EXCEEDED before it is buffered.
	MaxMessageBytes int64
	// MaxResultBytes caps a normalised result (DefaultMaxResultBytes when
	// zero).
	MaxResultBytes int
	// Answerer, when set, answers a 2025-11-25 server's elicitation/create
	// in line: the client then declares form-mode elicitation in its
	// initialize handshake over streamable HTTP (the HTTP+SSE transport
	// carries no server requests in mcp-go, so nothing is declared
	// there). Without one nothing is declared, and such a server does not
	// ask. Only a front end whose caller is the person at the keyboard
	// sets it (pml run).
	Answerer elicit.Answerer

	initializes, toolLists, calls, reconnects atomic.Int64
}

// Stats counts the protocol traffic of a Kind's servers. A warm execution
// that reuses discovery leaves Initializes and ToolLists unchanged.
type Stats struct {
	Initializes int64 `json:"initializes"`
	// ToolLists counts tools/list requests (one per page).
	ToolLists  int64 `json:"tool_lists"`
	Calls      int64 `json:"calls"`
	Reconnects int64 `json:"reconnects"`
}

// Stats returns the protocol counters.
func (k *Kind) Stats() Stats {
	return Stats{
		Initializes: k.initializes.Load(),
		ToolLists:   k.toolLists.Load(),
		Calls:       k.calls.Load(),
		Reconnects:  k.reconnects.Load(),
	}
}

// Info implements toolsource.Kind. MCP servers are not eager: they
// connect in the background, and the first Tools or Call waits for the
// first attempt.
func (k *Kind) Info() toolsource.KindInfo {
	return toolsource.KindInfo{Type: Type, Noun: "MCP server"}
}

// Decode implements toolsource.Kind.
func (k *Kind) Decode(n *yaml.Node) (toolsource.Spec, error) { return decode(n) }

// Open implements toolsource.Kind.
func (k *Kind) Open(_ context.Context, spec toolsource.Spec, h *toolsource.Handle) (toolsource.Server, error) {
	c, ok := spec.(Config)
	if !ok {
		return nil, fmt.Errorf("not an MCP server's configuration: %T", spec)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	// Before any request can go out, so before any error or log line can
	// quote them.
	h.Learn(c.secrets()...)
	s := newRemote(k, c, h)
	s.setupAuth()
	return s, nil
}

// NewSet opens a toolsource.Set of MCP servers only (what tests and tools
// that need no other kind use; the service registers the kind beside the
// others).
func (k *Kind) NewSet(ctx context.Context, env toolsource.Env, cfgs ...Config) (*toolsource.Set, error) {
	specs := make([]toolsource.Spec, len(cfgs))
	for i, c := range cfgs {
		specs[i] = c
	}
	return toolsource.New(ctx, toolsource.NewRegistry(k), specs, env)
}

func (k *Kind) refreshTTL() time.Duration {
	if k.RefreshTTL > 0 {
		return k.RefreshTTL
	}
	return DefaultRefreshTTL
}

func (k *Kind) connectTimeout() time.Duration {
	if k.ConnectTimeout > 0 {
		return k.ConnectTimeout
	}
	return DefaultConnectTimeout
}

func (k *Kind) maxMessageBytes() int64 {
	if k.MaxMessageBytes > 0 {
		return k.MaxMessageBytes
	}
	return DefaultMaxMessageBytes
}

func (k *Kind) maxResultBytes() int {
	if k.MaxResultBytes > 0 {
		return k.MaxResultBytes
	}
	return DefaultMaxResultBytes
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

var _ toolsource.Kind = (*Kind)(nil)
