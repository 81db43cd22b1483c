// Package lambdaevents adapts the events AWS delivers to the execute Lambda
// — API Gateway HTTP API (payload 2.0) and REST API (1.0) requests, SQS
// batches, EventBridge events and direct invocations — onto the one HTTP
// handler and the one execution service, so every entry point behaves the
// same way.
//
// The execute function's handler (Handler) routes by the event's shape:
//
//   - an API Gateway HTTP API request (payload 2.0), or a REST API request
//     (payload 1.0, as an HTTP API's 1.0 is) → the HTTP handler
//     (internal/httpapi: the REST routes, /mcp, the approval page), an
//     HTTP API's path without its stage prefix, and the caller's principal
//     taken from what API Gateway verified;
//   - an SQS batch, an EventBridge event → execute requests, which refuse
//     approval "suspend" unless suspensions are announced (Notified):
//     nobody would see the pending calls;
//   - a direct invocation: {"code": …} an execute request, {"resume":
//     {"execution_id": …, "decisions": {…}}} a resume request (both answer
//     the execution's document), {"run": {"execution_id": …}} the
//     function's own asynchronous invocation (InvokeSelf) that runs an
//     asynchronous execution (or takes over one whose runner died), and
//     {"sweep": {}} the deployment's schedule, every minute, that finds
//     the runs whose runner died and launches them to be continued.
//
// The capability function's handler (CapabilityHandler) takes an
// execution.Invocation and answers the capability run's document.
//
// HTTP API answers are buffered, and an execution behind it ends at the
// API's 30 s (HTTPAPITimeout) so that its caller gets its document and id
// rather than the gateway's bare 504. REST API requests are answered as a
// stream (StreamREST: the REST API's Lambda proxy integration in STREAM
// mode): the status and headers, then the body as the handler writes it —
// event streams and MCP notifications live, for up to the function's
// timeout.
package lambdaevents

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	jsonv2 "github.com/go-json-experiment/json"
	"golang.org/x/sync/errgroup"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
)

// Options configure the adapter.
type Options struct {
	// HTTP serves API Gateway events (the HTTP API's handler).
	HTTP http.Handler
	// Service runs SQS, EventBridge and direct executions.
	Service execution.Executor
	Logger  *slog.Logger
	// FlushMargin is kept free before the Lambda deadline for writing
	// traces and answering (default 500 ms).
	FlushMargin time.Duration
	// SQSConcurrency bounds executions run at once from one batch (default 4).
	SQSConcurrency int
	// Notified is whether the deployment announces suspensions to
	// approvers: only then may SQS messages and EventBridge events ask
	// for approval "suspend" (execution.Request.CheckQueued).
	Notified bool
	// Runner runs asynchronous executions ({"run": …} invocations):
	// internal/runs' Service.
	Runner Runner
	// StreamREST answers REST API (payload 1.0) events as streamed
	// responses (events.APIGatewayProxyStreamingResponse): set it when
	// the REST API's integration is in STREAM mode, as template.yaml's
	// is; a buffered integration would not understand them.
	StreamREST bool
	// HTTPAPITimeout is how long the HTTP API waits for an answer (its
	// integration timeout, at most 30 s): an execution behind it ends
	// then (default 30 s).
	HTTPAPITimeout time.Duration
}

// Runner runs the queued asynchronous execution id, or takes over one
// whose runner died (runs.Service.Run), and launches those whose runner
// died to be taken over (runs.Service.Sweep).
type Runner interface {
	Run(ctx context.Context, id string) error
	Sweep(ctx context.Context) (int, error)
}

// Handler returns the function's handler for lambda.Start.
func Handler(opts Options) func(ctx context.Context, payload json.RawMessage) (any, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.FlushMargin <= 0 {
		opts.FlushMargin = 500 * time.Millisecond
	}
	if opts.SQSConcurrency <= 0 {
		opts.SQSConcurrency = 4
	}
	if opts.HTTPAPITimeout <= 0 {
		opts.HTTPAPITimeout = 30 * time.Second
	}
	a := &adapter{opts}
	return a.handle
}

