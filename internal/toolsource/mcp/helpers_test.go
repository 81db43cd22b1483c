package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"go.uber.org/goleak"
	"gopkg.in/yaml.v3"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/elicit"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/oauthclient"
	"github.com/pml-sandbox/pml/internal/secretref"
	"github.com/pml-sandbox/pml/internal/toolsource"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testLogger discards logs unless MCPCLIENT_TEST_LOG is set: background
// goroutines may log after a test ends, which t.Log does not allow.
func testLogger() *slog.Logger {
	if os.Getenv("MCPCLIENT_TEST_LOG") != "" {
		return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewJSONHandler(io.Discard, nil))
}

// srvOpts shapes a test MCP server.
type srvOpts struct {
	pageSize int  // tools/list page size (0: one page)
	stateful bool // streamable: forget sessions on restart (404)
	legacy   bool // streamable: speak 2025-11-25 and older only, not 2026-07-28
}

// testServer is a real mcp-go server on 127.0.0.1 that can be killed and
// restarted on the same port.
type testServer struct {
	t    testing.TB
	kind string // TransportSSE or TransportStreamable
	opts srvOpts
	addr string

	mu   sync.Mutex
	hs   *http.Server
	mcp  *server.MCPServer
	sse  *server.SSEServer
	sh   *server.StreamableHTTPServer
	quit chan struct{} // closed when this incarnation stops
	done chan struct{} // closed when Serve has returned
	// headers records the Authorization header of every request.
	authSeen []string
	// slowStarted receives a value each time the slow tool starts, so a
	// test can act while a call is certainly in flight.
	slowStarted chan struct{}
	// streamOpen receives a value each time an event stream for
	// notifications sends its first bytes (the GET stream of 2025-11-25,
	// subscriptions/listen on 2026-07-28): the server has registered it by
	// then, so a notification sent afterwards reaches the client.
	streamOpen chan struct{}
}

func newTestServer(t testing.TB, kind string, opts srvOpts) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{t: t, kind: kind, opts: opts, addr: ln.Addr().String(),
		slowStarted: make(chan struct{}, 64), streamOpen: make(chan struct{}, 64)}
	ts.serve(ln)
	t.Cleanup(ts.stop)
	return ts
}

func (ts *testServer) URL() string {
	if ts.kind == TransportSSE {
		return "http://" + ts.addr + "/sse"
	}
	return "http://" + ts.addr + "/mcp"
}

func (ts *testServer) serve(ln net.Listener) {
	sopts := []server.ServerOption{server.WithToolCapabilities(true)}
	if ts.opts.pageSize > 0 {
		sopts = append(sopts, server.WithPaginationLimit(ts.opts.pageSize))
	}
	m := server.NewMCPServer("test", "1.0", sopts...)
	quit := make(chan struct{})
	addTestTools(m, quit, ts.slowStarted)
	var h http.Handler
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.mcp, ts.quit, ts.sse, ts.sh = m, quit, nil, nil
	if ts.kind == TransportSSE {
		ts.sse = server.NewSSEServer(m, server.WithKeepAlive(false))
		h = ts.sse
	} else {
		var hopts []server.StreamableHTTPOption
		if ts.opts.stateful {
			hopts = append(hopts, server.WithStateful(true))
		}
		if ts.opts.legacy {
			hopts = append(hopts, server.WithStreamableHTTPProtocolVersions(mcpgo.ProtocolVersion20251125, mcpgo.ProtocolVersion20250618))
		}
		ts.sh = server.NewStreamableHTTPServer(m, hopts...)
		h = ts.sh
	}
	record := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ts.mu.Lock()
		ts.authSeen = append(ts.authSeen, r.Header.Get("Authorization"))
		ts.mu.Unlock()
		if r.Method == http.MethodGet || r.Header.Get("Mcp-Method") == string(mcpgo.MethodSubscriptionsListen) {
			w = &flushSignal{ResponseWriter: w, signal: ts.streamOpen}
		}
		h.ServeHTTP(w, r)
	})
	ts.hs = &http.Server{Handler: record, ReadHeaderTimeout: 5 * time.Second}
	if ts.opts.stateful {
		// A connection per request: after a restart no request can go out
		// on a kept-alive connection to the dead server, which the client
		// would otherwise notice only after some unknown while.
		ts.hs.SetKeepAlivesEnabled(false)
	}
	ts.done = make(chan struct{})
	hs, done := ts.hs, ts.done
	go func() {
		defer close(done)
		_ = hs.Serve(ln)
	}()
}

