package lambdaevents_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/httpapi"
	"github.com/pml-sandbox/pml/internal/lambdaevents"
	"github.com/pml-sandbox/pml/internal/suspend"
)

// approvalScript keeps a variable across its suspension at kv_delete
// (call 2), or catches the rejection.
const approvalScript = `let kept = "set before suspending"
await mcp.demo.kv_get({key: "k"})
try {
  return {kept, deleted: await mcp.demo.kv_delete({key: "k"})}
} catch (e) {
  return {kept, code: e.code}
}`

// durableHandler is the execute function's handler over the demo tools
// and a suspension directory, as two containers over one table would be
// when called twice.
func durableHandler(t *testing.T) func(context.Context, json.RawMessage) (any, error) {
	return durableHandlerLogging(t, slog.New(slog.DiscardHandler))
}

func durableHandlerLogging(t *testing.T, log *slog.Logger) func(context.Context, json.RawMessage) (any, error) {
	t.Helper()
	kv := demoserver.New()
	if _, err := kv.Call(context.Background(), "kv_set", json.RawMessage(`{"key": "k", "value": 1}`)); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	return func(ctx context.Context, payload json.RawMessage) (any, error) {
		svc := executor.New(engine, executor.Options{Policy: local, Sources: []execution.ToolSource{demoserver.Source{Set: kv}}, Logger: log,
			Suspensions: suspend.NewFile(dir, suspend.Options{})})
		h := lambdaevents.Handler(lambdaevents.Options{HTTP: httpapi.New(httpapi.Options{Service: svc, Logger: log}), Service: svc, Logger: log})
		return h(ctx, payload)
	}
}

var suspendBody = mustJSON(map[string]any{"code": approvalScript, "approval": "suspend"})

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// invoke calls h directly and returns the execution's document.
func invoke(t *testing.T, h func(context.Context, json.RawMessage) (any, error), payload string) *execution.Response {
	t.Helper()
	out, err := h(lambdaCtx(t), json.RawMessage(payload))
	if err != nil {
		t.Fatal(err)
	}
	r, ok := out.(*execution.Response)
	if !ok {
		t.Fatalf("answered %T", out)
	}
	return r
}

func suspended(t *testing.T, r *execution.Response) string {
	t.Helper()
	if r.OK || r.Error != nil || r.Status != execution.StatusSuspended || len(r.Pending) != 1 || r.Pending[0].CallID != 2 || r.Pending[0].Tool != "kv_delete" {
		t.Fatalf("not suspended at kv_delete: %+v (error %+v)", r, r.Error)
	}
	return r.ExecutionID
}

// TestDirectInvokeResumes: a direct invocation may suspend, and another
// resumes it with {"resume": {...}}; the answers are the documents.
func TestDirectInvokeResumes(t *testing.T) {
	h := durableHandler(t)
	id := suspended(t, invoke(t, h, suspendBody))
	rejectID := suspended(t, invoke(t, h, suspendBody))
	tests := []struct {
		name, payload string
		ok            bool
		result, code  string
	}{
		{name: "approve", payload: `{"resume": {"execution_id": "` + id + `", "decisions": {"2": "approve"}}}`, ok: true, result: `{"kept":"set before suspending","deleted":"deleted k"}`},
		{name: "twice", payload: `{"resume": {"execution_id": "` + id + `", "decisions": {"2": "approve"}}}`, code: "CONFLICT"},
		{name: "reject", payload: `{"resume": {"execution_id": "` + rejectID + `", "decisions": {"2": {"decision": "reject", "reason": "no"}}, "call_detail": "none"}}`, ok: true, result: `{"kept":"set before suspending","code":"REJECTED"}`},
		{name: "unknown id", payload: `{"resume": {"execution_id": "ex_000000000000000000000000", "decisions": {"2": "approve"}}}`, code: "NOT_FOUND"},
		{name: "no id", payload: `{"resume": {"decisions": {"2": "approve"}}}`, code: "INVALID_REQUEST"},
		{name: "not an object", payload: `{"resume": 1}`, code: "INVALID_REQUEST"},
		{name: "with code too", payload: `{"code": "return 1", "resume": {"execution_id": "` + id + `", "decisions": {"2": "approve"}}}`, code: "INVALID_REQUEST"},
		{name: "a field beside it", payload: `{"resume": {"execution_id": "` + id + `", "decisions": {"2": "approve"}}, "principal": "arn:aws:iam::1:root"}`, code: "INVALID_REQUEST"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := invoke(t, h, tc.payload)
			switch {
			case tc.ok && (!r.OK || string(r.Result) != tc.result):
				t.Fatalf("ok %v result %s error %+v, want %s", r.OK, r.Result, r.Error, tc.result)
			case !tc.ok && (r.OK || r.Error == nil || string(r.Error.Code) != tc.code):
				t.Fatalf("ok %v error %+v, want %s", r.OK, r.Error, tc.code)
			}
		})
	}
}