type adapter struct{ Options }

// probe holds the fields that tell event shapes apart.
type probe struct {
	Version        string          `json:"version"`
	RouteKey       string          `json:"routeKey"`
	HTTPMethod     string          `json:"httpMethod"`
	Resource       string          `json:"resource"`
	Records        []probeRecord   `json:"Records"`
	DetailType     string          `json:"detail-type"`
	Detail         json.RawMessage `json:"detail"`
	Code           *string         `json:"code"`
	Resume         json.RawMessage `json:"resume"`
	Run            json.RawMessage `json:"run"`
	Sweep          json.RawMessage `json:"sweep"`
	RequestContext json.RawMessage `json:"requestContext"`
}

type probeRecord struct {
	EventSource string `json:"eventSource"`
}

func (a *adapter) handle(ctx context.Context, payload json.RawMessage) (any, error) {
	ctx, cancel := a.withMargin(ctx)
	var p probe
	if err := json.Unmarshal(payload, &p); err != nil {
		cancel()
		return nil, fault.Wrap(fault.InvalidRequest, err, "the event is not a JSON object")
	}
	// A REST API event has no version (an HTTP API's payload 1.0 says
	// "1.0", and is buffered).
	if a.StreamREST && p.HTTPMethod != "" && p.RequestContext != nil && p.Version == "" {
		// The answer streams on after this returns: the stream ends ctx.
		return a.restStream(ctx, cancel, payload)
	}
	defer cancel()
	switch {
	case p.Version == "2.0" && p.RouteKey != "":
		var ev events.APIGatewayV2HTTPRequest
		if err := json.Unmarshal(payload, &ev); err != nil {
			return nil, fault.Wrap(fault.InvalidRequest, err, "bad HTTP API event")
		}
		return a.httpV2(ctx, ev), nil
	case p.HTTPMethod != "" && p.RequestContext != nil:
		var ev events.APIGatewayProxyRequest
		if err := json.Unmarshal(payload, &ev); err != nil {
			return nil, fault.Wrap(fault.InvalidRequest, err, "bad REST API event")
		}
		return a.restV1(ctx, ev), nil
	case len(p.Records) > 0 && p.Records[0].EventSource == "aws:sqs":
		var ev events.SQSEvent
		if err := json.Unmarshal(payload, &ev); err != nil {
			return nil, fault.Wrap(fault.InvalidRequest, err, "bad SQS event")
		}
		return a.sqs(ctx, ev), nil
	case p.DetailType != "" && p.Detail != nil:
		return a.direct(ctx, p.Detail, execution.SourceEventBridge), nil
	case p.Resume != nil:
		return a.resume(ctx, payload), nil
	case p.Run != nil:
		return a.run(ctx, payload)
	case p.Sweep != nil:
		return a.sweep(ctx, payload)
	case p.Code != nil:
		return a.direct(ctx, payload, execution.SourceInvoke), nil
	}
	return nil, fault.New(fault.InvalidRequest, "unrecognised event: expected an API Gateway request, an SQS batch, an EventBridge event, an execute request with code or a resume request")
}

// withMargin leaves FlushMargin before the Lambda deadline for traces.
func (a *adapter) withMargin(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok {
		return context.WithDeadline(ctx, d.Add(-a.FlushMargin))
	}
	return context.WithCancel(ctx)
}

// decode reads an execute request that came from src, as every front end
// does, with the queued sources' rule on approvals.
func (a *adapter) decode(body []byte, src execution.Source) (execution.Request, *fault.Error) {
	req, ferr := execution.Decode(body, src)
	if ferr == nil {
		ferr = req.CheckQueued(a.Notified)
	}
	return req, ferr
}

