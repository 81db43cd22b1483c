// Package integration tests the deployed shape end to end on one machine,
// with real parts only: the real execute and capability function binaries
// run by a Lambda emulator that speaks the Invoke and Runtime APIs, AWS's
// DynamoDB Local, real MCP servers (ours over SSE and streamable HTTP, and
// the npm reference server), a UDP X-Ray daemon stand-in, and the pml
// binary itself. Every process is started by the tests on free loopback
// ports and stopped when they end.
package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/testutil/ddbstream"
	"github.com/pml-sandbox/pml/internal/testutil/dynamolocal"
	"github.com/pml-sandbox/pml/internal/testutil/lambdaemu"
	"github.com/pml-sandbox/pml/internal/testutil/xraylisten"
	"github.com/pml-sandbox/pml/internal/tracedb"
)

// bins holds the binaries built once for the whole suite.
var bins struct{ execute, capability, aggregate, authorize, pml string }

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pml-integration")
	if err != nil {
		panic(err)
	}
	build := func(out, pkg string) string {
		p := filepath.Join(dir, out)
		cmd := exec.Command("go", "build", "-o", p, pkg)
		cmd.Dir = ".."
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building", pkg, err)
			os.Exit(1)
		}
		return p
	}
	bins.execute = build("execute", "./functions/execute")
	bins.capability = build("capability", "./functions/capability")
	bins.aggregate = build("aggregate", "./functions/aggregate")
	bins.authorize = build("authorize", "./functions/authorize")
	bins.pml = build("pml", "./cmd/pml")
	code := m.Run()
	dynamolocal.StopAll()
	os.RemoveAll(dir)
	os.Exit(code)
}

// stack is one deployment: the functions behind the emulator, their
// tables in DynamoDB Local, MCP servers, X-Ray.
type stack struct {
	emu         *lambdaemu.Emulator
	xray        *xraylisten.Listener
	traces      *tracedb.Dynamo
	tracesTable string
	capTable    string
	db          *dynamolocal.Instance
	stream      *ddbstream.Reader
	// suspTable is the suspensions table, when the stack keeps one
	// (longStack): the journal of effects is there too.
	suspTable string
}

func newStack(t *testing.T, extraServers ...string) *stack {
	t.Helper()
	return newStackWith(t, stackOptions{servers: extraServers})
}

// stackOptions change a stack from the defaults newStack uses.
type stackOptions struct {
	servers []string  // more MCP servers (JSON objects)
	env     []string  // more environment for every function (KEY=VALUE)
	logs    io.Writer // receives the functions' output too (safe for concurrent writes)
	// execute adjusts the execute function (timeout, concurrency,
	// asynchronous deliveries…) before it starts.
	execute func(*lambdaemu.Function)
	// more are functions beside the stack's own (the authorizer).
	more []lambdaemu.Function
}

