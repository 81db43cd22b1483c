package mcpserver_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/journal"
	"github.com/pml-sandbox/pml/internal/mcpserver"
	"github.com/pml-sandbox/pml/internal/testutil/fronttest"
	"github.com/pml-sandbox/pml/internal/testutil/mcptest"
	mcpkind "github.com/pml-sandbox/pml/internal/toolsource/mcp"
)

// progressServer is the MCP server over the demo tools and sources,
// sending notifications as pml serve does.
func progressServer(t *testing.T, sources ...execution.ToolSource) *httptest.Server {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	svc := executor.New(engine, executor.Options{Sources: append([]execution.ToolSource{demoserver.Source{}}, sources...), Logger: log})
	return serve(t, mcpserver.Options{Service: svc, Logger: log, Streaming: true}, "")
}

// TestMCPProgressDuringAScript: a client that sends a progress token hears
// of each call while the script runs (the gate opens only once the start
// of the blocked call has been heard) and receives the console output as
// log messages; under either protocol era.
func TestMCPProgressDuringAScript(t *testing.T) {
	for _, version := range []string{mcpkind.ProtocolVersion, ""} {
		t.Run("protocol "+version, func(t *testing.T) {
			gate := fronttest.GateSource{Open: make(chan struct{})}
			srv := progressServer(t, gate)
			c := mcptest.Streamable(t, srv.URL+"/mcp", version)
			if version == "" {
				// Since 2026-07-28 a request asks for log messages with a
				// level (deprecated there, and still what clients send).
				//lint:ignore SA1019 the deprecated feature is the one under test
				if err := c.SetLevel(context.Background(), mcp.SetLevelRequest{Params: mcp.SetLevelParams{Level: mcp.LoggingLevelInfo}}); err != nil {
					t.Fatal(err)
				}
			}
			n := fronttest.Listen(c)
			var req mcp.CallToolRequest
			req.Params.Name = "execute_code"
			req.Params.Arguments = map[string]any{"code": "console.log('warming up'); await mcp.demo.add({a: 1, b: 2}); return await mcp.gate.wait({})"}
			req.Params.Meta = &mcp.Meta{ProgressToken: "tok-1"}
			done := make(chan *mcp.CallToolResult, 1)
			go func() {
				res, err := c.CallTool(context.Background(), req)
				if err != nil {
					t.Error(err)
				}
				done <- res
			}()
			n.WaitFor(t, "notifications/progress", "gate:wait started")
			n.WaitFor(t, "notifications/message", "warming up")
			select {
			case <-done:
				t.Fatal("the call ended before its gate opened")
			default:
			}
			close(gate.Open)
			res := <-done
			if res == nil || res.IsError {
				t.Fatalf("execute_code: %+v", res)
			}
			if !n.Has("notifications/progress", `"progressToken":"tok-1"`) || !n.Has("notifications/progress", "demo:add ended") {
				t.Errorf("progress notifications: %+v", n.List())
			}
		})
	}
}

// TestMCPNoProgressWithoutAToken: without a progress token the answer is
// plain JSON, as before (no notifications).
func TestMCPNoProgressWithoutAToken(t *testing.T) {
	srv := progressServer(t)
	c := mcptest.Streamable(t, srv.URL+"/mcp", mcpkind.ProtocolVersion)
	n := fronttest.Listen(c)
	var req mcp.CallToolRequest
	req.Params.Name = "execute_code"
	req.Params.Arguments = map[string]any{"code": "console.log('x'); return await mcp.demo.add({a: 1, b: 2})"}
	if res, err := c.CallTool(context.Background(), req); err != nil || res.IsError {
		t.Fatalf("%+v %v", res, err)
	}
	if l := n.List(); len(l) > 0 {
		t.Errorf("notifications without a token: %+v", l)
	}
}