// direct runs one execute request (direct Invoke or EventBridge detail).
func (a *adapter) direct(ctx context.Context, body []byte, src execution.Source) *execution.Response {
	req, ferr := a.decode(body, src)
	if ferr != nil {
		if src == execution.SourceEventBridge {
			// Nobody reads an EventBridge target's answer: say it here.
			a.Logger.WarnContext(ctx, "bad EventBridge event", "err", ferr)
		}
		return &execution.Response{Error: ferr, Logs: nil}
	}
	req.TraceHeader = execution.TraceHeader(ctx, "")
	resp := a.Service.Execute(ctx, req)
	a.flush(ctx)
	return resp
}

// invokeResume is a direct invocation that resumes an execution.
type invokeResume struct {
	Resume json.RawMessage `json:"resume"`
}

// resume continues a suspended execution from a direct invocation
// {"resume": {"execution_id", "decisions", "call_detail"}}: the answer is
// the execution's document, or, when nothing ran, one whose error says why
// (NOT_FOUND, CONFLICT, EXPIRED, RESUME_INCOMPATIBLE, FORBIDDEN…). An
// invocation carries no caller identity, so its principal is "": it
// resumes what direct invocations (or an API without auth) suspended.
func (a *adapter) resume(ctx context.Context, payload []byte) *execution.Response {
	var in invokeResume
	if err := jsonv2.Unmarshal(payload, &in, jsonv2.RejectUnknownMembers(true)); err != nil {
		return &execution.Response{Error: fault.Wrap(fault.InvalidRequest, err, `a resume invocation is {"resume": {"execution_id": …, "decisions": {…}}} and nothing else`)}
	}
	rr, ferr := execution.DecodeResume(in.Resume, "")
	if ferr != nil {
		return &execution.Response{Error: ferr, ExecutionID: rr.ExecutionID}
	}
	rr.TraceHeader = execution.TraceHeader(ctx, "")
	resp, ferr := a.Service.Resume(ctx, rr)
	if ferr != nil {
		return &execution.Response{Error: ferr, ExecutionID: rr.ExecutionID}
	}
	a.flush(ctx)
	return resp
}

func (a *adapter) flush(ctx context.Context) {
	// The execution's own deadline may have passed; the flush still gets
	// the margin we kept.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.FlushMargin)
	defer cancel()
	if err := a.Service.Flush(fctx); err != nil {
		a.Logger.WarnContext(ctx, "trace flush failed", "err", err)
	}
}

// sqs runs each message as one execution, a few at a time, and reports the
// messages to retry. A malformed message or a run that failed for a
// transient reason (TIMEOUT, UNAVAILABLE, INTERNAL, SANDBOX_ERROR) is
// reported as a failure so SQS redelivers it and, after maxReceiveCount,
// moves it to the dead-letter queue. A script that ran and threw is a final
// answer: retrying the same code would throw again, so it is not.
func (a *adapter) sqs(ctx context.Context, ev events.SQSEvent) events.SQSEventResponse {
	var resp events.SQSEventResponse
	failed := make([]bool, len(ev.Records))
	var g errgroup.Group
	g.SetLimit(a.SQSConcurrency)
	for i, m := range ev.Records {
		g.Go(func() error {
			req, ferr := a.decode([]byte(m.Body), execution.SourceSQS)
			if ferr != nil {
				a.Logger.WarnContext(ctx, "bad SQS message", "message_id", m.MessageId, "err", ferr)
				failed[i] = true
				return nil
			}
			req.TraceHeader = execution.TraceHeader(ctx, "")
			r := a.Service.Execute(ctx, req)
			a.Logger.InfoContext(ctx, "sqs execution", "message_id", m.MessageId, "execution_id", r.ExecutionID, "ok", r.OK)
			if !r.OK && r.Error != nil {
				switch r.Error.Code {
				case fault.Timeout, fault.Unavailable, fault.Internal, fault.SandboxError:
					failed[i] = true
				}
			}
			return nil
		})
	}
	_ = g.Wait()
	a.flush(ctx)
	for i, f := range failed {
		if f {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: ev.Records[i].MessageId})
		}
	}
	if resp.BatchItemFailures == nil {
		resp.BatchItemFailures = []events.SQSBatchItemFailure{}
	}
	return resp
}

