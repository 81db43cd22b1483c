package mcpclient

import (
	"bytes"
	"context"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/fault"
)

// TestGuardGlobsIgnoreCase: require_approval and deny — globs that guard —
// catch a tool whatever the case of its name; allow, which grants, admits
// only what it spells.
func TestGuardGlobsIgnoreCase(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	tools := []wireTool{{Name: "Delete_all"}, {Name: "DELETE_ONE"}, {Name: "Drop_table"}, {Name: "read_me"}, {Name: "READ_ALL"}, {Name: "wipe"}}
	build := func(cfg ServerConfig) (*toolSet, map[string]catalog.Tool) {
		s := &remote{cfg: cfg, log: log, drops: catalog.NewDropLog(log)}
		ts := s.buildToolSet(&conn{}, tools)
		visible := map[string]catalog.Tool{}
		for _, tl := range ts.visible {
			visible[tl.Name] = tl
		}
		return ts, visible
	}
	ts, visible := build(ServerConfig{Name: "s", RequireApproval: []string{"delete_*"}, Deny: []string{"drop_*"}})
	for _, name := range []string{"Delete_all", "DELETE_ONE"} {
		if tl, ok := visible[name]; !ok || !tl.RequireApproval {
			t.Errorf("%s: visible %v, require_approval %v; want it to need approval", name, ok, tl.RequireApproval)
		}
	}
	if e := ts.lookup("Drop_table"); e == nil || !e.denied {
		t.Error(`"drop_*" in the deny list does not hide Drop_table`)
	}
	_, visible = build(ServerConfig{Name: "s", Allow: []string{"read_*", "Wipe"}})
	if _, ok := visible["read_me"]; !ok {
		t.Error("read_me is not allowed")
	}
	for _, name := range []string{"READ_ALL", "wipe"} {
		if _, ok := visible[name]; ok {
			t.Errorf("%s: the allow list admitted a name it does not spell", name)
		}
	}
}

// TestUnannotatedToolsFollowTheSpec: a real server's tool that says
// nothing about itself is destructive, as MCP's defaults have it — refused
// where the server does not allow destructive tools, needing approval
// where it does — unless the deployment says the server under-annotates
// (assume_not_destructive), which takes what it leaves out as not
// destructive, and never overrides what it says.
func TestUnannotatedToolsFollowTheSpec(t *testing.T) {
	m := server.NewMCPServer("terse", "1.0", server.WithToolCapabilities(true))
	ok := func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("ok"), nil
	}
	m.AddTool(mcp.Tool{Name: "mystery", InputSchema: mcp.ToolInputSchema{Type: "object"}}, ok)
	m.AddTool(mcp.Tool{Name: "says_destructive", InputSchema: mcp.ToolInputSchema{Type: "object"},
		Annotations: mcp.ToolAnnotation{DestructiveHint: mcp.ToBoolPtr(true)}}, ok)
	m.AddTool(mcp.NewTool("reader", mcp.WithReadOnlyHintAnnotation(true)), ok)
	srv := httptest.NewServer(server.NewStreamableHTTPServer(m))
	t.Cleanup(srv.Close)

	p := newTestPool(t, []ServerConfig{
		{Name: "strict", URL: srv.URL, Transport: TransportStreamable},
		{Name: "trusting", URL: srv.URL, Transport: TransportStreamable, AssumeNotDestructive: true},
	})
	waitTools(t, p, "strict", "mystery", "reader")
	waitTools(t, p, "trusting", "mystery", "reader")
	tools, err := p.Tools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range tools {
		want := tl.Name != "reader" && (tl.Server == "strict" || tl.Name == "says_destructive")
		if tl.IsDestructive() != want {
			t.Errorf("%s: destructive %v, want %v (annotations %+v)", tl.FullName(), tl.IsDestructive(), want, tl.Annotations)
		}
	}
	for _, tc := range []struct {
		server, tool string
		code         fault.Code
	}{
		{"strict", "mystery", fault.Forbidden},
		{"strict", "reader", ""},
		{"trusting", "mystery", ""},
		{"trusting", "says_destructive", fault.Forbidden},
	} {
		_, err := call(t, p, tc.server, tc.tool, `{}`, CallOptions{AllowDestructive: true})
		if codeOf(err) != tc.code {
			t.Errorf("%s:%s: %v, want %q", tc.server, tc.tool, err, tc.code)
		}
	}
}