// stop kills the server: listener and every connection closed at once,
// as a crashed process would leave them.
func (ts *testServer) stop() {
	ts.mu.Lock()
	hs, quit, done, sse, sh := ts.hs, ts.quit, ts.done, ts.sse, ts.sh
	ts.hs = nil
	ts.mu.Unlock()
	if hs == nil {
		return
	}
	_ = hs.Close()
	<-done
	// Slow tools end only now, so that their answers die with the
	// connections instead of racing them.
	close(quit)
	if sse != nil {
		sse.CloseSessions()
	}
	if sh != nil {
		sh.CloseSessions(context.Background())
	}
}

// waitSlowStarted waits until the slow tool has started a call.
func (ts *testServer) waitSlowStarted(t testing.TB) {
	t.Helper()
	waitSignal(t, ts.slowStarted, "the slow tool never started")
}

// waitStreamOpen waits until a client holds an open event stream.
func (ts *testServer) waitStreamOpen(t testing.TB) {
	t.Helper()
	waitSignal(t, ts.streamOpen, "no event stream was opened")
}

func waitSignal(t testing.TB, c <-chan struct{}, failure string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second): // a bound on a hang, not a wait
		t.Fatal(failure)
	}
}

// signal sends without blocking: nobody may be waiting.
func signal(c chan<- struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// flushSignal signals once, when the response is first flushed.
type flushSignal struct {
	http.ResponseWriter
	once   sync.Once
	signal chan<- struct{}
}

func (w *flushSignal) Flush() {
	http.NewResponseController(w.ResponseWriter).Flush()
	w.once.Do(func() { signal(w.signal) })
}

// Unwrap lets http.ResponseController reach the connection (deadlines).
func (w *flushSignal) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// restart starts a fresh server (new sessions, same tools) on the same port.
func (ts *testServer) restart() {
	ts.t.Helper()
	var ln net.Listener
	var err error
	for range 50 {
		if ln, err = net.Listen("tcp", ts.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		ts.t.Fatalf("relisten on %s: %v", ts.addr, err)
	}
	ts.serve(ln)
}

func (ts *testServer) addTool(name string) {
	ts.mu.Lock()
	m := ts.mcp
	ts.mu.Unlock()
	m.AddTool(mcpgo.NewTool(name, mcpgo.WithDescription("added later"), readOnly), func(context.Context, mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
		return mcpgo.NewToolResultText(name), nil
	})
}

func (ts *testServer) auths() []string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return append([]string(nil), ts.authSeen...)
}

const createSchema = `{
  "type": "object",
  "properties": {
    "user": {
      "type": "object",
      "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
      "required": ["name"]
    },
    "tags": {"type": "array", "items": {"type": "string"}}
  },
  "required": ["user"],
  "additionalProperties": false
}`

// readOnly marks a test tool safe: mcp-go's NewTool otherwise declares
// destructiveHint=true, the MCP default.
var readOnly = mcpgo.WithReadOnlyHintAnnotation(true)

// addTestTools registers the tools every test server offers. Slow tools
// end when quit closes, so killed servers leave no goroutines behind, and
// announce on started (if not nil) that they have begun.
func addTestTools(m *server.MCPServer, quit <-chan struct{}, started chan<- struct{}) {
	m.AddTool(mcpgo.NewTool("echo", mcpgo.WithDescription("Echo text back"), readOnly,
		mcpgo.WithString("text", mcpgo.Required())),
		func(_ context.Context, r mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			return mcpgo.NewToolResultText(r.GetString("text", "")), nil
		})
	m.AddTool(mcpgo.NewTool("add", mcpgo.WithDescription("Add two numbers"),
		mcpgo.WithNumber("a", mcpgo.Required()), mcpgo.WithNumber("b", mcpgo.Required()),
		mcpgo.WithRawOutputSchema(json.RawMessage(`{"type":"object","properties":{"sum":{"type":"number"}}}`)),
		mcpgo.WithReadOnlyHintAnnotation(true)),
		func(_ context.Context, r mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			sum := r.GetFloat("a", 0) + r.GetFloat("b", 0)
			return mcpgo.NewToolResultStructured(map[string]any{"sum": sum}, fmt.Sprint(sum)), nil
		})
	m.AddTool(mcpgo.NewTool("get-sum", mcpgo.WithDescription("Sum as JSON text"), readOnly,
		mcpgo.WithNumber("a"), mcpgo.WithNumber("b")),
		func(_ context.Context, r mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			return mcpgo.NewToolResultText(fmt.Sprintf(`{"sum":%g}`, r.GetFloat("a", 0)+r.GetFloat("b", 0))), nil
		})
	m.AddTool(mcpgo.NewTool("fail", mcpgo.WithDescription("Always fails"), readOnly),
		func(context.Context, mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			return mcpgo.NewToolResultError("boom: the widget is broken"), nil
		})
	m.AddTool(mcpgo.NewTool("slow", mcpgo.WithDescription("Sleeps ms milliseconds"), readOnly,
		mcpgo.WithInteger("ms", mcpgo.Required())),
		func(ctx context.Context, r mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			signal(started)
			select {
			case <-time.After(time.Duration(r.GetInt("ms", 0)) * time.Millisecond):
				return mcpgo.NewToolResultText("done"), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-quit:
				return nil, errors.New("server stopping")
			}
		})
	m.AddTool(mcpgo.NewTool("delete_all", mcpgo.WithDescription("Deletes everything"),
		mcpgo.WithDestructiveHintAnnotation(true), mcpgo.WithReadOnlyHintAnnotation(false)),
		func(context.Context, mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			return mcpgo.NewToolResultText("deleted"), nil
		})
	m.AddTool(mcpgo.NewTool("multi", mcpgo.WithDescription("Text and an image"), readOnly),
		func(context.Context, mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			return &mcpgo.CallToolResult{Content: []mcpgo.Content{
				mcpgo.NewTextContent("a <b> & c"),
				mcpgo.NewImageContent("aGk=", "image/png"),
			}}, nil
		})
	create := mcpgo.NewToolWithRawSchema("create", "Nested schema", json.RawMessage(createSchema))
	create.Annotations.ReadOnlyHint = mcpgo.ToBoolPtr(true)
	m.AddTool(create,
		func(_ context.Context, r mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			return mcpgo.NewToolResultText("created"), nil
		})
	m.AddTool(mcpgo.NewTool("big", mcpgo.WithDescription("Returns n bytes of text"), readOnly,
		mcpgo.WithInteger("n", mcpgo.Required())),
		func(_ context.Context, r mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			b := make([]byte, r.GetInt("n", 0))
			for i := range b {
				b[i] = 'x'
			}
			return mcpgo.NewToolResultText(string(b)), nil
		})
	// Names the guest must never see as properties.
	for _, bad := range []string{"__proto__", "constructor"} {
		m.AddTool(mcpgo.NewTool(bad, readOnly), func(context.Context, mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			return mcpgo.NewToolResultText("should never be reachable"), nil
		})
	}
}

// Pool is what the tests drive: a Set of MCP servers and their Kind,
// called by server and tool name.
type Pool struct {
	*toolsource.Set
	kind *Kind
}

// CallOptions are the per-call switches the tests use.
type CallOptions struct {
	AllowDestructive bool
	ParseJSONText    bool
	Retry            *execution.Retry
}

// Call calls server's tool through the Set, as the execution service does.
func (p *Pool) Call(ctx context.Context, server, tool string, args json.RawMessage, opt CallOptions) (json.RawMessage, error) {
	return p.Set.Call(ctx, catalog.Tool{Server: server, Name: tool}, args, execution.CallOptions{
		Lineage: execution.Lineage{AllowDestructive: opt.AllowDestructive}, ParseJSONText: opt.ParseJSONText, Retry: opt.Retry})
}

// Stats is the Kind's counters (each test pool has a Kind of its own).
func (p *Pool) Stats() Stats { return p.kind.Stats() }

// setup is what a test pool is opened with.
type setup struct {
	kind Kind
	env  toolsource.Env
}

// option shapes a test pool.
type option func(*setup)

func withLogger(l *slog.Logger) option { return func(s *setup) { s.env.Logger = l } }

func withReconnectBackoff(initial, max time.Duration, attempts int) option {
	return func(s *setup) { s.env.Retry = toolsource.Retry{Initial: initial, Max: max, Attempts: attempts} }
}

func withConnectTimeout(d time.Duration) option { return func(s *setup) { s.kind.ConnectTimeout = d } }
func withRefreshTTL(d time.Duration) option     { return func(s *setup) { s.kind.RefreshTTL = d } }
func withMaxMessageBytes(n int64) option        { return func(s *setup) { s.kind.MaxMessageBytes = n } }
func withMaxResultBytes(n int) option           { return func(s *setup) { s.kind.MaxResultBytes = n } }
func withAnswerer(a elicit.Answerer) option     { return func(s *setup) { s.kind.Answerer = a } }
func withCredentialsDir(dir string) option {
	return func(s *setup) { s.env.OAuth.CredentialsDir = dir }
}

func withLoginAgent(a oauthclient.UserAgent) option {
	return func(s *setup) { s.env.OAuth.Agent = a }
}

func withSecretsManager(f func(context.Context) (oauthclient.SecretsAPI, error)) option {
	return func(s *setup) {
		s.env.OAuth.Secrets = f
		// Secret references read the same Secrets Manager, as the
		// service's one resolver does.
		s.env.Refs = secretref.New(func(ctx context.Context) (secretref.API, error) { return f(ctx) }, secretref.Options{})
	}
}

// openPool opens a Set of cfgs with a Kind of its own.
func openPool(cfgs []Config, opts ...option) (*Pool, error) {
	su := &setup{}
	for _, o := range opts {
		o(su)
	}
	k := &Kind{ConnectTimeout: su.kind.ConnectTimeout, RefreshTTL: su.kind.RefreshTTL, MaxMessageBytes: su.kind.MaxMessageBytes,
		MaxResultBytes: su.kind.MaxResultBytes, Answerer: su.kind.Answerer}
	set, err := k.NewSet(context.Background(), su.env, cfgs...)
	if err != nil {
		return nil, err
	}
	return &Pool{Set: set, kind: k}, nil
}

// newTestPool opens a pool with fast reconnects and short timeouts.
func newTestPool(t testing.TB, cfgs []Config, opts ...option) *Pool {
	t.Helper()
	base := []option{
		withLogger(testLogger()),
		withReconnectBackoff(100*time.Millisecond, 400*time.Millisecond, 20),
		withConnectTimeout(3 * time.Second),
	}
	p, err := openPool(cfgs, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// waitTools waits until the pool lists n or more tools of server.
func waitTools(t testing.TB, p *Pool, server string, want ...string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		tools, err := p.Tools(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		for _, tl := range tools {
			if tl.Server == server {
				have[tl.Name] = true
			}
		}
		missing := ""
		for _, w := range want {
			if !have[w] {
				missing = w
			}
		}
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("server %s: tool %q never appeared; health %+v", server, missing, p.Health())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// codeOf returns the fault code of err, or "" for nil.
func codeOf(err error) fault.Code { return fault.CodeOf(err) }

func call(t testing.TB, p *Pool, server, tool, args string, opt CallOptions) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := p.Call(ctx, server, tool, json.RawMessage(args), opt)
	return string(out), err
}

// lockedWriter lets several goroutines log into one builder.
type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func newLockedLogger(b *strings.Builder, mu *sync.Mutex) *slog.Logger {
	return slog.New(slog.NewJSONHandler(lockedWriter{mu: mu, b: b}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// listingKind opens servers whose tools/list answer is fixed: what the
// kind and the Set make of a server's list, with no server behind it.
type listingKind struct {
	Kind
	tools []wireTool
	srv   *listedServer
}

type listedServer struct {
	*remote
	tools []wireTool
}

func (k *listingKind) Info() toolsource.KindInfo { return k.Kind.Info() }

func (k *listingKind) Decode(n *yaml.Node) (toolsource.Spec, error) { return k.Kind.Decode(n) }

func (k *listingKind) Open(_ context.Context, spec toolsource.Spec, h *toolsource.Handle) (toolsource.Server, error) {
	k.srv = &listedServer{remote: newRemote(&k.Kind, spec.(Config), h), tools: k.tools}
	return k.srv, nil
}

// Load lists the tools as a 2025-11-25 connection would.
func (s *listedServer) Load(context.Context) ([]toolsource.Tool, error) {
	return s.catalog(&conn{}, s.tools), nil
}

func (s *listedServer) Call(context.Context, toolsource.Call) (json.RawMessage, error) {
	return json.RawMessage("null"), nil
}

// listed opens a Set of one server that lists tools, loaded and then
// refreshed refreshes times with the same list; log receives the Set's
// records.
func listed(t *testing.T, cfg Config, log *slog.Logger, tools []wireTool, refreshes int) *Pool {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = "http://127.0.0.1:1/mcp" // never dialled
	}
	k := &listingKind{tools: tools}
	set, err := toolsource.New(context.Background(), toolsource.NewRegistry(k), []toolsource.Spec{cfg}, toolsource.Env{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = set.Close() })
	p := &Pool{Set: set, kind: &k.Kind}
	if _, err := p.Tools(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range refreshes {
		k.srv.h.Update(k.srv.catalog(&conn{}, tools))
	}
	return p
}

// visibleTools is what p lists, by name.
func visibleTools(t *testing.T, p *Pool) ([]string, map[string]catalog.Tool) {
	t.Helper()
	tools, err := p.Tools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	byName := map[string]catalog.Tool{}
	for _, tl := range tools {
		names = append(names, tl.Name)
		byName[tl.Name] = tl
	}
	return names, byName
}
