package mcp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/pml-sandbox/pml/internal/argcheck"
	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/redact"
	"github.com/pml-sandbox/pml/internal/secretref"
	"github.com/pml-sandbox/pml/internal/toolsource"
	"github.com/pml-sandbox/pml/internal/trace"
	"github.com/pml-sandbox/pml/internal/tracectx"
)

var (
	errConnLost       = errors.New("connection lost")
	errConnectTimeout = errors.New("connect timed out")
	errReplaced       = errors.New("connection replaced")
	// errClosed ends the connections of a Set that is closing.
	errClosed = errors.New("MCP server closed")
)

// maxToolPages bounds tools/list pagination against a server that never
// stops handing out cursors.
const maxToolPages = 100

// probeTimeout bounds the ping that decides whether a failed call means the
// server is gone.
const probeTimeout = 5 * time.Second

// remote is one configured MCP server and its current connection: the
// kind's toolsource.Server.
type remote struct {
	k             *Kind
	h             *toolsource.Handle
	cfg           Config
	log           *slog.Logger
	httpTransport *http.Transport
	httpClient    *http.Client
	// headers are the configured headers, resolved (secretref).
	headers *secretref.Headers
	// authSetupErr says why the server's OAuth transport could not be
	// built (setupAuth).
	authSetupErr error

	// conn is read on every call without locking; it is replaced under
	// mu.
	conn atomic.Pointer[conn]
	// nextRefresh is when (unix ns) the catalog is next due for refresh.
	nextRefresh atomic.Int64

	mu           sync.Mutex // guards the fields below; never held over I/O
	kind         string     // the transport that last worked (for auto)
	refreshing   bool
	refreshAgain bool

	// imu guards inflight: the tools of the calls in flight, by count,
	// kept only with an answerer (elicit.go).
	imu      sync.Mutex
	inflight map[string]int
}

func newRemote(k *Kind, cfg Config, h *toolsource.Handle) *remote {
	ht := newHTTPTransport()
	s := &remote{k: k, h: h, cfg: cfg, log: h.Logger(), httpTransport: ht}
	// Resolved values are known to the redactors before any request can
	// go out, so before any error or log line can quote them.
	s.headers = secretref.NewHeaders(h.Env().Refs, cfg.Headers, func(_, v string) { h.Learn(secretref.HeaderSecrets(v)...) })
	s.httpClient = &http.Client{Transport: s.headers.Transport(&capTransport{base: ht, limit: k.maxMessageBytes(), red: h.Scrubber()})}
	return s
}

// requestHeaders is what every HTTP request to the server carries: its
// configured headers as last resolved (a rotated secret's new value as
// soon as it is read), and the call's trace context (traceparent; on
// 2026-07-28 it is in the request's _meta too: callParams), so that a
// server that traces joins the trace.
func (s *remote) requestHeaders(ctx context.Context) map[string]string {
	h, tc := s.headers.Current(), tracectx.Headers(ctx)
	if key, _ := ctx.Value(idempotencyKeyContext{}).(string); key != "" {
		// An effect's key, which no configured header may stand in for.
		out := make(map[string]string, len(h)+len(tc)+1)
		for k, v := range h {
			if !strings.EqualFold(k, "Idempotency-Key") {
				out[k] = v
			}
		}
		maps.Copy(out, tc)
		out["Idempotency-Key"] = key
		return out
	}
	if len(tc) == 0 {
		return h
	}
	if len(h) == 0 {
		return tc
	}
	out := make(map[string]string, len(h)+len(tc))
	maps.Copy(out, h)
	maps.Copy(out, tc)
	return out
}

// spawnOrRun runs f in the background, or right here when the Set is
// closing.
func (s *remote) spawnOrRun(f func()) {
	if !s.h.Spawn(f) {
		f()
	}
}

// conn is one live MCP session.
type conn struct {
	s      *remote
	kind   string
	client *client.Client
	tr     transport.Interface
	// ctx ends when the connection is lost or closed; its cause says why.
	// Calls in flight are tied to it so that they fail at once.
	ctx      context.Context
	cancel   context.CancelCauseFunc
	protocol string
	// modern: the connection speaks 2026-07-28 (stateless: every request
	// carries its own metadata, and there is no session to lose).
	modern bool
	// listChanged: the server announces tool list changes.
	listChanged bool

	nextID atomic.Uint64
	// idPrefix makes this connection's request ids its own: a call sent
	// again after a question, from another process, must not reuse the
	// id the first one had (SEP-2322).
	idPrefix string
	// sessionGen counts re-initialisations, so that concurrent calls that
	// all saw the same expired session re-initialise it only once.
	sessionGen atomic.Uint64
	// reinitMu is held for writing while Initialize runs again on this
	// client (it rewrites the client's handshake state) and for reading by
	// the other mcp-go client methods we use (Ping, Discover). A 2026-07-28
	// connection has no session, so it is never re-initialised.
	reinitMu  sync.RWMutex
	probing   atomic.Bool
	closeOnce sync.Once
}

