package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/toolsource"
)

// evilServer speaks just enough MCP by hand to misbehave in ways mcp-go's
// own server never would. It serves streamable HTTP at /mcp and HTTP+SSE at
// /sse + /message.
type evilServer struct {
	hs      *http.Server
	addr    string
	quit    chan struct{}
	done    chan struct{}
	written atomic.Int64 // bytes of the last huge answer that went out

	mu     sync.Mutex
	stream chan string // events for the live SSE stream
}

var evilTools = []string{"ok", "huge", "ssehuge", "garbage", "notjsonrpc", "wrongid", "hang", "rpcerror"}

func newEvilServer(t *testing.T) *evilServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &evilServer{addr: ln.Addr().String(), quit: make(chan struct{}), done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("/mcp", e.streamable)
	mux.HandleFunc("/sse", e.sseStream)
	mux.HandleFunc("/message", e.sseMessage)
	e.hs = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		defer close(e.done)
		_ = e.hs.Serve(ln)
	}()
	t.Cleanup(func() {
		close(e.quit)
		_ = e.hs.Close()
		<-e.done
	})
	return e
}

type rpcMsg struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		Name string `json:"name"`
	} `json:"params"`
}

// answer is the well-formed reply to the handshake and listing methods.
func answer(m rpcMsg) (string, bool) {
	switch m.Method {
	case "initialize":
		return fmt.Sprintf(`{"protocolVersion":%q,"capabilities":{"tools":{}},"serverInfo":{"name":"evil","version":"1"}}`, ProtocolVersion), true
	case "ping":
		return `{}`, true
	case "tools/list":
		var tools []string
		for _, n := range evilTools {
			tools = append(tools, fmt.Sprintf(`{"name":%q,"inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}`, n))
		}
		return `{"tools":[` + strings.Join(tools, ",") + `]}`, true
	}
	return "", false
}

func reply(id json.RawMessage, result string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":%s}`, id, result)
}

// writeHuge streams a JSON-RPC answer of ever more text until the client
// hangs up (or 256 MiB), counting what went out.
func (e *evilServer) writeHuge(w http.ResponseWriter, prefix string) {
	e.written.Store(0)
	chunk := []byte(strings.Repeat("x", 64<<10))
	n, _ := w.Write([]byte(prefix))
	e.written.Add(int64(n))
	for e.written.Load() < 256<<20 {
		n, err := w.Write(chunk)
		e.written.Add(int64(n))
		if err != nil {
			return
		}
		select {
		case <-e.quit:
			return
		default:
		}
	}
}

