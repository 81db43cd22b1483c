package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/testutil/installer"
	"github.com/pml-sandbox/pml/internal/testutil/mcptest"
	"github.com/pml-sandbox/pml/internal/testutil/moto"
)

// approveThenDecline deletes two keys: the person approves the first and
// declines the second, which the script catches.
const approveThenDecline = `const before = 41;
await mcp.%[1]s.kv_set({key: "drop-me", value: 1});
await mcp.%[1]s.kv_set({key: "keep-me", value: 2});
const out = {before};
await mcp.%[1]s.kv_delete({key: "drop-me"});
out.dropped = true;
try {
  await mcp.%[1]s.kv_delete({key: "keep-me"});
} catch (e) {
  out.kept = e.code;
  out.why = e.message;
}
return out;`

// personAnswers approves every question but those about "keep-me", and
// counts them; between a question and its answer it runs between (which
// may stop the container that asked).
type personAnswers struct {
	mu      sync.Mutex
	asked   []string
	between func()
}

func (p *personAnswers) Elicit(_ context.Context, r mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	p.mu.Lock()
	p.asked = append(p.asked, r.Params.Message)
	p.mu.Unlock()
	if p.between != nil {
		p.between()
	}
	if strings.Contains(r.Params.Message, "keep-me") {
		return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionDecline}}, nil
	}
	return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionAccept,
		Content: map[string]any{"decision": "approve"}}}, nil
}

// TestElicitationAcrossLambdaContainers: a 2026-07-28 MCP client (mcp-go)
// calls execute_code through the API Gateway stand-in as an agent whose
// client the deployment trusts to show a person its questions; each
// destructive call reaches the client's user as an input_required
// question, the execute container is stopped before every answer, and a
// fresh container resumes from DynamoDB (Local) with the state the
// question sealed with the secret's key (Secrets Manager: moto). Every
// suspension is announced on the bus (EventBridge: moto, routed to a
// queue the test reads), without the calls' arguments.
func TestElicitationAcrossLambdaContainers(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	table := s.capTable + "_susp"
	if err := suspend.CreateTable(ctx, s.db.Client(), table); err != nil {
		t.Fatal(err)
	}
	m := moto.Start(t)
	cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("testing", "testing", "")}
	secret, err := secretsmanager.NewFromConfig(cfg, func(o *secretsmanager.Options) { o.BaseEndpoint = aws.String(m.Endpoint) }).CreateSecret(ctx,
		&secretsmanager.CreateSecretInput{Name: aws.String("pml-approval-key"), SecretString: aws.String(strings.Repeat("k3Y", 21) + "x")})
	if err != nil {
		t.Fatal(err)
	}
	queue := announcements(t, ctx, cfg, m.Endpoint, "pml-approvals")
	// The deployment trusts the agent's MCP client to put its questions
	// to a person (PML_TRUSTED_CLIENTS): its form-mode answers decide.
	s.emu.SetEnv(app.EnvSuspTable+"="+table, app.EnvApprovalKeySecret+"="+aws.ToString(secret.ARN), app.EnvApprovalBus+"=pml-approvals",
		app.EnvTrustedClients+"="+agentPrincipal,
		"AWS_ENDPOINT_URL_SECRETS_MANAGER="+m.Endpoint, "AWS_ENDPOINT_URL_EVENTBRIDGE="+m.Endpoint)
	if _, err := s.emu.Recycle("execute"); err != nil {
		t.Fatal(err)
	}
	base := s.apiGateway(t)

	recycled := 0
	person := &personAnswers{between: func() {
		n, err := s.emu.Recycle("execute")
		if err != nil {
			t.Error(err)
		}
		recycled += n
	}}
	tr, err := transport.NewStreamableHTTP(base+"/mcp", transport.WithHTTPHeaders(map[string]string{principalHeader: agentPrincipal}))
	if err != nil {
		t.Fatal(err)
	}
	// The first request starts a cold container that may compile the
	// guest: on a loaded machine that outlasts mcp-go's 5 s server/discover
	// probe, after which it would settle on the 2025-11-25 handshake, which
	// has no session to carry its capabilities in a Lambda function.
	c := mcptest.Connect(t, client.NewClient(tr, client.WithElicitationHandler(person), client.WithDiscoverTimeout(time.Minute)), "")
	var req mcp.CallToolRequest
	req.Params.Name = "execute_code"
	req.Params.Arguments = map[string]any{"code": fmt.Sprintf(approveThenDecline, "kv")}
	res, err := c.CallTool(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(res.StructuredContent)
	var doc durableDoc
	if err := json.Unmarshal(raw, &doc); err != nil || res.IsError || !doc.OK {
		t.Fatalf("execute_code: %s", raw)
	}
	var out struct {
		Before  int    `json:"before"`
		Dropped bool   `json:"dropped"`
		Kept    string `json:"kept"`
		Why     string `json:"why"`
	}
	if err := json.Unmarshal(doc.Result, &out); err != nil || out.Before != 41 || !out.Dropped || out.Kept != "REJECTED" || !strings.Contains(out.Why, "declined by the user") {
		t.Fatalf("the script's result %s", doc.Result)
	}
	if len(person.asked) != 2 || !strings.Contains(person.asked[0], "kv.kv_delete") || !strings.Contains(person.asked[0], "drop-me") || recycled < 2 {
		t.Fatalf("the person was asked %q, %d containers stopped before the answers", person.asked, recycled)
	}

	// One notice per suspension, naming the tool, never its arguments.
	notices := receive(t, ctx, cfg, m.Endpoint, queue, 2)
	for _, n := range notices {
		if !strings.Contains(n, `"detail-type": "Execution suspended"`) && !strings.Contains(n, `"detail-type":"Execution suspended"`) {
			t.Errorf("not a suspension notice: %s", n)
		}
		if !strings.Contains(n, doc.ExecutionID) || !strings.Contains(n, "kv:kv_delete") || !strings.Contains(n, agentPrincipal) || strings.Contains(n, "drop-me") || strings.Contains(n, "keep-me") {
			t.Errorf("notice %s: want the execution, its owner and the tool, not the arguments", n)
		}
	}
}