func newStackWith(t *testing.T, opts stackOptions) *stack {
	t.Helper()
	extraServers := opts.servers
	ctx := context.Background()
	db := dynamolocal.Start(t)
	client := db.Client()
	tracesTable, capTable := dynamolocal.TableName(t)+"_traces", dynamolocal.TableName(t)+"_caps"
	if err := tracedb.CreateTable(ctx, client, tracesTable); err != nil {
		t.Fatal(err)
	}
	if err := capability.CreateTable(ctx, client, capTable); err != nil {
		t.Fatal(err)
	}
	demo, err := demoserver.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = demo.Close() })
	servers := []string{
		fmt.Sprintf(`{"name": "kv", "url": %q, "transport": "sse", "allow_destructive": true}`, demo.SSEURL()),
		fmt.Sprintf(`{"name": "text", "url": %q, "transport": "streamable"}`, demo.StreamableURL()),
	}
	servers = append(servers, extraServers...)
	xr := xraylisten.Start(t)
	cache := t.TempDir()
	logs := &testLog{t: t, tee: opts.logs}
	env := []string{
		"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=local", "AWS_SECRET_ACCESS_KEY=local",
		"AWS_ENDPOINT_URL_DYNAMODB=" + db.Endpoint,
		"AWS_RESPONSE_CHECKSUM_VALIDATION=when_required",
		"AWS_XRAY_DAEMON_ADDRESS=" + xr.Addr(),
		"LAMBDA_TASK_ROOT=" + cache,
		app.EnvTracesTable + "=" + tracesTable,
		app.EnvCapTable + "=" + capTable,
		app.EnvCapFunction + "=capability",
		app.EnvCompileCache + "=" + cache,
		app.EnvMCPServers + `={"servers": [` + strings.Join(servers, ",") + `]}`,
		app.EnvLogLevel + "=warn",
		app.EnvApprovers + "=" + approversEnv,
	}
	env = append(env, opts.env...)
	execute := lambdaemu.Function{Name: "execute", Binary: bins.execute, Env: env, Timeout: 30 * time.Second, Stderr: logs}
	if opts.execute != nil {
		opts.execute(&execute)
	}
	// The emulator's address is only known once it listens, and the
	// functions need it to invoke each other: start them lazily after.
	fns := []lambdaemu.Function{
		execute,
		{Name: "capability", Binary: bins.capability, Env: env, Timeout: 30 * time.Second, MaxConcurrency: 8, Stderr: logs},
		// DynamoDB Local takes 10 actions a transaction.
		{Name: "aggregate", Binary: bins.aggregate, Env: append(env, "PML_AGGREGATE_TRANSACT_ITEMS=10"), Timeout: 30 * time.Second, MaxConcurrency: 1, Stderr: logs},
	}
	for _, f := range opts.more {
		if f.Stderr == nil {
			f.Stderr = logs
		}
		fns = append(fns, f)
	}
	emu, err := lambdaemu.Start(fns...)
	if err != nil {
		t.Fatal(err)
	}
	emu.SetEnv("AWS_ENDPOINT_URL_LAMBDA=" + emu.Endpoint())
	t.Cleanup(emu.Close)
	stream, err := ddbstream.Open(ctx, db, tracesTable)
	if err != nil {
		t.Fatal(err)
	}
	return &stack{emu: emu, xray: xr, traces: tracedb.NewDynamo(client, tracesTable, 0, nil), tracesTable: tracesTable, capTable: capTable, db: db, stream: stream}
}

// aggregate does what the traces table's event source mapping does
// (template.yaml's AggregateStreamMapping): it reads the stream's new
// records, keeps those its filter passes (execution items written or
// rewritten) and invokes the aggregate function with them, in batches of
// up to 1,000. It returns the batches it delivered, so a test can deliver
// them again.
func (s *stack) aggregate(t *testing.T) [][]byte {
	t.Helper()
	recs, err := s.stream.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var passed []events.DynamoDBEventRecord
	for _, r := range recs {
		if sk, ok := r.Change.Keys["sk"]; ok && sk.DataType() == events.DataTypeString && sk.String() == "META" && (r.EventName == "INSERT" || r.EventName == "MODIFY") {
			passed = append(passed, r)
		}
	}
	var batches [][]byte
	for start := 0; start < len(passed); start += 1000 {
		payload, err := json.Marshal(events.DynamoDBEvent{Records: passed[start:min(start+1000, len(passed))]})
		if err != nil {
			t.Fatal(err)
		}
		s.deliver(t, payload)
		batches = append(batches, payload)
	}
	return batches
}

// deliver invokes the aggregate function with one batch, which must succeed.
func (s *stack) deliver(t *testing.T, payload []byte) {
	t.Helper()
	if out, fnErr, err := s.emu.Invoke(context.Background(), "aggregate", payload); err != nil || fnErr {
		t.Fatalf("aggregate: %s %v %v", out, fnErr, err)
	}
}

// testLog sends function output to the test log (and to tee, when set).
type testLog struct {
	t   *testing.T
	tee io.Writer
}

func (l *testLog) Write(p []byte) (int, error) {
	l.t.Helper()
	if l.tee != nil {
		_, _ = l.tee.Write(p)
	}
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		if line != "" {
			l.t.Log(line)
		}
	}
	return len(p), nil
}

// invoke sends a payload to a function, with an X-Ray trace header.
func (s *stack) invoke(t *testing.T, fn string, payload any, traceHeader string) json.RawMessage {
	t.Helper()
	body, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, s.emu.Endpoint()+"/2015-03-31/functions/"+fn+"/invocations", bytes.NewReader(body))
	if traceHeader != "" {
		req.Header.Set("X-Amzn-Trace-Id", traceHeader)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.Header.Get("X-Amz-Function-Error") != "" {
		t.Fatalf("function error: %s", out)
	}
	return out
}