// httpV2 serves an HTTP API (payload 2.0) request through the handler.
func (a *adapter) httpV2(ctx context.Context, ev events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse {
	path := ev.RawPath
	if path == "" {
		path = ev.RequestContext.HTTP.Path
	}
	path = stripStage(path, ev.RequestContext.Stage)
	// API Gateway joins a repeated request header into one value with
	// commas, which means the same to HTTP (cookies come apart, below).
	headers := http.Header{}
	for k, v := range ev.Headers {
		headers.Set(k, v)
	}
	if len(ev.Cookies) > 0 {
		headers.Set("Cookie", strings.Join(ev.Cookies, "; "))
	}
	ctx = execution.WithPrincipal(ctx, principalV2(ev.RequestContext.Authorizer))
	// Past the HTTP API's wait nobody reads the answer: end the execution
	// in time to answer its document (and id) instead.
	ctx, cancel := context.WithTimeout(ctx, max(a.HTTPAPITimeout-a.FlushMargin, a.FlushMargin))
	defer cancel()
	rec := a.serve(newRequest(ctx, ev.RequestContext.HTTP.Method, path, ev.RawQueryString, headers, ev.Body, ev.IsBase64Encoded))
	out := events.APIGatewayV2HTTPResponse{StatusCode: rec.Code, Headers: map[string]string{}}
	for k, vs := range rec.Header() {
		if k == "Set-Cookie" {
			// Payload 2.0 has a field of its own for cookies: a
			// Set-Cookie value may hold commas (Expires), so it cannot be
			// joined like the others.
			out.Cookies = append(out.Cookies, vs...)
			continue
		}
		// Payload 2.0 takes one string a header; several values are
		// joined with commas, as HTTP allows for every header but
		// Set-Cookie.
		out.Headers[k] = strings.Join(vs, ", ")
	}
	out.Body, out.IsBase64Encoded = encodeBody(rec)
	return out
}

// restV1 serves a REST API (payload 1.0) request through the handler.
func (a *adapter) restV1(ctx context.Context, ev events.APIGatewayProxyRequest) events.APIGatewayProxyResponse {
	rec := a.serve(restRequest(ctx, ev))
	// Every value goes in MultiValueHeaders, which API Gateway prefers for
	// a header named in both; Headers keeps the first value each for
	// readers of the single-value form.
	out := events.APIGatewayProxyResponse{StatusCode: rec.Code, Headers: map[string]string{}, MultiValueHeaders: map[string][]string{}}
	for k, vs := range rec.Header() {
		out.Headers[k] = vs[0]
		out.MultiValueHeaders[k] = vs
	}
	out.Body, out.IsBase64Encoded = encodeBody(rec)
	return out
}

// Principals are who API Gateway authenticated, as an execution keeps
// them: an IAM caller's ARN ("arn:aws:iam::123456789012:user/dev", or an
// assumed role's session ARN), or a JWT's issuer and subject
// ("jwt:https://issuer#subject"); "" where the route has no auth.
// Only the principal that suspended an execution may resume it.

// principalV2 is the principal of an HTTP API (payload 2.0) request.
func principalV2(auth *events.APIGatewayV2HTTPRequestContextAuthorizerDescription) string {
	switch {
	case auth == nil:
		return ""
	case auth.IAM != nil && auth.IAM.UserARN != "":
		return auth.IAM.UserARN
	case auth.JWT != nil:
		return jwtPrincipal(auth.JWT.Claims["iss"], auth.JWT.Claims["sub"])
	}
	return ""
}

// principalV1 is the principal of a REST API (payload 1.0) request: IAM,
// the authorize function's verified issuer and subject (the template's
// JWT authorizer), or a Cognito user pool authorizer's claims.
func principalV1(rc events.APIGatewayProxyRequestContext) string {
	if rc.Identity.UserArn != "" {
		return rc.Identity.UserArn
	}
	iss, _ := rc.Authorizer["iss"].(string)
	sub, _ := rc.Authorizer["sub"].(string)
	if iss != "" && sub != "" {
		return jwtPrincipal(iss, sub)
	}
	if claims, ok := rc.Authorizer["claims"].(map[string]any); ok {
		iss, _ := claims["iss"].(string)
		sub, _ := claims["sub"].(string)
		return jwtPrincipal(iss, sub)
	}
	return ""
}

func jwtPrincipal(iss, sub string) string { return "jwt:" + iss + "#" + sub }

// values is what http.Header and url.Values have in common.
type values interface {
	Add(key, value string)
	Get(key string) string
}

// merge adds a payload 1.0 request's values to dst: every value of the
// multi-value form, then, for keys it lacks, the single-value form (API
// Gateway sends both, the single one with only the last value).
func merge(dst values, multi map[string][]string, single map[string]string) {
	for k, vs := range multi {
		for _, v := range vs {
			dst.Add(k, v)
		}
	}
	for k, v := range single {
		if dst.Get(k) == "" {
			dst.Add(k, v)
		}
	}
}

// serve runs req through the handler and records its answer; a request
// that could not be made (ferr) is answered 400.
func (a *adapter) serve(req *http.Request, ferr *fault.Error) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	if ferr != nil {
		writeBadRequest(rec, ferr)
		return rec
	}
	a.HTTP.ServeHTTP(rec, req)
	return rec
}

