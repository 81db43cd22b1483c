package fronttest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/pml-sandbox/pml/internal/testutil/mcptest"
)

// WriteThenDelete keeps a value from before the question; a destructive
// call asks the client's user; a rejection is caught.
const WriteThenDelete = `const keep = 41;
await mcp.demo.kv_set({key: "k", value: 1});
try {
  await mcp.demo.kv_delete({key: "k"});
} catch (e) {
  return {keep, code: e.code, message: e.message};
}
return {keep, deleted: true};`

// Person answers elicitations as a client's user would, and remembers
// what it was asked.
type Person struct {
	mu     sync.Mutex
	Asked  []mcp.ElicitationParams
	Answer func(mcp.ElicitationParams) *mcp.ElicitationResult
}

// Elicit implements client.ElicitationHandler.
func (p *Person) Elicit(_ context.Context, r mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	p.mu.Lock()
	p.Asked = append(p.Asked, r.Params)
	p.mu.Unlock()
	return p.Answer(r.Params), nil
}

// Accept answers a form with decision, and a reason.
func Accept(decision string) func(mcp.ElicitationParams) *mcp.ElicitationResult {
	return func(mcp.ElicitationParams) *mcp.ElicitationResult {
		return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionAccept,
			Content: map[string]any{"decision": decision, "reason": "checked by hand"}}}
	}
}

// Decline declines whatever is asked.
func Decline(mcp.ElicitationParams) *mcp.ElicitationResult {
	return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionDecline}}
}

// ElicitingClient is an MCP client whose user is p, speaking version
// ("" for the newest, 2026-07-28), through rt when set.
func ElicitingClient(t *testing.T, url, version string, p *Person, rt http.RoundTripper) *client.Client {
	t.Helper()
	var opts []transport.StreamableHTTPCOption
	if rt != nil {
		opts = append(opts, transport.WithHTTPBasicClient(&http.Client{Transport: rt}))
	}
	tr, err := transport.NewStreamableHTTP(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	copts := []client.ClientOption{client.WithElicitationHandler(p)}
	if version != "" {
		copts = append(copts, client.WithProtocolVersion(version))
	}
	return mcptest.Connect(t, client.NewClient(tr, copts...), version)
}

// ExecuteCode calls execute_code with code as c, and decodes its
// structuredContent.
func ExecuteCode(t *testing.T, c *client.Client, code string) (*mcp.CallToolResult, map[string]any) {
	t.Helper()
	return CallTool(t, c, "execute_code", map[string]any{"code": code})
}

// CallTool calls tool name with args as c, and decodes its
// structuredContent.
func CallTool(t *testing.T, c *client.Client, name string, args map[string]any) (*mcp.CallToolResult, map[string]any) {
	t.Helper()
	var req mcp.CallToolRequest
	req.Params.Name = name
	req.Params.Arguments = args
	res, err := c.CallTool(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(res.StructuredContent)
	var doc map[string]any
	_ = json.Unmarshal(raw, &doc)
	return res, doc
}

// StateTamperer rewrites the requestState of every retry that carries one
// with Change, and records the last retry it let through as sent.
type StateTamperer struct {
	Change func(string) string
	mu     sync.Mutex
	last   *http.Request
	body   []byte
}

// Last is the last retry it changed, and its body as sent.
func (s *StateTamperer) Last() (*http.Request, []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last, s.body
}

// RoundTrip sends r, its requestState changed: the tamperer stands where a
// client's transport does, so the server sees what an attacker would send.
func (s *StateTamperer) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		body, _ := io.ReadAll(r.Body)
		var msg map[string]any
		if json.Unmarshal(body, &msg) == nil {
			if params, ok := msg["params"].(map[string]any); ok {
				if st, ok := params["requestState"].(string); ok {
					params["requestState"] = s.Change(st)
					body, _ = json.Marshal(msg)
					s.mu.Lock()
					s.last, s.body = r.Clone(context.Background()), body
					s.mu.Unlock()
				}
			}
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
	}
	return http.DefaultTransport.RoundTrip(r)
}

// BothModes declares form and URL elicitation.
var BothModes = mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapability{Form: &struct{}{}, URL: &struct{}{}}}

// ToolsCall posts one 2026-07-28 JSON-RPC request as the agent's client
// would, declaring both elicitation modes, and returns the result.
func ToolsCall(t *testing.T, base string, params map[string]any) map[string]any {
	t.Helper()
	params["_meta"] = map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
		"io.modelcontextprotocol/clientCapabilities": BothModes, "io.modelcontextprotocol/clientInfo": map[string]any{"name": "agent", "version": "1"}}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
	req, _ := http.NewRequest(http.MethodPost, base+"/mcp", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set(mcp.HeaderMethod, "tools/call")
	req.Header.Set(mcp.HeaderName, params["name"].(string))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if i := bytes.Index(raw, []byte("data: ")); i >= 0 {
		raw = raw[i+6:]
	}
	var msg struct {
		Result map[string]any `json:"result"`
		Error  any            `json:"error"`
	}
	if err := json.Unmarshal(raw, &msg); err != nil || msg.Result == nil {
		t.Fatalf("tools/call: %s", raw)
	}
	return msg.Result
}
