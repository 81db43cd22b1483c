package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/toolsource"
)

// seenRequest is one JSON-RPC request as a server received it.
type seenRequest struct {
	method string
	header http.Header
	meta   map[string]json.RawMessage
}

// recordingServer is a real mcp-go streamable HTTP server behind a handler
// that records every JSON-RPC request.
// It may rewrite the result of the JSON answers to the methods rewrite
// names, as a server that answers differently would.
type recordingServer struct {
	*httptest.Server
	rewrite map[string]func(result map[string]any)
	mu      sync.Mutex
	seen    []seenRequest
}

func newRecordingServer(t *testing.T, m *server.MCPServer, rewrite map[string]func(map[string]any), hopts ...server.StreamableHTTPOption) *recordingServer {
	t.Helper()
	rs := &recordingServer{rewrite: rewrite}
	h := server.NewStreamableHTTPServer(m, hopts...)
	rs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			h.ServeHTTP(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var msg struct {
			Method string `json:"method"`
			Params struct {
				Meta map[string]json.RawMessage `json:"_meta"`
			} `json:"params"`
		}
		if json.Unmarshal(body, &msg) == nil && msg.Method != "" {
			rs.mu.Lock()
			rs.seen = append(rs.seen, seenRequest{method: msg.Method, header: r.Header.Clone(), meta: msg.Params.Meta})
			rs.mu.Unlock()
		}
		f := rs.rewrite[msg.Method]
		if f == nil {
			h.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		var answer map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &answer); err != nil {
			t.Errorf("%s answer %q: %v", msg.Method, rec.Body.String(), err)
		}
		if res, ok := answer["result"].(map[string]any); ok {
			f(res)
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.Header().Del("Content-Length")
		w.WriteHeader(rec.Code)
		_ = json.NewEncoder(w).Encode(answer)
	}))
	t.Cleanup(func() {
		rs.Close()
		_ = h.Shutdown(context.Background())
	})
	return rs
}

func (rs *recordingServer) requests(method string) []seenRequest {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	var out []seenRequest
	for _, r := range rs.seen {
		if r.method == method {
			out = append(out, r)
		}
	}
	return out
}

// headerServer is an mcp-go server with a tool that binds parameters to
// headers (x-mcp-header), one whose binding is invalid, and one that
// binds none.
func headerServer() *server.MCPServer {
	m := server.NewMCPServer("hdr", "1.0", server.WithToolCapabilities(true))
	text := func(s string) server.ToolHandlerFunc {
		return func(context.Context, mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			return mcpgo.NewToolResultText(s), nil
		}
	}
	// Read-only, as a lookup says: MCP's defaults would make a tool that
	// says nothing destructive.
	readOnly := func(t mcpgo.Tool) mcpgo.Tool {
		t.Annotations.ReadOnlyHint = mcpgo.ToBoolPtr(true)
		return t
	}
	m.AddTool(readOnly(mcpgo.NewToolWithRawSchema("route", "routed", json.RawMessage(
		`{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"},"query":{"type":"string"}},"required":["region"]}`))), text("routed"))
	m.AddTool(readOnly(mcpgo.NewToolWithRawSchema("plain", "plain", json.RawMessage(`{"type":"object"}`))), text("plain"))
	return m
}

