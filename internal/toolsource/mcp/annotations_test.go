package mcp

import (
	"bytes"
	"context"
	"log/slog"
	"net/http/httptest"
	"testing"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/toolsource"
)

// TestGuardGlobsIgnoreCase: require_approval and deny — globs that guard —
// catch a tool whatever the case of its name; allow, which grants, admits
// only what it spells.
func TestGuardGlobsIgnoreCase(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	tools := []wireTool{{Name: "Delete_all"}, {Name: "DELETE_ONE"}, {Name: "Drop_table"}, {Name: "read_me"}, {Name: "READ_ALL"}, {Name: "wipe"}}
	build := func(cfg Config) (*Pool, map[string]catalog.Tool) {
		p := listed(t, cfg, log, tools, 0)
		_, visible := visibleTools(t, p)
		return p, visible
	}
	p, visible := build(Config{Config: toolsource.Config{Name: "s", RequireApproval: []string{"delete_*"}, Deny: []string{"drop_*"}}})
	for _, name := range []string{"Delete_all", "DELETE_ONE"} {
		if tl, ok := visible[name]; !ok || !tl.RequireApproval {
			t.Errorf("%s: visible %v, require_approval %v; want it to need approval", name, ok, tl.RequireApproval)
		}
	}
	if _, err := call(t, p, "s", "Drop_table", `{}`, CallOptions{AllowDestructive: true}); codeOf(err) != fault.Forbidden {
		t.Errorf(`"drop_*" in the deny list does not hide Drop_table: %v`, err)
	}
	_, visible = build(Config{Config: toolsource.Config{Name: "s", Allow: []string{"read_*", "Wipe"}}})
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
	ok := func(context.Context, mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
		return mcpgo.NewToolResultText("ok"), nil
	}
	m.AddTool(mcpgo.Tool{Name: "mystery", InputSchema: mcpgo.ToolInputSchema{Type: "object"}}, ok)
	m.AddTool(mcpgo.Tool{Name: "says_destructive", InputSchema: mcpgo.ToolInputSchema{Type: "object"},
		Annotations: mcpgo.ToolAnnotation{DestructiveHint: mcpgo.ToBoolPtr(true)}}, ok)
	m.AddTool(mcpgo.NewTool("reader", mcpgo.WithReadOnlyHintAnnotation(true)), ok)
	srv := httptest.NewServer(server.NewStreamableHTTPServer(m))
	t.Cleanup(srv.Close)

	p := newTestPool(t, []Config{
		{Config: toolsource.Config{Name: "strict"}, URL: srv.URL, Transport: TransportStreamable},
		{Config: toolsource.Config{Name: "trusting"}, URL: srv.URL, Transport: TransportStreamable, AssumeNotDestructive: true},
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