func (e *evilServer) streamable(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		http.Error(w, "no stream", http.StatusMethodNotAllowed)
		return
	case http.MethodDelete:
		return
	}
	var m rpcMsg
	if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if m.ID == nil {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	w.Header().Set("Mcp-Session-Id", "evil-session")
	w.Header().Set("Content-Type", "application/json")
	if res, ok := answer(m); ok {
		fmt.Fprint(w, reply(m.ID, res))
		return
	}
	switch m.Params.Name {
	case "ok":
		fmt.Fprint(w, reply(m.ID, `{"content":[{"type":"text","text":"fine"}]}`))
	case "huge":
		e.writeHuge(w, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"`, m.ID))
	case "ssehuge":
		w.Header().Set("Content-Type", "text/event-stream")
		e.writeHuge(w, fmt.Sprintf(`event: message`+"\n"+`data: {"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"`, m.ID))
	case "garbage":
		fmt.Fprint(w, `this is not json {{{`)
	case "notjsonrpc":
		fmt.Fprint(w, `{"hello":"world"}`)
	case "wrongid":
		fmt.Fprint(w, reply(json.RawMessage(`"someone-else-7"`), `{"content":[{"type":"text","text":"not yours"}]}`))
	case "hang":
		select {
		case <-r.Context().Done():
		case <-e.quit:
		}
	case "rpcerror":
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32603,"message":"internal kaboom"}}`, m.ID)
	}
}

// sseStream is the HTTP+SSE GET stream: the endpoint event, then whatever
// sseMessage queues. The "HUGE" marker writes an endless event.
func (e *evilServer) sseStream(w http.ResponseWriter, r *http.Request) {
	ch := make(chan string, 16)
	e.mu.Lock()
	e.stream = ch
	e.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprint(w, "event: endpoint\ndata: /message?sessionId=evil\n\n")
	w.(http.Flusher).Flush()
	for {
		select {
		case ev := <-ch:
			if id, ok := strings.CutPrefix(ev, "HUGE "); ok {
				e.writeHuge(w, `event: message`+"\n"+`data: {"jsonrpc":"2.0","id":`+id+`,"result":{"content":[{"type":"text","text":"`)
				return
			}
			fmt.Fprint(w, ev)
			w.(http.Flusher).Flush()
		case <-r.Context().Done():
			return
		case <-e.quit:
			return
		}
	}
}

func (e *evilServer) sseMessage(w http.ResponseWriter, r *http.Request) {
	var m rpcMsg
	if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.WriteHeader(http.StatusAccepted)
	if m.ID == nil {
		return
	}
	event := func(data string) string { return "event: message\ndata: " + data + "\n\n" }
	var ev string
	if res, ok := answer(m); ok {
		ev = event(reply(m.ID, res))
	} else {
		switch m.Params.Name {
		case "ok":
			ev = event(reply(m.ID, `{"content":[{"type":"text","text":"fine"}]}`))
		case "huge":
			ev = "HUGE " + string(m.ID)
		case "garbage":
			ev = event(`this is not json {{{`)
		case "wrongid":
			ev = event(reply(json.RawMessage(`"someone-else-7"`), `{"content":[]}`))
		case "rpcerror":
			ev = event(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"error":{"code":-32603,"message":"internal kaboom"}}`, m.ID))
		default: // hang and the rest: never answer
			return
		}
	}
	e.mu.Lock()
	ch := e.stream
	e.mu.Unlock()
	select {
	case ch <- ev:
	case <-e.quit:
	}
}

func TestMaliciousServerStreamable(t *testing.T) {
	e := newEvilServer(t)
	const cap = 1 << 20
	p := newTestPool(t, []Config{{Config: toolsource.Config{Name: "evil", CallTimeout: 500 * time.Millisecond}, URL: "http://" + e.addr + "/mcp", Transport: TransportStreamable}},
		withMaxMessageBytes(cap))
	waitTools(t, p, "evil", evilTools...)

	cases := []struct {
		tool string
		code fault.Code
	}{
		{"huge", fault.LimitExceeded},
		{"ssehuge", fault.LimitExceeded},
		{"garbage", fault.Unavailable},
		{"notjsonrpc", fault.Unavailable},
		{"wrongid", fault.Unavailable},
		{"hang", fault.Timeout},
		{"rpcerror", fault.ToolError},
	}
	for _, tc := range cases {
		t.Run(tc.tool, func(t *testing.T) {
			start := time.Now()
			_, err := call(t, p, "evil", tc.tool, `{}`, CallOptions{})
			took := time.Since(start)
			if got := codeOf(err); got != tc.code {
				t.Fatalf("code %q (%v); want %q", got, err, tc.code)
			}
			// Bounded by the 500 ms call timeout; the margin is for a
			// loaded machine.
			if took > 5*time.Second {
				t.Errorf("took %s; want bounded", took)
			}
			if tc.code == fault.LimitExceeded {
				if fe := fault.As(err); fe.Limit != fault.LimitResultBytes {
					t.Errorf("limit %q", fe.Limit)
				}
				// The client stopped reading near the cap instead of
				// buffering the server's 256 MiB.
				if w := e.written.Load(); w > 64<<20 {
					t.Errorf("server got %d MiB out before the client hung up", w>>20)
				}
			}
			// The host keeps serving the same server.
			out, err := call(t, p, "evil", "ok", `{}`, CallOptions{})
			if err != nil || out != `"fine"` {
				t.Fatalf("after %s: %s, %v (health %+v)", tc.tool, out, err, p.Health())
			}
		})
	}
	if r := p.Stats().Reconnects; r != 0 {
		t.Errorf("reconnects = %d: a server that answers garbage but answers ping is not down", r)
	}
}

func TestMaliciousServerSSE(t *testing.T) {
	e := newEvilServer(t)
	// The timeout leaves a loaded machine room to read the oversized
	// event before it (at 400 ms, "huge" sometimes ended as TIMEOUT).
	p := newTestPool(t, []Config{{Config: toolsource.Config{Name: "evil", CallTimeout: 1500 * time.Millisecond}, URL: "http://" + e.addr + "/sse", Transport: TransportSSE}},
		withMaxMessageBytes(1<<20))
	waitTools(t, p, "evil", evilTools...)

	cases := []struct {
		tool string
		code fault.Code
	}{
		// Unmatched or unparsable events are dropped by mcp-go, so the
		// call runs into its timeout.
		{"wrongid", fault.Timeout},
		{"garbage", fault.Timeout},
		{"hang", fault.Timeout},
		{"rpcerror", fault.ToolError},
		// The oversized event cuts the stream: the call fails at once,
		// and the pool reconnects.
		{"huge", fault.LimitExceeded},
	}
	for _, tc := range cases {
		t.Run(tc.tool, func(t *testing.T) {
			start := time.Now()
			_, err := call(t, p, "evil", tc.tool, `{}`, CallOptions{})
			if got := codeOf(err); got != tc.code {
				t.Fatalf("code %q (%v); want %q", got, err, tc.code)
			}
			// Bounded by the 1.5 s call timeout; the margin is for a
			// loaded machine.
			if took := time.Since(start); took > 7*time.Second {
				t.Errorf("took %s; want bounded", took)
			}
			deadline := time.Now().Add(5 * time.Second)
			for {
				out, err := call(t, p, "evil", "ok", `{}`, CallOptions{})
				if err == nil && out == `"fine"` {
					break
				}
				if codeOf(err) != fault.Unavailable || time.Now().After(deadline) {
					t.Fatalf("after %s: %s, %v", tc.tool, out, err)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// TestNeverAnsweringConnect: a server that accepts connections and never
// says a word must not hold up New, Tools past its ctx, or Close; the
// connect attempt ends at the server's own connect_timeout where it has
// one (the pool's is then an hour, past the call's 10 s), else the pool's.
func TestNeverAnsweringConnect(t *testing.T) {
	for _, tc := range []struct {
		name         string
		pool, server time.Duration
	}{
		{"the pool's connect timeout", 300 * time.Millisecond, 0},
		{"the server's connect timeout", time.Hour, 300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) { neverAnsweringConnect(t, tc.pool, tc.server) })
	}
}

func neverAnsweringConnect(t *testing.T, poolTimeout, serverTimeout time.Duration) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	conns.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
		}
	})
	defer func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range open {
			_ = c.Close()
		}
		mu.Unlock()
		conns.Wait()
	}()

	p, err := openPool([]Config{{Config: toolsource.Config{Name: "mute"}, URL: "http://" + ln.Addr().String() + "/mcp", ConnectTimeout: serverTimeout}},
		withLogger(testLogger()), withConnectTimeout(poolTimeout))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	start := time.Now()
	tools, _ := p.Tools(ctx)
	cancel()
	if len(tools) != 0 || time.Since(start) > 5*time.Second {
		t.Errorf("Tools: %d tools after %s", len(tools), time.Since(start))
	}
	_, err = call(t, p, "mute", "x", `{}`, CallOptions{})
	if codeOf(err) != fault.Unavailable || !strings.Contains(err.Error(), "connect timed out") {
		t.Errorf("call: %v; want UNAVAILABLE, connect timed out", err)
	}
	start = time.Now()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close took %s", d)
	}
}