// TestQueuedSourcesRefuseSuspend: SQS and EventBridge answer nobody, so
// approval "suspend" is refused there before anything runs; a direct
// invocation may use it.
func TestQueuedSourcesRefuseSuspend(t *testing.T) {
	var logs syncBuffer
	h := durableHandlerLogging(t, slog.New(slog.NewJSONHandler(&logs, nil)))
	sqs := events.SQSEvent{Records: []events.SQSMessage{
		{MessageId: "suspend", EventSource: "aws:sqs", Body: suspendBody},
		{MessageId: "refuse", EventSource: "aws:sqs", Body: `{"code": "return 1", "approval": "refuse"}`},
	}}
	out, err := h(lambdaCtx(t), json.RawMessage(mustJSON(sqs)))
	if err != nil {
		t.Fatal(err)
	}
	if f := out.(events.SQSEventResponse).BatchItemFailures; len(f) != 1 || f[0].ItemIdentifier != "suspend" {
		t.Fatalf("batch item failures %+v, want the suspend message alone (to the dead-letter queue)", f)
	}
	eb := events.EventBridgeEvent{DetailType: "Execute", Source: "pml.sandbox", Detail: json.RawMessage(suspendBody)}
	r := invoke(t, h, mustJSON(eb))
	if r.OK || r.Error == nil || r.Error.Code != fault.InvalidRequest || !strings.Contains(r.Error.Message, `approval "suspend" is refused from eventbridge`) || r.ExecutionID != "" {
		t.Fatalf("EventBridge: %+v", r.Error)
	}
	// Nobody reads either answer: the function's log says why.
	for _, want := range []string{`"msg":"bad SQS message","message_id":"suspend"`, `"msg":"bad EventBridge event"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log lacks %s:\n%s", want, logs.String())
		}
	}
	// A direct invocation may suspend.
	suspended(t, invoke(t, h, suspendBody))
}

// syncBuffer is a bytes.Buffer for a logger several goroutines write to.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// v2 is an HTTP API request as API Gateway sends it, authorized as auth.
func v2(method, path, body string, auth *events.APIGatewayV2HTTPRequestContextAuthorizerDescription) string {
	ev := events.APIGatewayV2HTTPRequest{Version: "2.0", RouteKey: method + " " + path, RawPath: path, Body: body,
		Headers: map[string]string{"content-type": "application/json"}}
	ev.RequestContext.HTTP.Method, ev.RequestContext.HTTP.Path, ev.RequestContext.Stage = method, path, "$default"
	ev.RequestContext.Authorizer = auth
	return mustJSON(ev)
}

func iam(arn string) *events.APIGatewayV2HTTPRequestContextAuthorizerDescription {
	return &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{IAM: &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{UserARN: arn}}
}

func jwt(iss, sub string) *events.APIGatewayV2HTTPRequestContextAuthorizerDescription {
	return &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{
		Claims: map[string]string{"iss": iss, "sub": sub}}}
}

// TestHTTPAPIResumeIsThePrincipals: through API Gateway, an execution
// suspended by one principal answers 202, and only that principal (IAM
// ARN, or JWT issuer and subject) may resume it; everyone else is answered
// word for word as for an id never issued (404), and cannot claim it.
func TestHTTPAPIResumeIsThePrincipals(t *testing.T) {
	h := durableHandler(t)
	const alice, bob = "arn:aws:iam::123456789012:user/alice", "arn:aws:iam::123456789012:user/bob"
	send := func(t *testing.T, payload string) (int, execution.Response, string) {
		t.Helper()
		out, err := h(lambdaCtx(t), json.RawMessage(payload))
		if err != nil {
			t.Fatal(err)
		}
		resp := out.(events.APIGatewayV2HTTPResponse)
		var r execution.Response
		_ = json.Unmarshal([]byte(resp.Body), &r)
		return resp.StatusCode, r, resp.Body
	}
	suspendAs := func(t *testing.T, auth *events.APIGatewayV2HTTPRequestContextAuthorizerDescription) string {
		t.Helper()
		status, r, body := send(t, v2("POST", "/execute", suspendBody, auth))
		if status != http.StatusAccepted {
			t.Fatalf("%d %s, want 202", status, body)
		}
		return suspended(t, &r)
	}
	approve := `{"decisions": {"2": "approve"}}`
	byAlice := suspendAs(t, iam(alice))
	byJWT := suspendAs(t, jwt("https://issuer.example", "user-1"))
	tests := []struct {
		name    string
		payload string
		status  int
	}{
		{"another IAM principal", v2("POST", "/executions/"+byAlice+"/resume", approve, iam(bob)), 404},
		{"no principal", v2("POST", "/executions/"+byAlice+"/resume", approve, nil), 404},
		{"a JWT", v2("POST", "/executions/"+byAlice+"/resume", approve, jwt("https://issuer.example", alice)), 404},
		{"a direct invocation", `{"resume": {"execution_id": "` + byAlice + `", "decisions": {"2": "approve"}}}`, 0},
		{"the same IAM principal", v2("POST", "/executions/"+byAlice+"/resume", approve, iam(alice)), 200},
		{"another JWT subject", v2("POST", "/executions/"+byJWT+"/resume", approve, jwt("https://issuer.example", "user-2")), 404},
		{"another JWT issuer", v2("POST", "/executions/"+byJWT+"/resume", approve, jwt("https://other.example", "user-1")), 404},
		{"the same JWT subject", v2("POST", "/executions/"+byJWT+"/resume", approve, jwt("https://issuer.example", "user-1")), 200},
		{"unknown id", v2("POST", "/executions/ex_000000000000000000000000/resume", approve, iam(alice)), 404},
		{"again", v2("POST", "/executions/"+byAlice+"/resume", approve, iam(alice)), 409},
	}
	const unknownID = "ex_000000000000000000000000"
	_, _, unknown := send(t, v2("POST", "/executions/"+unknownID+"/resume", approve, iam(bob)))
	unknown = strings.ReplaceAll(unknown, unknownID, "ID")
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.status == 0 {
				if r := invoke(t, h, tc.payload); r.Error == nil || r.Error.Code != fault.NotFound || strings.Contains(r.Error.Message, "principal") {
					t.Fatalf("%+v, want NOT_FOUND as for an unknown id", r.Error)
				}
				return
			}
			status, r, body := send(t, tc.payload)
			if status != tc.status {
				t.Fatalf("%d %s, want %d", status, body, tc.status)
			}
			if status == 404 {
				if b := strings.NewReplacer(byAlice, "ID", byJWT, "ID", unknownID, "ID").Replace(body); b != unknown {
					t.Fatalf("answered %s; an unknown id is answered %s", b, unknown)
				}
			}
			if status == 200 && (!r.OK || !strings.Contains(string(r.Result), `"deleted":"deleted k"`) && !strings.Contains(string(r.Result), `"code":"TOOL_ERROR"`)) {
				t.Fatalf("%s", body)
			}
		})
	}
}

// TestRESTAPIPrincipal: a REST API (payload 1.0) request carries its IAM
// caller in requestContext.identity, a Cognito user pool's in the
// authorizer's claims.
func TestRESTAPIPrincipal(t *testing.T) {
	h := durableHandler(t)
	type who struct{ arn, sub string }
	rest := func(path, body string, w who) string {
		ev := events.APIGatewayProxyRequest{Resource: path, Path: path, HTTPMethod: "POST", Body: body,
			Headers: map[string]string{"Content-Type": "application/json"}}
		ev.RequestContext.Identity.UserArn = w.arn
		if w.sub != "" {
			ev.RequestContext.Authorizer = map[string]any{"claims": map[string]any{"iss": "https://cognito-idp.example/pool", "sub": w.sub}}
		}
		return mustJSON(ev)
	}
	for _, tc := range []struct {
		name             string
		owner, other     who
		otherStatus, own int
	}{
		{"IAM", who{arn: "arn:aws:iam::1:user/a"}, who{arn: "arn:aws:iam::1:user/b"}, 404, 200},
		{"Cognito", who{sub: "u-1"}, who{sub: "u-2"}, 404, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := h(lambdaCtx(t), json.RawMessage(rest("/execute", suspendBody, tc.owner)))
			if err != nil {
				t.Fatal(err)
			}
			var r execution.Response
			_ = json.Unmarshal([]byte(out.(events.APIGatewayProxyResponse).Body), &r)
			id := suspended(t, &r)
			for _, step := range []struct {
				w      who
				status int
			}{{tc.other, tc.otherStatus}, {tc.owner, tc.own}} {
				out, err := h(lambdaCtx(t), json.RawMessage(rest("/executions/"+id+"/resume", `{"decisions": {"2": "approve"}}`, step.w)))
				if err != nil {
					t.Fatal(err)
				}
				if resp := out.(events.APIGatewayProxyResponse); resp.StatusCode != step.status {
					t.Fatalf("%+v: %d %s, want %d", step.w, resp.StatusCode, resp.Body, step.status)
				}
			}
		})
	}
}

// local is the policy of local use (pml run, pml serve on loopback): the
// caller is the person at the keyboard and decides.
var local = approval.Policy{CallerDecides: true}

// TestLambdaAnswersNameNoApprover: under a deployment's policy, the
// function's answers that tell a caller who decides — a suspension through
// API Gateway or a direct invocation, a refused approval, a refused
// allow_destructive — name a role, never a configured principal.
func TestLambdaAnswersNameNoApprover(t *testing.T) {
	const agent = "arn:aws:iam::210987654321:user/agent"
	policy := approval.Policy{Approvers: []string{"arn:aws:iam::123456789012:role/ops-*", "jwt:https://idp.example#alice"},
		TrustedClients: []string{"jwt:https://idp.example#trusted-*"}}
	kv := demoserver.New()
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	h := func(ctx context.Context, payload json.RawMessage) (any, error) {
		svc := executor.New(engine, executor.Options{Policy: policy, Sources: []execution.ToolSource{demoserver.Source{Set: kv}}, Logger: log,
			Suspensions: suspend.NewFile(dir, suspend.Options{})})
		return lambdaevents.Handler(lambdaevents.Options{HTTP: httpapi.New(httpapi.Options{Service: svc, Logger: log, Policy: policy}), Service: svc, Logger: log})(ctx, payload)
	}
	body := func(payload string) string {
		t.Helper()
		out, err := h(lambdaCtx(t), json.RawMessage(payload))
		if err != nil {
			t.Fatal(err)
		}
		if r, ok := out.(events.APIGatewayV2HTTPResponse); ok {
			return r.Body
		}
		b, _ := json.Marshal(out)
		return string(b)
	}
	var doc execution.Response
	suspendedBody := body(v2("POST", "/execute", suspendBody, iam(agent)))
	_ = json.Unmarshal([]byte(suspendedBody), &doc)
	id := suspended(t, &doc)
	answers := map[string]string{
		"suspended over HTTP":  suspendedBody,
		"suspended, invoked":   body(suspendBody),
		"the caller approving": body(v2("POST", "/executions/"+id+"/resume", `{"decisions": {"2": "approve"}}`, iam(agent))),
		"allow_destructive":    body(v2("POST", "/execute", mustJSON(map[string]any{"code": approvalScript, "allow_destructive": true}), iam(agent))),
	}
	if !strings.Contains(suspendedBody, "an approver") || !strings.Contains(answers["the caller approving"], "FORBIDDEN") {
		t.Fatalf("want a suspension naming the approvers' role, and a refused approval: %s %s", suspendedBody, answers["the caller approving"])
	}
	for what, a := range answers {
		for _, part := range []string{"123456789012", "ops-", "idp.example", "trusted-"} {
			if strings.Contains(a, part) {
				t.Errorf("%s names an approver (%q): %s", what, part, a)
			}
		}
	}
}
