package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/lambda/types"

	"github.com/pml-sandbox/pml/internal/sdkhttp"
)

// restGateway is a local stand-in for the template's REST API, whose
// Lambda proxy integration streams (responseTransferMode STREAM): each
// request becomes a REST API event (payload 1.0) that goes to the execute
// function through InvokeWithResponseStream — the AWS SDK's own client
// against the Lambda emulator, as API Gateway calls Lambda — and the
// function's stream comes back as it arrives: its prelude (status and
// headers, before eight NUL bytes), then the body, flushed chunk by chunk.
// It waits as long as the function runs (API Gateway allows 15 minutes),
// not the HTTP API's 30 s. authorize, when set, stands for the REST API's
// authorizer: it turns the request's Authorization header into the
// requestContext.authorizer API Gateway passes on, or refuses it (401).
func (s *stack) restGateway(t *testing.T, authorize func(r *http.Request) (map[string]any, bool)) string {
	t.Helper()
	client := lambda.New(lambda.Options{Region: "us-east-1", BaseEndpoint: aws.String(s.emu.Endpoint()),
		Credentials: credentials.NewStaticCredentialsProvider("local", "local", ""), HTTPClient: sdkhttp.New(nil)})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ev := events.APIGatewayProxyRequest{Resource: r.URL.Path, Path: r.URL.Path, HTTPMethod: r.Method, Body: string(body),
			Headers: map[string]string{}, MultiValueHeaders: map[string][]string{}}
		ev.RequestContext.Stage = "prod"
		ev.RequestContext.Path = "/prod" + r.URL.Path
		if q := r.URL.Query(); len(q) > 0 {
			ev.QueryStringParameters, ev.MultiValueQueryStringParameters = map[string]string{}, map[string][]string(q)
			for k, vs := range q {
				ev.QueryStringParameters[k] = vs[len(vs)-1]
			}
		}
		// Who the caller is, as IAM (SigV4) verified it: here the test
		// says so in a header the stand-in takes out.
		if p := r.Header.Get(principalHeader); strings.HasPrefix(p, "arn:") {
			ev.RequestContext.Identity.UserArn = p
		}
		r.Header.Del(principalHeader)
		if authorize != nil {
			ctxAuth, ok := authorize(r)
			if !ok {
				http.Error(w, `{"message":"Unauthorized"}`, http.StatusUnauthorized)
				return
			}
			ev.RequestContext.Authorizer = ctxAuth
		}
		for k, vs := range r.Header {
			ev.Headers[k] = vs[len(vs)-1]
			ev.MultiValueHeaders[k] = vs
		}
		payload, _ := json.Marshal(ev)
		out, err := client.InvokeWithResponseStream(r.Context(), &lambda.InvokeWithResponseStreamInput{FunctionName: aws.String("execute"), Payload: payload})
		if err != nil {
			http.Error(w, "invoke: "+err.Error(), http.StatusBadGateway)
			return
		}
		stream := out.GetStream()
		defer stream.Close()
		var head bytes.Buffer
		started, sent, took := false, 0, time.Now()
		// What went through, in the test's log (shown when it fails).
		defer func() {
			t.Logf("rest: %s %s (%d bytes in) → %d bytes out in %v", r.Method, r.URL.Path, len(body), sent, time.Since(took))
		}()
		for e := range stream.Events() {
			switch v := e.(type) {
			case *types.InvokeWithResponseStreamResponseEventMemberPayloadChunk:
				chunk := v.Value.Payload
				if !started {
					head.Write(chunk)
					i := bytes.Index(head.Bytes(), make([]byte, 8))
					if i < 0 {
						continue
					}
					var prelude struct {
						StatusCode        int                 `json:"statusCode"`
						Headers           map[string]string   `json:"headers"`
						MultiValueHeaders map[string][]string `json:"multiValueHeaders"`
					}
					if err := json.Unmarshal(head.Bytes()[:i], &prelude); err != nil {
						http.Error(w, "bad prelude: "+head.String(), http.StatusBadGateway)
						return
					}
					for k, v := range prelude.Headers {
						w.Header().Set(k, v)
					}
					for k, vs := range prelude.MultiValueHeaders {
						w.Header()[http.CanonicalHeaderKey(k)] = vs
					}
					w.WriteHeader(prelude.StatusCode)
					started = true
					chunk = head.Bytes()[i+8:]
				}
				if len(chunk) > 0 {
					n, err := w.Write(chunk)
					sent += n
					if err != nil {
						return
					}
				}
				w.(http.Flusher).Flush()
			case *types.InvokeWithResponseStreamResponseEventMemberInvokeComplete:
				if c := v.Value; c.ErrorCode != nil {
					t.Logf("rest: %s %s: the function failed: %s %s", r.Method, r.URL.Path, aws.ToString(c.ErrorCode), aws.ToString(c.ErrorDetails))
					if !started {
						http.Error(w, fmt.Sprintf("function failed: %s %s", aws.ToString(c.ErrorCode), aws.ToString(c.ErrorDetails)), http.StatusBadGateway)
						return
					}
				}
			}
		}
		if err := stream.Err(); err != nil {
			t.Logf("rest: %s %s: the stream broke: %v", r.Method, r.URL.Path, err)
		}
		if !started {
			http.Error(w, "the function streamed no prelude", http.StatusBadGateway)
		}
	})
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// sse is one server-sent event and when it arrived.
type sse struct {
	name, data string
	at         time.Time
}

// readSSE reads events from body as they arrive, until it ends.
func readSSE(body io.Reader) []sse {
	var out []sse
	var cur sse
	buf := make([]byte, 0, 64<<10)
	tmp := make([]byte, 32<<10)
	for {
		n, err := body.Read(tmp)
		now := time.Now()
		buf = append(buf, tmp[:n]...)
		for {
			i := bytes.IndexByte(buf, '\n')
			if i < 0 {
				break
			}
			line := string(buf[:i])
			buf = buf[i+1:]
			switch {
			case strings.HasPrefix(line, "event: "):
				cur = sse{name: strings.TrimPrefix(line, "event: "), at: now}
			case strings.HasPrefix(line, "data: "):
				cur.data = strings.TrimPrefix(line, "data: ")
			case line == "" && cur.name != "":
				out = append(out, cur)
				cur = sse{}
			}
		}
		if err != nil {
			return out
		}
	}
}

// postJSON posts body to url with extra headers and returns the response.
func post(t *testing.T, ctx context.Context, url, body string, headers ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}