// TestMCPTextWithinBudget: the text answer fits the budget (the server's,
// or the call's), cuts a long result with a marker saying how much, and
// summarises calls; structuredContent keeps everything.
func TestMCPTextWithinBudget(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	svc := executor.New(engine, executor.Options{Policy: local, Sources: []execution.ToolSource{demoserver.Source{}}, Logger: log})
	srv := serve(t, mcpserver.Options{Service: svc, Logger: log, Settings: mcpserver.Settings{TextBytes: 4000}}, "")
	c := mcptest.Streamable(t, srv.URL+"/mcp", mcpkind.ProtocolVersion)
	code := `for (let i = 0; i < 300; i++) console.log("line " + i + " " + "y".repeat(50));
for (let i = 0; i < 40; i++) await mcp.demo.add({a: i, b: 1});
try { await mcp.demo.fail({message: "no"}) } catch {}
return "x".repeat(100000)`
	tests := []struct {
		name   string
		args   map[string]any
		budget int
	}{
		{"server budget", map[string]any{"code": code}, 4000},
		{"call budget", map[string]any{"code": code, "max_text_bytes": 10000}, 10000},
		{"summary in structuredContent", map[string]any{"code": code, "call_detail": "summary"}, 4000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var req mcp.CallToolRequest
			req.Params.Name = "execute_code"
			req.Params.Arguments = tc.args
			res, err := c.CallTool(context.Background(), req)
			if err != nil || res.IsError || len(res.Content) != 1 {
				t.Fatalf("%+v %v", res, err)
			}
			text := res.Content[0].(mcp.TextContent).Text
			if len(text) > tc.budget || len(text) < tc.budget*3/4 {
				t.Errorf("text is %d bytes, want at most and close to %d", len(text), tc.budget)
			}
			for _, want := range []string{"ok (execution ex_", "result:\n\"xxx", "bytes of the result cut", "of 100002 bytes of the result cut",
				"calls: 41, 1 failed — demo:add ×40, demo:fail ×1 (1 failed)", "failed call #41 demo:fail: TOOL_ERROR", "console (300 lines)", "[log] line 0 "} {
				if !strings.Contains(text, want) {
					t.Errorf("text lacks %q:\n%s", want, text)
				}
			}
			raw, _ := json.Marshal(res.StructuredContent)
			var r execution.Response
			if err := json.Unmarshal(raw, &r); err != nil || len(r.Result) != 100002 || len(r.Logs) != 300 {
				t.Fatalf("structuredContent is not the whole document (%v): %d result bytes, %d logs", err, len(r.Result), len(r.Logs))
			}
			if summary := tc.args["call_detail"] == "summary"; summary != (r.CallSummary != nil) || summary == (len(r.Calls) == 41) {
				t.Errorf("call_detail %v: %d calls, summary %+v", tc.args["call_detail"], len(r.Calls), r.CallSummary)
			}
		})
	}
}

// local is the policy of local use (pml run, pml serve on loopback): the
// caller is the person at the keyboard and decides.
var local = approval.Policy{CallerDecides: true}

// TestMCPResultListsEffects: the MCP result's structuredContent lists the
// run's effects — its writes, with their keys and statuses — and not its
// reads.
func TestMCPResultListsEffects(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	svc := executor.New(engine, executor.Options{Policy: local, Sources: []execution.ToolSource{demoserver.Source{Set: demoserver.New()}}, Logger: log})
	srv := serve(t, mcpserver.Options{Service: svc, Logger: log}, "")
	c := mcptest.Streamable(t, srv.URL+"/mcp", mcpkind.ProtocolVersion)
	var req mcp.CallToolRequest
	req.Params.Name = "execute_code"
	req.Params.Arguments = map[string]any{"code": `await mcp.demo.kv_get({key: "a"}); await mcp.demo.kv_set({key: "a", value: 1}); return 1`}
	res, err := c.CallTool(context.Background(), req)
	if err != nil || res.IsError {
		t.Fatalf("%+v %v", res, err)
	}
	raw, _ := json.Marshal(res.StructuredContent)
	var r execution.Response
	if err := json.Unmarshal(raw, &r); err != nil || len(r.Effects) != 1 {
		t.Fatalf("structuredContent %s", raw)
	}
	if e := r.Effects[0]; e.CallID != 2 || e.Tool != "kv_set" || e.Status != "applied" || e.Key != journal.Key(r.ExecutionID, 2) {
		t.Fatalf("effect %+v", e)
	}
}

// TestMCPSearchHitDeclarations: each search_tools hit carries its own
// declaration, the types of the call it names, not the catalog's.
func TestMCPSearchHitDeclarations(t *testing.T) {
	srv := progressServer(t)
	c := mcptest.Streamable(t, srv.URL+"/mcp", mcpkind.ProtocolVersion)
	var req mcp.CallToolRequest
	req.Params.Name = "search_tools"
	req.Params.Arguments = map[string]any{"query": "add two numbers", "limit": 1}
	res, err := c.CallTool(context.Background(), req)
	if err != nil || res.IsError {
		t.Fatalf("%+v %v", res, err)
	}
	raw, _ := json.Marshal(res.StructuredContent)
	var got struct {
		Tools []struct{ Call, Declaration string }
	}
	if err := json.Unmarshal(raw, &got); err != nil || len(got.Tools) != 1 {
		t.Fatalf("%s: %v", raw, err)
	}
	h := got.Tools[0]
	if !strings.HasPrefix(h.Call, "mcp.demo.add") || !strings.Contains(h.Declaration, "add(args") || !strings.Contains(h.Declaration, "): Promise<") ||
		strings.Contains(h.Declaration, "declare const") {
		t.Fatalf("hit %+v", h)
	}
}