func (c *conn) close(cause error) {
	c.closeOnce.Do(func() {
		c.cancel(cause)
		if err := c.client.Close(); err != nil {
			c.s.log.Debug("closing MCP client", "err", err)
		}
	})
}

// rpcError is a JSON-RPC error answer.
type rpcError struct {
	Code    int
	Message string
	Data    json.RawMessage
}

// supported is the versions an UNSUPPORTED_PROTOCOL_VERSION error names.
func (e *rpcError) supported() []string {
	var d struct {
		Supported []string `json:"supported"`
	}
	_ = json.Unmarshal(e.Data, &d)
	return d.Supported
}

func (e *rpcError) Error() string { return fmt.Sprintf("JSON-RPC error %d: %s", e.Code, e.Message) }

// protocolError is an answer that breaks the protocol (wrong id, a result
// of the wrong shape).
type protocolError struct{ msg string }

func (e *protocolError) Error() string { return "protocol error: " + e.msg }

// send makes one request straight through the transport rather than through
// mcp-go's typed client methods: those decode tool schemas into a struct
// that drops keywords (anyOf, $defs at some levels, $schema...) we must
// validate with, and results into typed content we would only re-encode.
// Our ids are strings ("pml-N"), a space apart from the client's integer
// ids, so the two never collide in the SSE transport's response table.
// On 2026-07-28 it adds the request metadata and headers (modern.go);
// tool, when not nil, is the called tool's definition for its Mcp-Param-*
// headers.
func (c *conn) send(ctx context.Context, method string, params any, tool *mcpgo.Tool) (json.RawMessage, error) {
	id := mcpgo.NewRequestId("pml-" + c.idPrefix + strconv.FormatUint(c.nextID.Add(1), 10))
	var header http.Header
	if c.modern {
		p, err := withMeta(params, c.protocol)
		if err != nil {
			return nil, fmt.Errorf("request params: %w", err)
		}
		params, header = p, modernHeaders(c.protocol, method, p, tool)
	}
	resp, err := c.tr.SendRequest(ctx, transport.JSONRPCRequest{
		JSONRPC: mcpgo.JSONRPC_VERSION,
		ID:      id,
		Method:  method,
		Params:  params,
		Header:  header,
	})
	if err != nil {
		return nil, err
	}
	if resp == nil {
		return nil, &protocolError{msg: "empty response"}
	}
	if resp.Error != nil && (resp.ID.IsNil() || resp.ID.String() == id.String()) {
		data, _ := json.Marshal(resp.Error.Data)
		return nil, &rpcError{Code: resp.Error.Code, Message: resp.Error.Message, Data: data}
	}
	// Streamable HTTP pairs answers with requests by HTTP exchange and
	// mcp-go does not check the id; we do.
	if resp.ID.String() != id.String() {
		return nil, &protocolError{msg: fmt.Sprintf("response id %s does not match request id %s", resp.ID.String(), id.String())}
	}
	return resp.Result, nil
}

// initRequest leaves the protocol version to the client (see dial): the
// newest it speaks, 2026-07-28 through server/discover, else the newest
// with the handshake. It declares form-mode elicitation where the client
// answers in line (an answerer, over streamable HTTP: elicit.go), and no
// other capability.
func (s *remote) initRequest(c *conn) mcpgo.InitializeRequest {
	var r mcpgo.InitializeRequest
	r.Params.ClientInfo = clientInfo
	if s.answersInLine(c) {
		r.Params.Capabilities.Elicitation = &mcpgo.ElicitationCapability{Form: &struct{}{}}
	}
	return r
}

// answersInLine reports whether c's server requests reach the answerer.
func (s *remote) answersInLine(c *conn) bool {
	return s.k.Answerer != nil && c.kind != TransportSSE
}