// restRequest is the handler's request for a REST API (payload 1.0)
// event, the caller's principal in its context.
func restRequest(ctx context.Context, ev events.APIGatewayProxyRequest) (*http.Request, *fault.Error) {
	headers := http.Header{}
	merge(headers, ev.MultiValueHeaders, ev.Headers)
	q := url.Values{}
	merge(q, ev.MultiValueQueryStringParameters, ev.QueryStringParameters)
	ctx = execution.WithPrincipal(ctx, principalV1(ev.RequestContext))
	return newRequest(ctx, ev.HTTPMethod, ev.Path, q.Encode(), headers, ev.Body, ev.IsBase64Encoded)
}

// newRequest is the handler's request for an API Gateway event's parts.
func newRequest(ctx context.Context, method, path, rawQuery string, headers http.Header, body string, b64 bool) (*http.Request, *fault.Error) {
	raw := []byte(body)
	if b64 {
		dec, err := base64.StdEncoding.DecodeString(body)
		if err != nil {
			return nil, fault.Wrap(fault.InvalidRequest, err, "the body is not valid base64")
		}
		raw = dec
	}
	if path == "" {
		path = "/"
	}
	target := path
	if rawQuery != "" {
		target += "?" + rawQuery
	}
	src := execution.SourceHTTP
	if strings.HasPrefix(path, "/mcp") {
		src = execution.SourceMCP
	}
	req, err := http.NewRequestWithContext(execution.WithSource(ctx, src), method, "http://lambda"+target, bytes.NewReader(raw))
	if err != nil {
		return nil, fault.Wrap(fault.InvalidRequest, err, "")
	}
	req.Header = headers
	return req, nil
}

// writeBadRequest answers a request that could not be made into one.
func writeBadRequest(w http.ResponseWriter, ferr *fault.Error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	_ = json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": ferr})
}

// stripStage removes a "/stage" prefix that API Gateway keeps in the path of
// non-default stages.
func stripStage(path, stage string) string {
	if stage == "" || stage == "$default" {
		return path
	}
	if p, ok := strings.CutPrefix(path, "/"+stage); ok && (p == "" || strings.HasPrefix(p, "/")) {
		if p == "" {
			return "/"
		}
		return p
	}
	return path
}

// encodeBody returns the body as text, or base64 when it is not UTF-8 text.
func encodeBody(rec *httptest.ResponseRecorder) (string, bool) {
	ct := rec.Header().Get("Content-Type")
	b := rec.Body.Bytes()
	if strings.HasPrefix(ct, "application/json") || strings.HasPrefix(ct, "text/") || ct == "" {
		return string(b), false
	}
	return base64.StdEncoding.EncodeToString(b), true
}
