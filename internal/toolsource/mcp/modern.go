package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
)

// MCP 2026-07-28 on the client's own requests. mcp-go's client negotiates
// the era (server/discover first, initialize when the server does not
// know it) and decorates the requests of its typed methods; the client sends
// tools/list and tools/call straight through the transport (conn.send), so
// it applies the same per-request obligations itself, with mcp-go's own
// helpers: the protocol version, client identity and capabilities in every
// request's _meta (SEP-2575), and the Mcp-Method, Mcp-Name and Mcp-Param-*
// headers (SEP-2243).

// ModernProtocolVersion is the stateless revision asked for first.
const ModernProtocolVersion = mcpgo.ProtocolVersion20260728

// minListTTL bounds a server's ttlMs on tools/list from below: zero
// ("immediately stale") must not turn every call into a tools/list.
const minListTTL = time.Second

// clientCapabilities is what the client declares on 2026-07-28: form-mode
// elicitation, which a person answers while the call waits parked
// (question), or in line (pml run); it has no model to sample and no file
// system to offer roots of. On 2025-11-25 it declares elicitation only
// with an answerer (initRequest, elicit.go): a server there asks with a
// request on the call's own stream, held open while it waits, which no
// suspended execution can answer from another process.
func clientCapabilities() mcpgo.ClientCapabilities {
	return mcpgo.ClientCapabilities{Elicitation: &mcpgo.ElicitationCapability{Form: &struct{}{}}}
}

// question reads a tools/call result for a 2026-07-28 input_required
// answer (SEP-2322): nil when the server answered; the server's
// elicitation requests and state when it asks; a TOOL_ERROR when it asks
// for what the client does not offer (sampling, roots) or says nothing
// readable.
func question(raw json.RawMessage, server, tool string) (*execution.Question, *fault.Error) {
	var r struct {
		ResultType    string `json:"resultType"`
		InputRequests map[string]struct {
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		} `json:"inputRequests"`
		RequestState string `json:"requestState"`
	}
	if err := json.Unmarshal(raw, &r); err != nil || r.ResultType != string(mcpgo.ResultTypeInputRequired) {
		return nil, nil
	}
	q := &execution.Question{Server: server, Tool: tool, RequestState: r.RequestState, Requests: make(map[string]json.RawMessage, len(r.InputRequests))}
	for key, ir := range r.InputRequests {
		switch mcpgo.MCPMethod(ir.Method) {
		case mcpgo.MethodElicitationCreate:
			var p mcpgo.ElicitationParams
			if err := json.Unmarshal(ir.Params, &p); err != nil || p.Message == "" {
				return nil, fault.New(fault.ToolError, "the server asked question %q without a message", key)
			}
			q.Requests[key] = ir.Params
		case mcpgo.MethodSamplingCreateMessage:
			return nil, fault.New(fault.ToolError, "the server asked for a completion from a model (sampling/createMessage) before it would answer: "+
				"pml offers none, and did not declare the sampling capability")
		case mcpgo.MethodListRoots:
			return nil, fault.New(fault.ToolError, "the server asked for the client's roots (roots/list) before it would answer: "+
				"a script has no file system to offer, and pml did not declare the roots capability")
		default:
			return nil, fault.New(fault.ToolError, "the server asked %q of the client before it would answer, which MCP does not define", ir.Method)
		}
	}
	return q, nil
}

// withMeta returns params with the 2026-07-28 request metadata added to
// its _meta (keeping what is there, such as the trace context).
func withMeta(params any, version string) (json.RawMessage, error) {
	fields := map[string]json.RawMessage{}
	if params != nil {
		b, err := json.Marshal(params)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(b, &fields); err != nil {
			return nil, err
		}
	}
	meta := map[string]any{}
	if raw, ok := fields["_meta"]; ok {
		if err := json.Unmarshal(raw, &meta); err != nil {
			return nil, err
		}
	}
	meta[mcpgo.MetaKeyProtocolVersion] = version
	meta[mcpgo.MetaKeyClientCapabilities] = clientCapabilities()
	meta[mcpgo.MetaKeyClientInfo] = clientInfo
	b, err := json.Marshal(meta)
	if err != nil {
		return nil, err
	}
	fields["_meta"] = b
	return json.Marshal(fields)
}

// modernHeaders are the SEP-2243 headers of a request: Mcp-Method,
// Mcp-Name, and for a tool whose input schema binds parameters to headers
// (x-mcp-header), its Mcp-Param-* headers.
func modernHeaders(version, method string, params json.RawMessage, tool *mcpgo.Tool) http.Header {
	h := http.Header{}
	for k, v := range mcpgo.StandardHeaders(version, mcpgo.MCPMethod(method), params) {
		h.Set(k, v)
	}
	if tool != nil {
		for k, v := range mcpgo.GenerateParamHeaders(tool, params) {
			h.Set(k, v)
		}
	}
	return h
}