// Describe implements toolsource.Describer: the URL without its
// credentials, the transport that last worked ("" before any did), and
// the revision the live connection agreed.
func (s *remote) Describe(h *toolsource.Health) {
	h.URL = redact.URL(s.cfg.URL)
	s.mu.Lock()
	h.Transport = s.kind
	s.mu.Unlock()
	if c := s.conn.Load(); c != nil {
		h.ProtocolVersion = c.protocol
	}
}

// Freshen implements toolsource.Freshener: a catalog past its TTL is
// refreshed in the background.
func (s *remote) Freshen() {
	if c := s.conn.Load(); c != nil {
		s.maybeRefresh(c)
	}
}

// Close implements toolsource.Server: it closes the connection (ending a
// streamable HTTP session politely, within a short bound) and drops the
// server's idle HTTP connections. Calls in flight fail with UNAVAILABLE.
func (s *remote) Close() error {
	if c := s.conn.Swap(nil); c != nil {
		c.close(errClosed)
	}
	s.httpTransport.CloseIdleConnections()
	return nil
}

func (s *remote) transportOrder() []string {
	switch s.cfg.transport() {
	case TransportSSE:
		return []string{TransportSSE}
	case TransportStreamable:
		return []string{TransportStreamable}
	}
	s.mu.Lock()
	kind := s.kind
	s.mu.Unlock()
	if kind == TransportSSE {
		return []string{TransportSSE, TransportStreamable}
	}
	return []string{TransportStreamable, TransportSSE}
}

// Load implements toolsource.Server: one connect attempt over each
// candidate transport in turn, which makes the connection it opens the
// live one. An authorization failure is permanent: retrying will not log
// anyone in, and the next call or Tools tries again (after a login, say).
func (s *remote) Load(ctx context.Context) ([]toolsource.Tool, error) {
	if s.authSetupErr != nil {
		return nil, fmt.Errorf("auth: %w", s.authSetupErr)
	}
	// Resolved again on each connect: a rotated ${env:} or ${file:} is
	// picked up on reconnect (a Secrets Manager secret when it expires, or
	// when the server refuses it).
	if _, err := s.headers.Resolve(ctx); err != nil {
		return nil, err
	}
	var errs []error
	for _, kind := range s.transportOrder() {
		start := time.Now()
		c, list, err := s.dial(ctx, kind)
		if err == nil {
			return s.install(c, list, time.Since(start))
		}
		if ctx.Err() != nil || s.h.Context().Err() != nil {
			return nil, err
		}
		if ae := authError(err); ae != nil {
			// The other transport would meet the same authorization
			// server; say what to do, without the transport's wrapping.
			return nil, toolsource.Permanent(ae)
		}
		errs = append(errs, fmt.Errorf("%s: %w", kind, err))
	}
	return nil, errors.Join(errs...)
}

// connectTimeout bounds one connect attempt: the server's own, or the
// kind's.
func (s *remote) connectTimeout() time.Duration {
	if s.cfg.ConnectTimeout > 0 {
		return s.cfg.ConnectTimeout
	}
	return s.k.connectTimeout()
}

// dial opens a connection, initialises it and lists its tools. Over
// streamable HTTP it first probes for 2026-07-28 (discover); a server that
// does not speak it gets a fresh transport and the initialize handshake.
func (s *remote) dial(attempt context.Context, kind string) (_ *conn, _ *toolList, err error) {
	// The connection lives as long as the Set; the attempt's context only
	// bounds the connecting.
	ctx, cancel := context.WithCancelCause(s.h.Context())
	c := &conn{s: s, kind: kind, ctx: ctx, cancel: cancel, idPrefix: rand.Text()[:8] + "-"}
	stop := context.AfterFunc(attempt, func() { cancel(context.Cause(attempt)) })
	defer stop()
	// The SSE stream and the GET listener live on ctx, so the connect
	// deadline cancels ctx from a timer instead of being a deadline on it.
	timer := time.AfterFunc(s.connectTimeout(), func() { cancel(errConnectTimeout) })
	defer func() {
		if err != nil {
			timer.Stop()
			if ctx.Err() != nil {
				err = fmt.Errorf("%w (%w)", context.Cause(ctx), err)
			}
			c.close(err)
		}
	}()
	if kind != TransportSSE {
		if err := s.open(c, false); err != nil {
			return nil, nil, err
		}
		res, derr := s.discover(ctx, c)
		s.k.initializes.Add(1)
		switch {
		case derr == nil:
			c.listChanged = res.Capabilities.Tools != nil && res.Capabilities.Tools.ListChanged
		case ctx.Err() != nil || authError(derr) != nil:
			return nil, nil, fmt.Errorf("server/discover: %w", derr)
		default:
			s.log.Debug("mcp server does not speak 2026-07-28; initializing", "err", derr)
			// The probe may have set the transport up for 2026-07-28
			// (a server that answers anything to anything): start over.
			_ = c.client.Close()
		}
	}
	if !c.modern {
		if err := s.open(c, true); err != nil {
			return nil, nil, err
		}
		res, err := c.client.Initialize(ctx, s.initRequest(c))
		s.k.initializes.Add(1)
		if err != nil {
			return nil, nil, fmt.Errorf("initialize: %w", err)
		}
		c.protocol = res.ProtocolVersion
	}
	tools, err := s.listTools(ctx, c)
	if err != nil {
		return nil, nil, fmt.Errorf("tools/list: %w", err)
	}
	if !timer.Stop() {
		return nil, nil, errConnectTimeout
	}
	return c, tools, nil
}

