package fronttest

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/runs"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/trace"
)

// readOnly is GateSource's annotation.
var readOnly = true

// GateSource has one tool, gate:wait, whose calls block until the test
// opens the gate (closes Open): a call that is visibly still running.
type GateSource struct{ Open chan struct{} }

// Tools lists gate:wait.
func (GateSource) Tools(context.Context) ([]catalog.Tool, error) {
	// Read-only, as it says: MCP's defaults make a tool that says nothing
	// destructive.
	return []catalog.Tool{{Server: "gate", Name: "wait", Kind: trace.KindMCP, Annotations: catalog.Annotations{ReadOnly: &readOnly}}}, nil
}

// Call waits for the gate, or for the call to be cancelled (the script
// ended without it).
func (g GateSource) Call(ctx context.Context, _ catalog.Tool, _ json.RawMessage, _ execution.CallOptions) (json.RawMessage, error) {
	select {
	case <-g.Open:
		return json.RawMessage(`"opened"`), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Async is a runs service over the demo tools with file stores, as the
// Lambda runs executions, under a policy where arn:approver approves.
type Async struct {
	Exec   *runs.Service
	KV     *demoserver.Tools // the demo tools' store its scripts write to
	Policy approval.Policy
	Log    *slog.Logger
}

// NewAsync returns the service on engine, its store holding k = 1.
func NewAsync(t *testing.T, engine *guest.Engine) Async {
	t.Helper()
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	policy := approval.Policy{Approvers: []string{"arn:approver"}}
	kv := demoserver.New()
	if _, err := kv.Call(context.Background(), "kv_set", json.RawMessage(`{"key": "k", "value": 1}`)); err != nil {
		t.Fatal(err)
	}
	svc := executor.New(engine, executor.Options{Sources: []execution.ToolSource{demoserver.Source{Set: kv}}, Logger: log, Policy: policy,
		Suspensions: suspend.NewFile(filepath.Join(dir, "susp"), suspend.Options{})})
	rs := runs.New(svc, runs.Options{Store: suspend.NewFileRuns(filepath.Join(dir, "runs"), suspend.Options{}), Policy: policy, Logger: log,
		PollEvery: 20 * time.Millisecond})
	t.Cleanup(func() { _ = rs.Close(context.Background()) })
	return Async{Exec: rs, KV: kv, Policy: policy, Log: log}
}
