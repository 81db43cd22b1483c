package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/mcpserver"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/testutil/askserver"
	"github.com/pml-sandbox/pml/internal/testutil/fronttest"
	"github.com/pml-sandbox/pml/internal/toolsource"
	mcpkind "github.com/pml-sandbox/pml/internal/toolsource/mcp"
)

// TestRemoteQuestionReachesThePerson: a remote server's question about a
// script's call reaches our client's user as the server asked it (a
// 2026-07-28 client through input_required, a 2025-11-25 one through
// elicitation/create on its session), under a deployed policy that trusts
// no client with approvals: the question is the user's to answer. The
// answer goes back to the server with its state, and the script gets the
// server's result.
func TestRemoteQuestionReachesThePerson(t *testing.T) {
	ask, err := askserver.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ask.Close() })
	for _, tc := range []struct {
		name     string
		version  string
		sessions bool
	}{
		{"2026-07-28, stateless", "", false},
		{"2025-11-25 on a session", "2025-11-25", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := slog.New(slog.NewTextHandler(fronttest.TestWriter{T: t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
			pool, err := new(mcpkind.Kind).NewSet(context.Background(), toolsource.Env{Logger: log}, mcpkind.Config{Config: toolsource.Config{Name: "ask"}, URL: ask.URL, Transport: "streamable"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = pool.Close() })
			policy := approval.Policy{Approvers: []string{"arn:aws:iam::1:role/ops"}, TrustedClients: []string{fronttest.Agent}}
			svc := executor.New(engine, executor.Options{Sources: []execution.ToolSource{pool}, Logger: log,
				Suspensions: suspend.NewFile(t.TempDir(), suspend.Options{}), Policy: policy})
			key, err := approval.LoadKeyFile(t.TempDir() + "/key")
			if err != nil {
				t.Fatal(err)
			}
			srv := serve(t, mcpserver.Options{Service: svc, Logger: log, Policy: policy,
				Settings: mcpserver.Settings{StateKey: key, Suspends: true, Sessions: tc.sessions}}, fronttest.Agent)

			p := &fronttest.Person{Answer: func(q mcp.ElicitationParams) *mcp.ElicitationResult {
				return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionAccept,
					Content: map[string]any{"confirmed": true}}}
			}}
			before := len(ask.Retries())
			res, doc := fronttest.ExecuteCode(t, fronttest.ElicitingClient(t, srv.URL+"/mcp", tc.version, p, nil),
				`return await mcp.ask.confirm_delete({item: "report"})`)
			if res.IsError || doc["ok"] != true {
				t.Fatalf("answered: %+v", doc)
			}
			if r, _ := json.Marshal(doc["result"]); string(r) != `{"deleted":true,"item":"report","note":"none"}` {
				t.Fatalf("result %s", r)
			}
			if len(p.Asked) != 1 || !strings.Contains(p.Asked[0].Message, fmt.Sprintf(askserver.Question, "report")) ||
				!strings.Contains(p.Asked[0].Message, `"ask"`) {
				t.Fatalf("the person was asked %+v", p.Asked)
			}
			schema, _ := json.Marshal(p.Asked[0].RequestedSchema)
			if !strings.Contains(string(schema), `"confirmed"`) || strings.Contains(string(schema), `"decision"`) {
				t.Fatalf("the question's schema changed on its way: %s", schema)
			}
			r := ask.Retries()
			if len(r) != before+1 || !r[len(r)-1].Known {
				t.Fatalf("retries %+v: want one more, with the state the server issued", r)
			}
		})
	}
}