// open gives c a started transport and client of its kind: for 2026-07-28
// (legacy false) a streamable HTTP transport without the GET stream; for
// the handshake, one pinned to ProtocolVersion, with the GET stream on
// streamable HTTP.
func (s *remote) open(c *conn, legacy bool) error {
	switch c.kind {
	case TransportSSE:
		t, err := transport.NewSSE(s.cfg.URL,
			transport.WithHeaderFunc(s.requestHeaders),
			transport.WithHTTPClient(s.httpClient),
			transport.WithSSELogger(transportLogger(s.log)),
			transport.WithEndpointTimeout(s.connectTimeout()))
		if err != nil {
			return err
		}
		// mcp-go leaves requests waiting on a dead SSE stream until their
		// own timeout; this is how they learn at once.
		t.SetConnectionLostHandler(func(err error) {
			s.connLost(c, fmt.Errorf("SSE stream ended: %w", err))
		})
		c.tr = t
	default:
		topts := []transport.StreamableHTTPCOption{
			transport.WithHTTPHeaderFunc(s.requestHeaders),
			transport.WithHTTPBasicClient(s.httpClient),
			transport.WithHTTPLogger(transportLogger(s.log)),
		}
		if legacy {
			// The standalone GET stream is where list_changed arrives
			// between calls on 2025-11-25 (2026-07-28 has
			// subscriptions/listen instead: listen).
			//lint:ignore SA1019 deprecated for 2026-07-28, which this transport does not speak
			topts = append(topts, transport.WithContinuousListening())
		}
		t, err := transport.NewStreamableHTTP(s.cfg.URL, topts...)
		if err != nil {
			return err
		}
		c.tr = t
	}
	var copts []client.ClientOption
	if legacy {
		copts = append(copts, client.WithProtocolVersion(ProtocolVersion))
		if s.answersInLine(c) {
			copts = append(copts, client.WithElicitationHandler(elicitHandler{s}))
		}
	}
	c.client = client.NewClient(c.tr, copts...)
	c.client.OnNotification(func(n mcpgo.JSONRPCNotification) {
		if n.Method == string(mcpgo.MethodNotificationToolsListChanged) {
			s.scheduleRefresh(c)
		}
	})
	if err := c.client.Start(c.ctx); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	return nil
}

// install makes c the live connection and returns its catalog.
func (s *remote) install(c *conn, list *toolList, took time.Duration) ([]toolsource.Tool, error) {
	tools := s.catalog(c, list.tools)
	s.mu.Lock()
	if s.h.Context().Err() != nil {
		s.mu.Unlock()
		c.close(errClosed)
		return nil, errClosed
	}
	old := s.conn.Swap(c)
	s.nextRefresh.Store(time.Now().Add(s.listTTL(list.ttlMs)).UnixNano())
	if s.h.Reloading() {
		s.k.reconnects.Add(1)
	}
	s.kind = c.kind
	s.mu.Unlock()
	if old != nil {
		s.spawnOrRun(func() { old.close(errReplaced) })
	}
	if c.modern && c.listChanged {
		s.h.Spawn(func() { s.listen(c) })
	}
	s.log.Info("mcp server connected", "transport", c.kind, "protocol", c.protocol,
		"tools", len(tools), "took", took)
	return tools, nil
}

