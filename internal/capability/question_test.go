package capability_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/testutil/askserver"
	"github.com/pml-sandbox/pml/internal/toolsource"
	mcpkind "github.com/pml-sandbox/pml/internal/toolsource/mcp"
)

// TestRemoteQuestionInsideACapabilityIsRefused: a remote server's question
// about a call a capability made cannot be put to anyone (a suspended tree
// of runs is not supported), as a call needing approval cannot: the call
// fails FORBIDDEN saying so and quoting the question, while the same call
// from the root script parks on it.
func TestRemoteQuestionInsideACapabilityIsRefused(t *testing.T) {
	ask, err := askserver.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ask.Close() })
	pool, err := new(mcpkind.Kind).NewSet(context.Background(), toolsource.Env{Logger: slog.New(slog.DiscardHandler)}, mcpkind.Config{Config: toolsource.Config{Name: "ask"}, URL: ask.URL, Transport: "streamable"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pool.Close() })
	reg := capability.NewFileRegistry(filepath.Join(t.TempDir(), "caps.json"))
	if _, err := reg.Save(context.Background(), capability.Capability{Name: "tidy:drop", Code: `return await mcp.ask.confirm_delete({item: "old"})`}, nil); err != nil {
		t.Fatal(err)
	}
	svc, _ := inProcess(reg, executor.Options{Policy: local, Sources: []execution.ToolSource{pool}, Logger: slog.New(slog.DiscardHandler),
		Suspensions: suspend.NewFile(t.TempDir(), suspend.Options{})}, nil)
	r := svc.Execute(context.Background(), execution.Request{Code: `return await mcp.tidy.drop({})`, Approval: execution.ApprovalSuspend})
	if r.OK || r.Status != "" || r.Error == nil || r.Error.Code != fault.Forbidden ||
		!strings.Contains(r.Error.Message, "a question inside a capability") || !strings.Contains(r.Error.Message, "Delete old?") {
		t.Fatalf("status %q error %+v; want FORBIDDEN about a question inside a capability", r.Status, r.Error)
	}
	r = svc.Execute(context.Background(), execution.Request{Code: `return await mcp.ask.confirm_delete({item: "old"})`, Approval: execution.ApprovalSuspend})
	if r.Status != execution.StatusSuspended || len(r.Pending) != 1 || r.Pending[0].Reason != execution.PendingQuestion {
		t.Fatalf("the root script's call: status %q error %+v pending %+v; want it parked on the question", r.Status, r.Error, r.Pending)
	}
}