// announcements makes bus on moto with a rule sending every suspension
// notice to a queue, and returns the queue's URL.
func announcements(t *testing.T, ctx context.Context, cfg aws.Config, endpoint, bus string) string {
	t.Helper()
	ev := eventbridge.NewFromConfig(cfg, func(o *eventbridge.Options) { o.BaseEndpoint = aws.String(endpoint) })
	q := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(endpoint) })
	if _, err := ev.CreateEventBus(ctx, &eventbridge.CreateEventBusInput{Name: aws.String(bus)}); err != nil {
		t.Fatal(err)
	}
	made, err := q.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(bus + "-seen")})
	if err != nil {
		t.Fatal(err)
	}
	attrs, err := q.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: made.QueueUrl, AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatal(err)
	}
	pattern := fmt.Sprintf(`{"source": [%q], "detail-type": [%q]}`, app.NoticeSource, app.NoticeDetailType)
	if _, err := ev.PutRule(ctx, &eventbridge.PutRuleInput{Name: aws.String("to-approvers"), EventBusName: aws.String(bus), EventPattern: aws.String(pattern)}); err != nil {
		t.Fatal(err)
	}
	if _, err := ev.PutTargets(ctx, &eventbridge.PutTargetsInput{Rule: aws.String("to-approvers"), EventBusName: aws.String(bus),
		Targets: []ebtypes.Target{{Id: aws.String("queue"), Arn: aws.String(attrs.Attributes["QueueArn"])}}}); err != nil {
		t.Fatal(err)
	}
	return aws.ToString(made.QueueUrl)
}

// receive reads n messages from the queue, failing after a while.
func receive(t *testing.T, ctx context.Context, cfg aws.Config, endpoint, queue string, n int) []string {
	t.Helper()
	q := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(endpoint) })
	var out []string
	deadline := time.Now().Add(20 * time.Second)
	for len(out) < n && time.Now().Before(deadline) {
		got, err := q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(queue), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range got.Messages {
			out = append(out, aws.ToString(m.Body))
		}
	}
	if len(out) != n {
		t.Fatalf("%d notices on the bus, want %d: %q", len(out), n, out)
	}
	return out
}

// TestTypeScriptClientDecides: the official TypeScript SDK's client
// (pinned; a 2025-11-25 client) with an elicitation handler runs a script
// against a real pml serve: the server asks it on its session's request
// stream, it approves one delete and declines the other, and the script
// goes on from each question.
func TestTypeScriptClientDecides(t *testing.T) {
	node, err := installer.Run("node22.sh")
	if err != nil {
		t.Fatal(err)
	}
	modules, err := installer.Run("mcp-sdk.sh")
	if err != nil {
		t.Fatal(err)
	}
	// The client script resolves the SDK from a node_modules beside it.
	dir := t.TempDir()
	if err := os.Symlink(modules, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("testdata/tsclient/elicit.mjs")
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "elicit.mjs")
	if err := os.WriteFile(script, src, 0o600); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	srv := startServe(t, []string{app.EnvSuspDir + "=" + state + "/suspensions", app.EnvApprovalKeyFile + "=" + state + "/approval.key"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script, srv.base+"/mcp", fmt.Sprintf(approveThenDecline, "demo"))
	cmd.Stderr = &testLog{t: t}
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("the TypeScript client: %v: %s", err, raw)
	}
	var got struct {
		Asked   []string `json:"asked"`
		IsError bool     `json:"isError"`
		Result  struct {
			OK     bool `json:"ok"`
			Result struct {
				Before  int    `json:"before"`
				Dropped bool   `json:"dropped"`
				Kept    string `json:"kept"`
				Why     string `json:"why"`
			} `json:"result"`
		} `json:"result"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	r := got.Result.Result
	if got.IsError || !got.Result.OK || r.Before != 41 || !r.Dropped || r.Kept != "REJECTED" || !strings.Contains(r.Why, "declined") {
		t.Fatalf("the script through the TypeScript client: %s", raw)
	}
	if len(got.Asked) != 2 || !strings.Contains(got.Asked[0], "drop-me") || !strings.Contains(got.Asked[1], "keep-me") {
		t.Fatalf("the TypeScript client's user was asked %q", got.Asked)
	}
}