// headerTool is the tool definition mcp-go's header helpers read, when
// the input schema binds any parameter to a header; nil when none does
// (most tools: no work on their calls).
func headerTool(name string, schema json.RawMessage) *mcpgo.Tool {
	if !bytes.Contains(schema, []byte("x-mcp-header")) {
		return nil
	}
	return &mcpgo.Tool{Name: name, RawInputSchema: schema}
}

// listTTL is how long a tools/list answer stays fresh: the Kind's refresh
// TTL, or less when the server's ttlMs (a max-age) says so. cacheScope
// needs no handling: the server's catalog is one authorization context (the
// server's configured credentials, whoever runs the script).
func (s *remote) listTTL(ttlMs *int64) time.Duration {
	ttl := s.k.refreshTTL()
	if ttlMs != nil && *ttlMs >= 0 {
		ttl = min(ttl, max(time.Duration(*ttlMs)*time.Millisecond, minListTTL))
	}
	return ttl
}

// discover probes a streamable HTTP server for 2026-07-28 with
// server/discover, sent as every request on that revision is (conn.send),
// and sets c up for it when the server names it among its versions. A
// server that refuses the version while naming it (the version header and
// _meta must agree; a gateway may check first) is asked once more. Any
// other answer is the caller's cue to fall back to the handshake. The probe
// has no bound of its own: over HTTP every request is answered, and the
// connect budget bounds it.
func (s *remote) discover(ctx context.Context, c *conn) (*mcpgo.DiscoverResult, error) {
	hc, ok := c.tr.(transport.HTTPConnection)
	if !ok {
		return nil, errors.New("not an HTTP transport")
	}
	c.protocol, c.modern = ModernProtocolVersion, true
	hc.SetProtocolVersion(ModernProtocolVersion)
	var raw json.RawMessage
	var err error
	for range 2 {
		raw, err = c.send(ctx, string(mcpgo.MethodServerDiscover), nil, nil)
		var rpc *rpcError
		if !errors.As(err, &rpc) || rpc.Code != mcpgo.UNSUPPORTED_PROTOCOL_VERSION || !slices.Contains(rpc.supported(), ModernProtocolVersion) {
			break
		}
	}
	var res mcpgo.DiscoverResult
	if err == nil {
		if jerr := json.Unmarshal(raw, &res); jerr != nil {
			err = &protocolError{msg: "server/discover result: " + jerr.Error()}
		} else if !slices.Contains(res.SupportedVersions, ModernProtocolVersion) {
			err = fmt.Errorf("server/discover names versions %v, not %s", res.SupportedVersions, ModernProtocolVersion)
		}
	}
	if err != nil {
		c.protocol, c.modern = "", false
		hc.SetProtocolVersion("")
		return nil, err
	}
	return &res, nil
}

// listen keeps a subscriptions/listen stream open on a 2026-07-28
// connection whose server announces tool list changes, so that they
// refresh the catalog as the GET stream's do on 2025-11-25: the transport
// hands the stream's notifications to the client's handler (open). The
// stream is reopened (after a pause that doubles up to the reconnect
// maximum of the Set's retry policy) when the server ends it, until the connection ends; a server
// that does not know the method is left to the catalog's TTL.
func (s *remote) listen(c *conn) {
	params := mcpgo.SubscriptionsListenParams{Notifications: mcpgo.SubscriptionFilter{ToolsListChanged: true}}
	// Paced as reconnects are: the stream's end may be the server's.
	pace := s.h.Env().Retry.OrDefault()
	wait := pace.Initial
	for {
		start := time.Now()
		_, err := c.send(c.ctx, string(mcpgo.MethodSubscriptionsListen), params, nil)
		if c.ctx.Err() != nil {
			return
		}
		var rpc *rpcError
		if errors.As(err, &rpc) && rpc.Code == mcpgo.METHOD_NOT_FOUND {
			s.log.Info("mcp server offers no subscriptions/listen; tool list changes are seen on refresh only")
			return
		}
		s.log.Debug("mcp subscriptions/listen ended; reopening", "err", err)
		// A stream that lasted starts the schedule over.
		if time.Since(start) > pace.Max {
			wait = pace.Initial
		}
		t := time.NewTimer(wait)
		select {
		case <-c.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		// A notification missed while the stream was down costs a refresh.
		s.scheduleRefresh(c)
		wait = min(2*wait, pace.Max)
	}
}

// alive asks the server whether it is still there: ping on 2025-11-25,
// server/discover on 2026-07-28 (which has no ping).
func (c *conn) alive(ctx context.Context) error {
	if c.modern {
		_, err := c.send(ctx, string(mcpgo.MethodServerDiscover), nil, nil)
		return err
	}
	//lint:ignore SA1019 ping is part of 2025-11-25, which this connection speaks
	return c.client.Ping(ctx)
}
