package mcpclient

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

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"go.uber.org/goleak"

	"github.com/pml-sandbox/pml/internal/fault"
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
			hopts = append(hopts, server.WithStreamableHTTPProtocolVersions(mcp.ProtocolVersion20251125, mcp.ProtocolVersion20250618))
		}
		ts.sh = server.NewStreamableHTTPServer(m, hopts...)
		h = ts.sh
	}
	record := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ts.mu.Lock()
		ts.authSeen = append(ts.authSeen, r.Header.Get("Authorization"))
		ts.mu.Unlock()
		if r.Method == http.MethodGet || r.Header.Get("Mcp-Method") == string(mcp.MethodSubscriptionsListen) {
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
	m.AddTool(mcp.NewTool(name, mcp.WithDescription("added later"), readOnly), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText(name), nil
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
var readOnly = mcp.WithReadOnlyHintAnnotation(true)

// addTestTools registers the tools every test server offers. Slow tools
// end when quit closes, so killed servers leave no goroutines behind, and
// announce on started (if not nil) that they have begun.
func addTestTools(m *server.MCPServer, quit <-chan struct{}, started chan<- struct{}) {
	m.AddTool(mcp.NewTool("echo", mcp.WithDescription("Echo text back"), readOnly,
		mcp.WithString("text", mcp.Required())),
		func(_ context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText(r.GetString("text", "")), nil
		})
	m.AddTool(mcp.NewTool("add", mcp.WithDescription("Add two numbers"),
		mcp.WithNumber("a", mcp.Required()), mcp.WithNumber("b", mcp.Required()),
		mcp.WithRawOutputSchema(json.RawMessage(`{"type":"object","properties":{"sum":{"type":"number"}}}`)),
		mcp.WithReadOnlyHintAnnotation(true)),
		func(_ context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			sum := r.GetFloat("a", 0) + r.GetFloat("b", 0)
			return mcp.NewToolResultStructured(map[string]any{"sum": sum}, fmt.Sprint(sum)), nil
		})
	m.AddTool(mcp.NewTool("get-sum", mcp.WithDescription("Sum as JSON text"), readOnly,
		mcp.WithNumber("a"), mcp.WithNumber("b")),
		func(_ context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText(fmt.Sprintf(`{"sum":%g}`, r.GetFloat("a", 0)+r.GetFloat("b", 0))), nil
		})
	m.AddTool(mcp.NewTool("fail", mcp.WithDescription("Always fails"), readOnly),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultError("boom: the widget is broken"), nil
		})
	m.AddTool(mcp.NewTool("slow", mcp.WithDescription("Sleeps ms milliseconds"), readOnly,
		mcp.WithInteger("ms", mcp.Required())),
		func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			signal(started)
			select {
			case <-time.After(time.Duration(r.GetInt("ms", 0)) * time.Millisecond):
				return mcp.NewToolResultText("done"), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-quit:
				return nil, errors.New("server stopping")
			}
		})
	m.AddTool(mcp.NewTool("delete_all", mcp.WithDescription("Deletes everything"),
		mcp.WithDestructiveHintAnnotation(true), mcp.WithReadOnlyHintAnnotation(false)),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText("deleted"), nil
		})
	m.AddTool(mcp.NewTool("multi", mcp.WithDescription("Text and an image"), readOnly),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{
				mcp.NewTextContent("a <b> & c"),
				mcp.NewImageContent("aGk=", "image/png"),
			}}, nil
		})
	create := mcp.NewToolWithRawSchema("create", "Nested schema", json.RawMessage(createSchema))
	create.Annotations.ReadOnlyHint = mcp.ToBoolPtr(true)
	m.AddTool(create,
		func(_ context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText("created"), nil
		})
	m.AddTool(mcp.NewTool("big", mcp.WithDescription("Returns n bytes of text"), readOnly,
		mcp.WithInteger("n", mcp.Required())),
		func(_ context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			b := make([]byte, r.GetInt("n", 0))
			for i := range b {
				b[i] = 'x'
			}
			return mcp.NewToolResultText(string(b)), nil
		})
	// Names the guest must never see as properties.
	for _, bad := range []string{"__proto__", "constructor"} {
		m.AddTool(mcp.NewTool(bad, readOnly), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText("should never be reachable"), nil
		})
	}
}

// newTestPool builds a pool with fast reconnects and short timeouts.
func newTestPool(t testing.TB, cfgs []ServerConfig, opts ...Option) *Pool {
	t.Helper()
	base := []Option{
		WithLogger(testLogger()),
		WithReconnectBackoff(100*time.Millisecond, 400*time.Millisecond, 20),
		WithConnectTimeout(3 * time.Second),
	}
	p, err := New(context.Background(), cfgs, append(base, opts...)...)
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