// TestModernRequests: against a server that speaks 2026-07-28 the pool
// negotiates it with server/discover, and every request it sends carries
// the protocol version, client identity and capabilities in _meta and the
// Mcp-Method, Mcp-Name and Mcp-Param-* headers; against a server that
// speaks only 2025-11-25 (or 2025-06-18) it falls back to initialize and
// sends neither.
func TestModernRequests(t *testing.T) {
	cases := []struct {
		name     string
		versions []string
		want     string
	}{
		{"2026-07-28", nil, ModernProtocolVersion},
		{"2025-11-25 only", []string{mcpgo.ProtocolVersion20251125}, mcpgo.ProtocolVersion20251125},
		{"2025-06-18 only", []string{mcpgo.ProtocolVersion20250618}, mcpgo.ProtocolVersion20250618},
	}
	// mcp-go's server agrees to 2025-11-25 whatever it advertises; a
	// server that knows only 2025-06-18 answers initialize with that.
	only20250618 := map[string]func(map[string]any){"initialize": func(res map[string]any) {
		res["protocolVersion"] = mcpgo.ProtocolVersion20250618
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var hopts []server.StreamableHTTPOption
			if tc.versions != nil {
				hopts = append(hopts, server.WithStreamableHTTPProtocolVersions(tc.versions...))
			}
			var rewrite map[string]func(map[string]any)
			if tc.want == mcpgo.ProtocolVersion20250618 {
				rewrite = only20250618
			}
			rs := newRecordingServer(t, headerServer(), rewrite, hopts...)
			p := newTestPool(t, []Config{{Config: toolsource.Config{Name: "h"}, URL: rs.URL, Transport: TransportStreamable}})
			waitTools(t, p, "h", "route", "plain")
			if got := p.Health()[0].ProtocolVersion; got != tc.want {
				t.Fatalf("protocol %s; want %s", got, tc.want)
			}
			if out, err := call(t, p, "h", "route", `{"region":"eu-west","query":"q"}`, CallOptions{}); err != nil || out != `"routed"` {
				t.Fatalf("route: %s, %v", out, err)
			}
			modern := tc.want == ModernProtocolVersion
			if n := len(rs.requests("initialize")); modern == (n > 0) {
				t.Errorf("%d initialize requests on %s", n, tc.want)
			}
			calls := rs.requests("tools/call")
			lists := rs.requests("tools/list")
			if len(calls) != 1 || len(lists) == 0 {
				t.Fatalf("saw %d tools/call and %d tools/list", len(calls), len(lists))
			}
			for _, r := range append(calls, lists...) {
				var version string
				_ = json.Unmarshal(r.meta[mcpgo.MetaKeyProtocolVersion], &version)
				_, hasCaps := r.meta[mcpgo.MetaKeyClientCapabilities]
				_, hasInfo := r.meta[mcpgo.MetaKeyClientInfo]
				if modern {
					if version != ModernProtocolVersion || !hasCaps || !hasInfo {
						t.Errorf("%s _meta %v: want protocol version, client capabilities and client info", r.method, r.meta)
					}
					if r.header.Get("Mcp-Method") != r.method || r.header.Get("Mcp-Protocol-Version") != ModernProtocolVersion {
						t.Errorf("%s headers %v", r.method, r.header)
					}
				} else if version != "" || r.header.Get("Mcp-Method") != "" {
					t.Errorf("%s on %s carries 2026-07-28 metadata: %v %v", r.method, tc.want, r.meta, r.header)
				}
			}
			h := calls[0].header
			if modern && (h.Get("Mcp-Name") != "route" || h.Get("Mcp-Param-Region") != "eu-west" || h.Get("Mcp-Param-Query") != "") {
				t.Errorf("tools/call headers: Mcp-Name %q, Mcp-Param-Region %q, Mcp-Param-Query %q",
					h.Get("Mcp-Name"), h.Get("Mcp-Param-Region"), h.Get("Mcp-Param-Query"))
			}
		})
	}
}

// TestInvalidHeaderToolLeftOut: on 2026-07-28 a tool whose x-mcp-header
// binding breaks SEP-2243's rules is left out of the catalog (and a call to
// it is TOOL_NOT_FOUND); its neighbours stay.
func TestInvalidHeaderToolLeftOut(t *testing.T) {
	// mcp-go's server refuses to serve such a tool: the answer is
	// rewritten to list one, as a server that does not check would.
	rs := newRecordingServer(t, headerServer(), map[string]func(map[string]any){"tools/list": func(res map[string]any) {
		var bad map[string]any
		_ = json.Unmarshal([]byte(`{"name":"bad","inputSchema":{"type":"object","properties":{"data":{"type":"object","x-mcp-header":"Data"}}}}`), &bad)
		res["tools"] = append(res["tools"].([]any), bad)
	}})
	p := newTestPool(t, []Config{{Config: toolsource.Config{Name: "h"}, URL: rs.URL, Transport: TransportStreamable}})
	waitTools(t, p, "h", "route", "plain")
	tools, _ := p.Tools(context.Background())
	for _, tl := range tools {
		if tl.Name == "bad" {
			t.Fatalf("tool with an invalid header binding listed: %+v", tl)
		}
	}
	if _, err := call(t, p, "h", "bad", `{}`, CallOptions{}); codeOf(err) != "TOOL_NOT_FOUND" {
		t.Errorf("call to the left-out tool: %v; want TOOL_NOT_FOUND", err)
	}
	if len(rs.requests("tools/call")) != 0 {
		t.Error("the left-out tool was called")
	}
}