// httpEvent builds an API Gateway HTTP API (2.0) event.
func httpEvent(method, path, body string) events.APIGatewayV2HTTPRequest {
	ev := events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: "ANY /{proxy+}", RawPath: path, Body: body,
		Headers: map[string]string{"content-type": "application/json"},
	}
	if p, q, ok := strings.Cut(path, "?"); ok {
		ev.RawPath, ev.RawQueryString = p, q
	}
	ev.RequestContext.HTTP.Method = method
	ev.RequestContext.HTTP.Path = ev.RawPath
	ev.RequestContext.Stage = "$default"
	return ev
}

// approverEvent is httpEvent signed by approverPrincipal, as API Gateway's
// authorizer would say: under the deployed policy only an approver's save
// publishes a capability at once.
func approverEvent(method, path, body string) events.APIGatewayV2HTTPRequest {
	ev := httpEvent(method, path, body)
	ev.RequestContext.Authorizer = authorizer(approverPrincipal)
	return ev
}

// principalHeader tells the API Gateway stand-in who the caller is, as its
// authorizer would have verified: an IAM ARN, or jwt:<iss>#<sub>.
const principalHeader = "X-Test-Principal"

// The principals of the deployed tests: an agent (a JWT), and an operator
// the stack names an approver (an IAM role's session).
const (
	agentPrincipal    = "jwt:https://idp.test#agent-7"
	approverPrincipal = "arn:aws:sts::123456789012:assumed-role/approver/alice"
	approversEnv      = "arn:aws:sts::123456789012:assumed-role/approver/*"
)

// authorizer is the HTTP API request context API Gateway fills for p.
func authorizer(p string) *events.APIGatewayV2HTTPRequestContextAuthorizerDescription {
	if rest, ok := strings.CutPrefix(p, "jwt:"); ok {
		iss, sub, _ := strings.Cut(rest, "#")
		return &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
			JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"iss": iss, "sub": sub}}}
	}
	return &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{IAM: &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{UserARN: p}}
}

// httpAPITimeout is the HTTP API's integration timeout, which no setting
// raises.
const httpAPITimeout = 30 * time.Second

// apiGateway is a local stand-in for API Gateway's HTTP API: plain HTTP
// in, HTTP API events to the execute function through the Lambda
// emulator, responses back, buffered, and 503 when the function has not
// answered within httpAPITimeout. It lets an ordinary MCP client talk to
// the deployed function.
func (s *stack) apiGateway(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ev := httpEvent(r.Method, r.URL.RequestURI(), string(body))
		// What API Gateway's authorizer verified: here the test says it,
		// in a header the stand-in takes out (API Gateway sets the
		// context from a SigV4 signature or a JWT, never a header).
		if p := r.Header.Get(principalHeader); p != "" {
			ev.RequestContext.Authorizer = authorizer(p)
			r.Header.Del(principalHeader)
		}
		// Payload 2.0 carries cookies in a field of their own, not as a
		// header (the approval page's session).
		for _, c := range r.Header.Values("Cookie") {
			ev.Cookies = append(ev.Cookies, strings.Split(c, "; ")...)
		}
		r.Header.Del("Cookie")
		for k := range r.Header {
			ev.Headers[strings.ToLower(k)] = r.Header.Get(k)
		}
		payload, _ := json.Marshal(ev)
		// The HTTP API stops waiting after 30 s, whatever the function's
		// timeout says.
		ctx, cancel := context.WithTimeout(r.Context(), httpAPITimeout)
		defer cancel()
		out, fnErr, err := s.emu.Invoke(ctx, "execute", payload)
		if ctx.Err() == context.DeadlineExceeded {
			http.Error(w, `{"message":"Service Unavailable"}`, http.StatusServiceUnavailable)
			return
		}
		if err != nil || fnErr {
			http.Error(w, fmt.Sprintf("function failed: %v %s", err, out), http.StatusBadGateway)
			return
		}
		var resp events.APIGatewayV2HTTPResponse
		if err := json.Unmarshal(out, &resp); err != nil {
			http.Error(w, "bad function response: "+string(out), http.StatusBadGateway)
			return
		}
		for k, v := range resp.Headers {
			w.Header().Set(k, v)
		}
		for _, c := range resp.Cookies {
			w.Header().Add("Set-Cookie", c)
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.WriteString(w, resp.Body)
	})
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}