// connLost retires c if it is still the live connection: calls in flight on
// it fail now, new calls fail fast, and the Set loads the server again.
func (s *remote) connLost(c *conn, err error) {
	if s.h.Context().Err() != nil {
		// The Set is closing, which is what ended the stream: nothing is
		// lost, and nothing may be logged once Close has returned (this
		// runs on mcp-go's reader goroutine, which Close cannot wait for).
		return
	}
	s.mu.Lock()
	if s.conn.Load() != c {
		s.mu.Unlock()
		return
	}
	s.conn.Store(nil)
	c.cancel(fmt.Errorf("%w: %w", errConnLost, err))
	// Under mu, so that no refresh of c can report after it.
	s.h.Lost(err)
	s.mu.Unlock()
	s.log.Warn("mcp connection lost", "transport", c.kind, "err", err)
	s.spawnOrRun(func() { c.close(errConnLost) })
}

// probe pings c after a call failed in the transport: if the server does
// not answer, the connection is retired and the reconnect loop takes over.
// Deciding by ping rather than by the failed call's error text keeps a
// server that merely sent garbage from being reconnected over and over.
func (s *remote) probe(c *conn) {
	if !c.probing.CompareAndSwap(false, true) {
		return
	}
	ok := s.h.Spawn(func() {
		defer c.probing.Store(false)
		ctx, cancel := context.WithTimeout(c.ctx, min(probeTimeout, s.connectTimeout()))
		defer cancel()
		gen := c.sessionGen.Load()
		c.reinitMu.RLock()
		err := c.alive(ctx)
		c.reinitMu.RUnlock()
		if errors.Is(err, transport.ErrSessionTerminated) && !c.modern {
			// The server is there but forgot us: a new session will do.
			if err = s.reinit(ctx, c, gen); err == nil {
				return
			}
		}
		if err != nil {
			s.connLost(c, fmt.Errorf("ping failed: %w", err))
		}
	})
	if !ok {
		c.probing.Store(false)
	}
}

// reinit re-initialises c's session after the server forgot it (HTTP 404 on
// streamable HTTP), unless another call already did since gen.
func (s *remote) reinit(ctx context.Context, c *conn, gen uint64) error {
	c.reinitMu.Lock()
	defer c.reinitMu.Unlock()
	if c.sessionGen.Load() != gen {
		return nil
	}
	ictx, cancel := context.WithTimeout(ctx, s.connectTimeout())
	defer cancel()
	_, err := c.client.Initialize(ictx, s.initRequest(c))
	s.k.initializes.Add(1)
	if err != nil {
		return err
	}
	c.sessionGen.Add(1)
	s.log.Info("mcp session expired; re-initialised")
	// A server that lost our session may have restarted with other tools.
	s.scheduleRefresh(c)
	return nil
}

// maybeRefresh starts a background refresh when the catalog is past its TTL.
func (s *remote) maybeRefresh(c *conn) {
	if time.Now().UnixNano() > s.nextRefresh.Load() {
		s.scheduleRefresh(c)
	}
}

// scheduleRefresh refreshes the catalog in the background, one refresh at
// a time per server; a request during a refresh runs one more after it.
func (s *remote) scheduleRefresh(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refreshing {
		s.refreshAgain = true
		return
	}
	// Push the due time so that calls during the refresh do not queue more.
	s.nextRefresh.Store(time.Now().Add(s.k.refreshTTL()).UnixNano())
	if s.h.Spawn(func() { s.refreshLoop(c) }) {
		s.refreshing = true
	}
}

func (s *remote) refreshLoop(c *conn) {
	for {
		s.refresh(c)
		s.mu.Lock()
		if !s.refreshAgain || s.conn.Load() != c {
			s.refreshing, s.refreshAgain = false, false
			s.mu.Unlock()
			return
		}
		s.refreshAgain = false
		s.mu.Unlock()
	}
}

func (s *remote) refresh(c *conn) {
	ctx, cancel := context.WithTimeout(c.ctx, s.connectTimeout())
	list, err := s.listTools(ctx, c)
	cancel()
	var tools []toolsource.Tool
	if err == nil {
		tools = s.catalog(c, list.tools)
	}
	s.mu.Lock()
	if s.conn.Load() != c {
		s.mu.Unlock()
		return
	}
	if err != nil {
		// Keep serving the old catalog, and try again sooner than a TTL.
		s.nextRefresh.Store(time.Now().Add(min(s.k.refreshTTL(), 30*time.Second)).UnixNano())
		s.h.Degraded(fmt.Errorf("tools/list: %w", err))
		s.mu.Unlock()
		s.probe(c)
		return
	}
	s.nextRefresh.Store(time.Now().Add(s.listTTL(list.ttlMs)).UnixNano())
	// Under mu, so that it cannot land after c is lost.
	s.h.Update(tools)
	s.mu.Unlock()
	s.log.Info("mcp tools refreshed", "tools", len(tools))
}