// TestListTTLHonoured: a tools/list answer's ttlMs bounds how long the
// catalog is kept (never below a second), and never lengthens the Kind's
// own refresh TTL.
func TestListTTLHonoured(t *testing.T) {
	s := &remote{k: &Kind{}}
	ms := func(n int64) *int64 { return &n }
	cases := []struct {
		ttl  *int64
		want time.Duration
	}{
		{nil, 5 * time.Minute},
		{ms(0), time.Second},
		{ms(-5), 5 * time.Minute},
		{ms(30_000), 30 * time.Second},
		{ms(3_600_000), 5 * time.Minute},
	}
	for _, tc := range cases {
		if got := s.listTTL(tc.ttl); got != tc.want {
			t.Errorf("listTTL(%v) = %s; want %s", tc.ttl, got, tc.want)
		}
	}

	// And against a server: a short ttlMs brings the next tools/list
	// sooner than the pool's TTL of an hour.
	srv := newRecordingServer(t, headerServer(), map[string]func(map[string]any){"tools/list": func(res map[string]any) {
		res["ttlMs"] = 0
	}})
	pool := newTestPool(t, []Config{{Config: toolsource.Config{Name: "h"}, URL: srv.URL, Transport: TransportStreamable}}, withRefreshTTL(time.Hour))
	waitTools(t, pool, "h", "route")
	before := pool.Stats().ToolLists
	deadline := time.Now().Add(30 * time.Second)
	for pool.Stats().ToolLists == before {
		if time.Now().After(deadline) {
			t.Fatal("a catalog whose ttlMs was 0 was not listed again")
		}
		if _, err := pool.Tools(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestQuestionFromAServer: a 2026-07-28 server's input_required comes back
// as the *execution.Question (elicitations by key, its state), scrubbed of
// the configured secrets a hostile server quotes in it; the retry carries
// the answers and the state; sampling is refused with a clear TOOL_ERROR.
func TestQuestionFromAServer(t *testing.T) {
	const secret = "q-s3cr3t-header"
	m := server.NewMCPServer("asks", "1.0", server.WithToolCapabilities(true))
	var got struct {
		sync.Mutex
		state     string
		responses mcpgo.InputResponses
	}
	m.AddTool(mcpgo.NewTool("ask", mcpgo.WithReadOnlyHintAnnotation(true)), func(_ context.Context, r mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
		if len(r.Params.InputResponses) > 0 {
			got.Lock()
			got.state, got.responses = r.Params.RequestState, r.Params.InputResponses
			got.Unlock()
			return mcpgo.NewToolResultText("thanks"), nil
		}
		return server.NewInputRequestBuilder("st-1").Elicit("q", mcpgo.ElicitationParams{
			Message:         "you sent " + r.Header.Get("Authorization") + "; go on?",
			RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean"}}},
		}).ToolResult(), nil
	})
	m.AddTool(mcpgo.NewTool("sample", mcpgo.WithReadOnlyHintAnnotation(true)), func(context.Context, mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
		return server.NewInputRequestBuilder("").Sample("s", mcpgo.CreateMessageParams{MaxTokens: 1}).ToolResult(), nil
	})
	rs := newRecordingServer(t, m, nil)
	p := newTestPool(t, []Config{{Config: toolsource.Config{Name: "a", Headers: map[string]string{"Authorization": "Bearer " + secret}}, URL: rs.URL, Transport: TransportStreamable}})
	waitTools(t, p, "a", "ask", "sample")

	_, err := p.Call(context.Background(), "a", "ask", json.RawMessage(`{}`), CallOptions{})
	var q *execution.Question
	if !errors.As(err, &q) || q.Server != "a" || q.Tool != "ask" || q.RequestState != "st-1" || len(q.Requests) != 1 {
		t.Fatalf("want the server's question, got %#v", err)
	}
	if strings.Contains(string(q.Requests["q"]), secret) || !strings.Contains(string(q.Requests["q"]), "go on?") {
		t.Fatalf("question %s: the configured secret must be scrubbed, the rest kept", q.Requests["q"])
	}
	// The capability was declared, per request.
	if caps := rs.requests("tools/call")[0].meta[mcpgo.MetaKeyClientCapabilities]; !strings.Contains(string(caps), `"elicitation"`) {
		t.Errorf("client capabilities %s: want elicitation", caps)
	}

	out, err := p.Call(context.Background(), "a", "ask", json.RawMessage(`{}`), CallOptions{Retry: &execution.Retry{
		InputResponses: map[string]json.RawMessage{"q": json.RawMessage(`{"action":"accept","content":{"ok":true}}`)}, RequestState: q.RequestState}})
	if err != nil || string(out) != `"thanks"` {
		t.Fatalf("retry: %s %v", out, err)
	}
	got.Lock()
	state, ans := got.state, server.ElicitationResponse(got.responses, "q")
	got.Unlock()
	if state != "st-1" || ans == nil || ans.Action != mcpgo.ElicitationResponseActionAccept {
		t.Fatalf("the server got state %q, answer %+v", state, ans)
	}

	_, err = p.Call(context.Background(), "a", "sample", json.RawMessage(`{}`), CallOptions{})
	if codeOf(err) != "TOOL_ERROR" || !strings.Contains(err.Error(), "sampling") {
		t.Fatalf("sampling: %v; want TOOL_ERROR naming it", err)
	}
}
