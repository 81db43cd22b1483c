package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/testutil/askserver"
	"github.com/pml-sandbox/pml/internal/testutil/mcptest"
	"github.com/pml-sandbox/pml/internal/testutil/moto"
)

// askingScript calls a tool whose remote server asks its client's user
// before it answers.
const askingScript = `return await mcp.ask.confirm_delete({item: args.item})`

// confirmer is a person who confirms whatever a remote server asks, and
// remembers what it was asked; between a question and its answer it runs
// between (which may stop the container that asked).
type confirmer struct {
	mu      sync.Mutex
	asked   []mcp.ElicitationParams
	between func()
}

func (c *confirmer) Elicit(_ context.Context, r mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	c.mu.Lock()
	c.asked = append(c.asked, r.Params)
	c.mu.Unlock()
	if c.between != nil {
		c.between()
	}
	return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionAccept,
		Content: map[string]any{"confirmed": true}}}, nil
}

// checkAsked checks that the person was asked the remote server's question
// about item, as the server asked it.
func checkAsked(t *testing.T, asked []mcp.ElicitationParams, item string) {
	t.Helper()
	if len(asked) != 1 || !strings.Contains(asked[0].Message, fmt.Sprintf(askserver.Question, item)) {
		t.Fatalf("the person was asked %+v", asked)
	}
	if schema, _ := json.Marshal(asked[0].RequestedSchema); !strings.Contains(string(schema), `"confirmed"`) {
		t.Fatalf("the question's schema changed on its way: %s", schema)
	}
}

// checkRetried checks that the remote server got the call again, with the
// state it issued and the person's answer.
func checkRetried(t *testing.T, ask *askserver.Server, item string) {
	t.Helper()
	for _, r := range ask.Retries() {
		if r.Item == item {
			if !r.Known || r.Answer == nil || r.Answer.Action != mcp.ElicitationResponseActionAccept {
				t.Fatalf("the retry about %s: %+v", item, r)
			}
			return
		}
	}
	t.Fatalf("the server never got the call about %s again: %+v", item, ask.Retries())
}