// wireTool is a tool as tools/list sends it, schemas kept verbatim.
type wireTool struct {
	Name         string          `json:"name"`
	Title        string          `json:"title"`
	Description  string          `json:"description"`
	InputSchema  json.RawMessage `json:"inputSchema"`
	OutputSchema json.RawMessage `json:"outputSchema"`
	Annotations  *struct {
		Title string `json:"title"`
		catalog.Annotations
	} `json:"annotations"`
}

// toolList is a server's whole tools/list answer.
type toolList struct {
	tools []wireTool
	// ttlMs is the server's caching hint (2026-07-28), from the last page.
	ttlMs *int64
}

// listTools follows nextCursor through every page.
func (s *remote) listTools(ctx context.Context, c *conn) (*toolList, error) {
	type params struct {
		Cursor string `json:"cursor,omitempty"`
	}
	var all []wireTool
	seen := map[string]bool{}
	cursor := ""
	for page := 0; ; page++ {
		if page == maxToolPages {
			return nil, fmt.Errorf("more than %d pages of tools", maxToolPages)
		}
		var p any
		if cursor != "" {
			p = params{Cursor: cursor}
		}
		raw, err := c.send(ctx, string(mcpgo.MethodToolsList), p, nil)
		s.k.toolLists.Add(1)
		if err != nil {
			return nil, err
		}
		var res struct {
			Tools      []wireTool `json:"tools"`
			NextCursor string     `json:"nextCursor"`
			TTLMs      *int64     `json:"ttlMs"`
		}
		if err := json.Unmarshal(raw, &res); err != nil {
			return nil, &protocolError{msg: "tools/list result: " + err.Error()}
		}
		all = append(all, res.Tools...)
		if res.NextCursor == "" {
			return &toolList{tools: all, ttlMs: res.TTLMs}, nil
		}
		if seen[res.NextCursor] {
			return nil, &protocolError{msg: fmt.Sprintf("tools/list cursor %q repeats", res.NextCursor)}
		}
		seen[res.NextCursor] = true
		cursor = res.NextCursor
	}
}

// catalog turns a tools/list answer into the server's tools. The Set
// checks names, schema bounds and the allow and deny lists; what is the
// protocol's is done here: secrets masked out of what a server says about
// its tools, annotations read, header bindings checked.
func (s *remote) catalog(c *conn, tools []wireTool) []toolsource.Tool {
	red := s.h.Redactor()
	out := make([]toolsource.Tool, 0, len(tools))
	for _, w := range tools {
		// A server that puts what it was sent into its descriptions must
		// not hand the secrets to scripts that way either.
		t := catalog.Tool{
			Name:         w.Name,
			Title:        red.String(w.Title),
			Description:  red.String(w.Description),
			InputSchema:  red.JSON(compactSchema(w.InputSchema)),
			OutputSchema: red.JSON(compactSchema(w.OutputSchema)),
			Kind:         trace.KindMCP,
		}
		var ht *mcpgo.Tool
		// A schema past the bounds is the Set's to drop; one within them
		// may bind headers.
		if len(t.InputSchema) > 0 && argcheck.CheckBounds(t.InputSchema) == nil {
			ht = headerTool(w.Name, t.InputSchema)
		}
		if ht != nil && c.modern {
			// SEP-2243: a client on streamable HTTP leaves out a tool
			// whose header bindings break the rules, so that one bad
			// definition does not stop the others.
			if err := mcpgo.ValidateParamHeaderAnnotations(ht); err != nil {
				s.h.Drop(w.Name, "invalid x-mcp-header: "+err.Error())
				continue
			}
		}
		if w.Annotations != nil {
			t.Annotations = w.Annotations.Annotations
			if t.Title == "" {
				t.Title = red.String(w.Annotations.Title)
			}
		}
		if a := &t.Annotations; s.cfg.AssumeNotDestructive && a.Destructive == nil && (a.ReadOnly == nil || !*a.ReadOnly) {
			// The deployment's word for what the server leaves out (MCP's
			// default would make the tool destructive); shown as a hint.
			a.Destructive = new(bool)
		}
		out = append(out, toolsource.Tool{Tool: t, Ref: ht})
	}
	return out
}

// compactSchema returns nil for an absent or null schema, else the schema
// without insignificant whitespace.
func compactSchema(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return raw
	}
	return b.Bytes()
}