// TestRemoteQuestionAcrossLambdaContainers: a real remote MCP server (mcp-go)
// that asks its client's user before it answers (2026-07-28 input_required)
// is called by a script behind API Gateway; the execute container that
// asked is stopped, and a fresh one sends the call again with the answer and
// the server's own state. The person answers through /mcp (a 2026-07-28
// client the deployment trusts to put questions to a person: a remote
// server's question is weighed as an approval, since it may guard against
// the agent), or an approver answers over HTTP, after the agent's own
// credentials were refused; the script gets the server's result either
// way, and the server's state never appears in a document.
func TestRemoteQuestionAcrossLambdaContainers(t *testing.T) {
	ask, err := askserver.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ask.Close() })
	s := newStack(t, fmt.Sprintf(`{"name": "ask", "url": %q, "transport": "streamable"}`, ask.URL))
	ctx := context.Background()
	table := s.capTable + "_susp"
	if err := suspend.CreateTable(ctx, s.db.Client(), table); err != nil {
		t.Fatal(err)
	}
	m := moto.Start(t)
	cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("testing", "testing", "")}
	secret, err := secretsmanager.NewFromConfig(cfg, func(o *secretsmanager.Options) { o.BaseEndpoint = aws.String(m.Endpoint) }).CreateSecret(ctx,
		&secretsmanager.CreateSecretInput{Name: aws.String("pml-approval-key"), SecretString: aws.String(strings.Repeat("q5T", 21) + "x")})
	if err != nil {
		t.Fatal(err)
	}
	s.emu.SetEnv(app.EnvSuspTable+"="+table, app.EnvApprovalKeySecret+"="+aws.ToString(secret.ARN), "AWS_ENDPOINT_URL_SECRETS_MANAGER="+m.Endpoint,
		app.EnvTrustedClients+"="+agentPrincipal)
	recycle := func(t *testing.T) int {
		n, err := s.emu.Recycle("execute")
		if err != nil {
			t.Error(err)
		}
		return n
	}
	recycle(t)
	base := s.apiGateway(t)

	t.Run("a 2026-07-28 client's user", func(t *testing.T) {
		recycled := 0
		person := &confirmer{between: func() { recycled += recycle(t) }}
		tr, err := transport.NewStreamableHTTP(base+"/mcp", transport.WithHTTPHeaders(map[string]string{principalHeader: agentPrincipal}))
		if err != nil {
			t.Fatal(err)
		}
		// A cold container may outlast mcp-go's 5 s server/discover probe
		// on a loaded machine (see TestElicitationAcrossLambdaContainers).
		c := mcptest.Connect(t, client.NewClient(tr, client.WithElicitationHandler(person), client.WithDiscoverTimeout(time.Minute)), "")
		var req mcp.CallToolRequest
		req.Params.Name = "execute_code"
		req.Params.Arguments = map[string]any{"code": askingScript, "args": map[string]any{"item": "from-mcp"}}
		res, err := c.CallTool(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(res.StructuredContent)
		var doc durableDoc
		if err := json.Unmarshal(raw, &doc); err != nil || res.IsError || !doc.OK {
			t.Fatalf("execute_code: %s", raw)
		}
		if string(doc.Result) != `{"deleted":true,"item":"from-mcp","note":"none"}` {
			t.Fatalf("the script's result %s", doc.Result)
		}
		checkAsked(t, person.asked, "from-mcp")
		if recycled < 1 {
			t.Fatalf("no container was stopped before the answer")
		}
		checkRetried(t, ask, "from-mcp")
	})

	t.Run("an approver over HTTP", func(t *testing.T) {
		status, d := postJSONAs(t, base+"/execute", agentPrincipal, map[string]any{"code": askingScript, "args": map[string]string{"item": "from-http"}, "approval": "suspend"})
		if status != http.StatusAccepted || d.Status != "suspended" || len(d.Pending) != 1 || d.Pending[0].Reason != "question" {
			t.Fatalf("the first request: status %d, %+v, want 202 suspended on the server's question", status, d)
		}
		for _, st := range ask.Issued() {
			raw, _ := json.Marshal(d)
			if strings.Contains(string(raw), st) {
				t.Fatalf("the server's requestState reached the document: %s", raw)
			}
		}
		recycle(t)
		decisions := map[string]any{"decisions": map[string]any{"1": map[string]any{"decision": "answer",
			"answers": map[string]any{"confirm": map[string]any{"action": "accept", "content": map[string]any{"confirmed": true, "note": "by ops"}}}}}}
		// The agent's own credentials are not its user.
		if status, r := postJSONAs(t, resumeURL(base, d.ExecutionID), agentPrincipal, decisions); status != http.StatusForbidden || r.Error == nil {
			t.Fatalf("the agent answered its own question: status %d %+v", status, r)
		}
		recycle(t)
		status, r := postJSONAs(t, resumeURL(base, d.ExecutionID), approverPrincipal, decisions)
		if status != http.StatusOK || !r.OK || string(r.Result) != `{"deleted":true,"item":"from-http","note":"by ops"}` {
			t.Fatalf("the approver's answer: status %d %s %+v", status, r.Result, r.Error)
		}
		checkRetried(t, ask, "from-http")
	})
}

// TestRemoteQuestionToA20251125Client: pml serve puts a remote server's
// question to a 2025-11-25 client's user on its session (elicitation/create
// on the request's stream), and the answer reaches the server.
func TestRemoteQuestionToA20251125Client(t *testing.T) {
	ask, err := askserver.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ask.Close() })
	state := t.TempDir()
	srv := startServe(t, []string{app.EnvSuspDir + "=" + state + "/suspensions", app.EnvApprovalKeyFile + "=" + state + "/approval.key",
		app.EnvMCPServers + `={"servers": [` + fmt.Sprintf(`{"name": "ask", "url": %q, "transport": "streamable"}`, ask.URL) + `]}`})
	person := &confirmer{}
	tr, err := transport.NewStreamableHTTP(srv.base + "/mcp")
	if err != nil {
		t.Fatal(err)
	}
	c := mcptest.Connect(t, client.NewClient(tr, client.WithElicitationHandler(person), client.WithProtocolVersion(mcp.ProtocolVersion20251125)), mcp.ProtocolVersion20251125)
	var req mcp.CallToolRequest
	req.Params.Name = "execute_code"
	req.Params.Arguments = map[string]any{"code": askingScript, "args": map[string]any{"item": "from-session"}}
	res, err := c.CallTool(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(res.StructuredContent)
	var doc durableDoc
	if err := json.Unmarshal(raw, &doc); err != nil || res.IsError || !doc.OK || string(doc.Result) != `{"deleted":true,"item":"from-session","note":"none"}` {
		t.Fatalf("execute_code: %s", raw)
	}
	checkAsked(t, person.asked, "from-session")
	checkRetried(t, ask, "from-session")
}
