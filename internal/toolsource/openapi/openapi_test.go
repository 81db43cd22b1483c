package openapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/oauthclient"
	"github.com/pml-sandbox/pml/internal/testutil/oauthserver"
	"github.com/pml-sandbox/pml/internal/toolsource"
)

// seen is one request the shop server received.
type seen struct {
	Method, Path, RawPath, Query, Body, ContentType, Accept, Auth, Cookie, RequestID, TraceParent string
}

// shop serves the shop document's API, recording every request.
type shop struct {
	*httptest.Server
	mu       sync.Mutex
	requests []seen
	answer   func(w http.ResponseWriter, r *http.Request) bool // true: handled
}

func newShop(t *testing.T) *shop {
	s := &shop{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.requests = append(s.requests, seen{Method: r.Method, Path: r.URL.Path, RawPath: r.URL.EscapedPath(), Query: r.URL.RawQuery,
			Body: string(body), ContentType: r.Header.Get("Content-Type"), Accept: r.Header.Get("Accept"),
			Auth: r.Header.Get("Authorization"), Cookie: r.Header.Get("Cookie"), RequestID: r.Header.Get("X-Request-Id"),
			TraceParent: r.Header.Get("Traceparent")})
		answer := s.answer
		s.mu.Unlock()
		if answer != nil && answer(w, r) {
			return
		}
		switch {
		case r.Method == "GET" && r.URL.Path == "/api/orders":
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `[{"id": 1, "items": [{"sku": "a", "qty": 2}]}]`)
		case r.Method == "DELETE":
			w.WriteHeader(http.StatusNoContent)
		case r.Method == "PATCH":
			w.Header().Set("Content-Type", "text/plain")
			_, _ = io.WriteString(w, "patched <ok>")
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"id": 7, "items": []}`)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *shop) last(t *testing.T) seen {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.requests) == 0 {
		t.Fatal("no request reached the server")
	}
	return s.requests[len(s.requests)-1]
}

func (s *shop) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.requests)
}

func quietLogger() *slog.Logger { return slog.New(slog.NewJSONHandler(io.Discard, nil)) }

// open starts a toolsource.Set of OpenAPI servers, as the app does; its
// retries are quick, so that a document back up is found in a test's
// time.
func open(env toolsource.Env, cfgs ...Config) (*toolsource.Set, error) {
	specs := make([]toolsource.Spec, len(cfgs))
	for i, c := range cfgs {
		specs[i] = c
	}
	if env.Logger == nil {
		env.Logger = quietLogger()
	}
	env.Retry = toolsource.Retry{Initial: 5 * time.Millisecond, Max: 20 * time.Millisecond, Attempts: 3}
	return toolsource.New(context.Background(), toolsource.NewRegistry(Kind{}), specs, env)
}

func newSourceWith(t *testing.T, env toolsource.Env, cfgs ...Config) *toolsource.Set {
	t.Helper()
	src, err := open(env, cfgs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	return src
}

func newSource(t *testing.T, cfgs ...Config) *toolsource.Set {
	t.Helper()
	return newSourceWith(t, toolsource.Env{}, cfgs...)
}

func toolOf(t *testing.T, src *toolsource.Set, name string) catalog.Tool {
	t.Helper()
	tools, err := src.Tools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools {
		if tool.Name == name {
			return tool
		}
	}
	t.Fatalf("no tool %s", name)
	return catalog.Tool{}
}

func TestCalls(t *testing.T) {
	srv := newShop(t)
	t.Setenv("SHOP_TOKEN", "s3cret-token-value")
	src := newSource(t, Config{Config: toolsource.Config{Name: "shop", Headers: map[string]string{"Authorization": "Bearer ${env:SHOP_TOKEN}"},
		AllowDestructive: true}, Spec: "testdata/shop.yaml", BaseURL: srv.URL + "/api"})
	ctx := context.Background()
	allow := execution.CallOptions{Lineage: execution.Lineage{AllowDestructive: true}}
	tests := []struct {
		tool, args string
		want       string // the result, compact JSON
		check      func(t *testing.T, r seen)
	}{
		{tool: "listOrders", args: `{"status": ["open", "shipped"], "limit": 5, "X-Request-Id": "r-1"}`,
			want: `[{"id": 1, "items": [{"sku": "a", "qty": 2}]}]`,
			check: func(t *testing.T, r seen) {
				if r.Query != "limit=5&status=open&status=shipped" || r.RequestID != "r-1" || r.Auth != "Bearer s3cret-token-value" {
					t.Errorf("request %+v", r)
				}
				if r.Accept != "application/json" {
					t.Errorf("accept %q", r.Accept)
				}
			}},
		{tool: "createOrder", args: `{"body": {"items": [{"sku": "a", "qty": 1}]}}`, want: `{"id": 7, "items": []}`,
			check: func(t *testing.T, r seen) {
				if r.Method != "POST" || r.Body != `{"items": [{"sku": "a", "qty": 1}]}` || r.ContentType != "application/json" {
					t.Errorf("request %+v", r)
				}
			}},
		{tool: "getOrder", args: `{"path_id": 42, "query_id": "a&b=c", "session": "x y"}`, want: `{"id": 7, "items": []}`,
			check: func(t *testing.T, r seen) {
				if r.Path != "/api/orders/42" || r.Query != "id=a%26b%3Dc" || r.Cookie != "session=x+y" {
					t.Errorf("request %+v", r)
				}
			}},
		{tool: "put_orders_id", args: `{"id": 3, "body": {"note": "fragile & heavy"}}`, want: `{"id": 7, "items": []}`,
			check: func(t *testing.T, r seen) {
				if r.Body != "note=fragile+%26+heavy" || r.ContentType != "application/x-www-form-urlencoded" {
					t.Errorf("form body %+v", r)
				}
			}},
		{tool: "delete_orders_id", args: `{"id": 3}`, want: `null`},
		{tool: "patch_orders_id_lines_line", args: `{"id": 3, "line": "../../admin", "body": "two"}`, want: `"patched <ok>"`,
			check: func(t *testing.T, r seen) {
				if r.RawPath != "/api/orders/3/lines/..%2F..%2Fadmin" || r.Body != "two" || r.ContentType != "text/plain" {
					t.Errorf("request %+v: the value must stay in its segment", r)
				}
			}},
		{tool: "patch_orders_id_lines_line", args: `{"id": 3, "line": "..", "body": ""}`, want: `"patched <ok>"`,
			check: func(t *testing.T, r seen) {
				if r.RawPath != "/api/orders/3/lines/%2E%2E" {
					t.Errorf("path %s: .. must not climb", r.RawPath)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.tool, func(t *testing.T) {
			out, err := src.Call(ctx, toolOf(t, src, tc.tool), json.RawMessage(tc.args), allow)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := compact(t, out), compact(t, json.RawMessage(tc.want)); got != want {
				t.Errorf("result %s, want %s", got, want)
			}
			if tc.check != nil {
				tc.check(t, srv.last(t))
			}
		})
	}
}

func compact(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// TestRefusedBeforeSending: a call the policy or the schema refuses never
// reaches the service.
func TestRefusedBeforeSending(t *testing.T) {
	srv := newShop(t)
	src := newSource(t,
		Config{Config: toolsource.Config{Name: "shop", AllowDestructive: true, Deny: []string{"put_*"}}, Spec: "testdata/shop.yaml",
			BaseURL: srv.URL + "/api", ReadOnly: []string{"createOrder"}, Destructive: []string{"listOrders"}},
		Config{Config: toolsource.Config{Name: "locked"}, Spec: "testdata/shop.yaml", BaseURL: srv.URL + "/api"})
	ctx := context.Background()
	allow := execution.CallOptions{Lineage: execution.Lineage{AllowDestructive: true}}
	tests := []struct {
		name       string
		tool       catalog.Tool
		args       string
		opt        execution.CallOptions
		code       fault.Code
		messageHas string
	}{
		{name: "bad argument", tool: catalog.Tool{Server: "shop", Name: "getOrder"}, args: `{"path_id": "seven"}`, opt: allow, code: fault.InvalidArguments},
		{name: "misspelt argument", tool: catalog.Tool{Server: "shop", Name: "createOrder"}, args: `{"bdy": {}}`, opt: allow, code: fault.InvalidArguments},
		{name: "denied", tool: catalog.Tool{Server: "shop", Name: "put_orders_id"}, args: `{"id": 1}`, opt: allow, code: fault.Forbidden, messageHas: "not allowed"},
		{name: "marked destructive, not allowed by the request", tool: catalog.Tool{Server: "shop", Name: "listOrders"}, args: `{}`, code: fault.Forbidden, messageHas: "request does not allow"},
		{name: "destructive by method", tool: catalog.Tool{Server: "shop", Name: "delete_orders_id"}, args: `{"id": 1}`, code: fault.Forbidden},
		{name: "server does not allow destructive", tool: catalog.Tool{Server: "locked", Name: "delete_orders_id"}, args: `{"id": 1}`, opt: allow, code: fault.Forbidden, messageHas: "does not allow destructive"},
		{name: "no such operation", tool: catalog.Tool{Server: "shop", Name: "nothing"}, args: `{}`, opt: allow, code: fault.ToolNotFound},
		{name: "no such server", tool: catalog.Tool{Server: "nowhere", Name: "x"}, args: `{}`, opt: allow, code: fault.ToolNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := src.Call(ctx, tc.tool, json.RawMessage(tc.args), tc.opt)
			if fault.CodeOf(err) != tc.code || !strings.Contains(fault.As(err).Message, tc.messageHas) {
				t.Errorf("error %v, want %s %q", err, tc.code, tc.messageHas)
			}
		})
	}
	if n := srv.count(); n != 0 {
		t.Errorf("%d requests reached the service", n)
	}
	// Marked read-only, a POST runs without allow_destructive.
	if _, err := src.Call(ctx, catalog.Tool{Server: "shop", Name: "createOrder"}, json.RawMessage(`{"body": {"items": [{"sku": "a", "qty": 1}]}}`), execution.CallOptions{}); err != nil {
		t.Errorf("read-only POST: %v", err)
	}
	tools, _ := src.Tools(ctx)
	for _, tool := range tools {
		if tool.Server == "shop" && strings.HasPrefix(tool.Name, "put_") {
			t.Errorf("denied tool listed: %s", tool.Name)
		}
		if tool.Server == "shop" && tool.Name == "listOrders" && !tool.IsDestructive() {
			t.Error("listOrders not marked destructive")
		}
	}
}

// TestResponses: non-2xx is a TOOL_ERROR with the status and a bounded
// body; redirects elsewhere are not followed; oversized bodies and slow
// services are bounded; secrets never show.
func TestResponses(t *testing.T) {
	srv := newShop(t)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the other host was reached: %s %s (auth %q)", r.Method, r.URL, r.Header.Get("Authorization"))
	}))
	defer other.Close()
	release := make(chan struct{})
	defer close(release)
	srv.answer = func(w http.ResponseWriter, r *http.Request) bool {
		switch r.Header.Get("X-Request-Id") {
		case "404":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(404)
			_, _ = io.WriteString(w, `{"error": "no order", "token": "k3y-abcdef-123456", "pad": "`+strings.Repeat("x", 10000)+`"}`)
		case "503":
			w.WriteHeader(503)
		case "away":
			http.Redirect(w, r, other.URL+"/steal", http.StatusTemporaryRedirect)
		case "same":
			if r.URL.Query().Get("moved") != "" {
				return false
			}
			http.Redirect(w, r, "/api/orders?moved=1", http.StatusFound)
		case "huge":
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `"`+strings.Repeat("x", 2<<20)+`"`)
		case "slow":
			select {
			case <-r.Context().Done():
			case <-release:
			}
		case "binary":
			w.Header().Set("Content-Type", "image/png")
			_, _ = w.Write([]byte{0x89, 'P', 'N', 'G'})
		case "badjson":
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"half":`)
		default:
			return false
		}
		return true
	}
	src := newSource(t, Config{Config: toolsource.Config{Name: "shop", Headers: map[string]string{"X-Api-Key": "k3y-abcdef-123456"},
		CallTimeout: 300 * time.Millisecond}, Spec: "testdata/shop.yaml", BaseURL: srv.URL + "/api"})
	ctx := context.Background()
	tool := catalog.Tool{Server: "shop", Name: "listOrders"}
	call := func(id string) (json.RawMessage, error) {
		return src.Call(ctx, tool, json.RawMessage(`{"X-Request-Id": "`+id+`"}`), execution.CallOptions{})
	}
	tests := []struct {
		id         string
		code       fault.Code
		messageHas []string
		retryable  bool
	}{
		{id: "404", code: fault.ToolError, messageHas: []string{"HTTP 404 Not Found", `"error":"no order"`}},
		{id: "503", code: fault.ToolError, messageHas: []string{"HTTP 503"}, retryable: true},
		{id: "away", code: fault.ToolError, messageHas: []string{"HTTP 307", "redirect not followed"}},
		{id: "huge", code: fault.LimitExceeded},
		{id: "slow", code: fault.Timeout, messageHas: []string{"no answer within 300ms"}},
		{id: "badjson", code: fault.ToolError, messageHas: []string{"not valid JSON"}},
	}
	for _, tc := range tests {
		t.Run(tc.id, func(t *testing.T) {
			_, err := call(tc.id)
			fe := fault.As(err)
			if fe.Code != tc.code || fe.Retryable != tc.retryable {
				t.Fatalf("error %v (retryable %v), want %s (retryable %v)", err, fe.Retryable, tc.code, tc.retryable)
			}
			for _, s := range tc.messageHas {
				if !strings.Contains(fe.Message, s) {
					t.Errorf("message %q does not say %q", fe.Message, s)
				}
			}
			if strings.Contains(fe.Message, "k3y-abcdef-123456") {
				t.Errorf("message shows the API key: %q", fe.Message)
			}
			if len(fe.Message) > maxErrorBody+200 {
				t.Errorf("message of %d bytes", len(fe.Message))
			}
		})
	}
	out, err := call("same")
	if err != nil || srv.last(t).Query != "moved=1" {
		t.Errorf("same-host redirect: %s %v %+v", out, err, srv.last(t))
	}
	out, err = call("binary")
	if err != nil || compact(t, out) != `{"base64":"iVBORw==","content_type":"image/png"}` {
		t.Errorf("binary: %s %v", out, err)
	}
}

// TestUnavailableDocument: a document URL that cannot be fetched leaves
// its server unavailable (retryably), not the process failed; a document
// URL the service refuses is a configuration error.
func TestUnavailableDocument(t *testing.T) {
	var mu sync.Mutex
	up := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if !up {
			w.WriteHeader(503)
			return
		}
		_, _ = io.WriteString(w, docHead+`"paths":{`+okOp+`}}`)
	}))
	defer srv.Close()
	src := newSource(t, Config{Config: toolsource.Config{Name: "later"}, Spec: srv.URL + "/openapi.json"})
	err := src.CheckServer("later")
	if fe := fault.As(err); fe.Code != fault.Unavailable || !fe.Retryable || !strings.Contains(fe.Message, "HTTP 503") {
		t.Fatalf("CheckServer: %v", err)
	}
	h := src.Health()
	if len(h) != 1 || h[0].State != toolsource.StateUnavailable || !strings.Contains(h[0].LastError, "HTTP 503") {
		t.Errorf("health %+v", h)
	}
	_, err = src.Call(context.Background(), catalog.Tool{Server: "later", Name: "get_ok"}, nil, execution.CallOptions{})
	if fault.CodeOf(err) != fault.Unavailable {
		t.Errorf("call: %v", err)
	}
	// Once the service answers, the next look tries again (in the
	// background: the Set's retries, then each look's demand) and the
	// tools arrive.
	mu.Lock()
	up = true
	mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for src.CheckServer("later") != nil {
		if time.Now().After(deadline) {
			t.Fatalf("never loaded: %+v", src.Health())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if tools, _ := src.Tools(context.Background()); len(tools) != 1 || tools[0].Name != "get_ok" {
		t.Errorf("tools %v", tools)
	}

	// A document the service serves but the bounds refuse fails New.
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, docHead+`"servers":[{"url":"http://169.254.169.254/"}],"paths":{`+okOp+`}}`)
	}))
	defer bad.Close()
	_, err = open(toolsource.Env{}, Config{Config: toolsource.Config{Name: "evil"}, Spec: bad.URL + "/openapi.json"})
	if fault.CodeOf(err) != fault.InvalidRequest || !errors.Is(err, ErrForeignServer) && !strings.Contains(err.Error(), "another host") {
		t.Errorf("foreign server: %v", err)
	}
}

// TestOAuthClientCredentials: a service behind OAuth 2.1 (RFC 9728
// challenges) is called with a token the oauthclient client gets by the
// client-credentials grant, as an MCP server's would be.
func TestOAuthClientCredentials(t *testing.T) {
	as := oauthserver.Start(t, oauthserver.Options{Clients: map[string]string{"shop-client": "shop-secret-123456"}})
	var mux http.ServeMux
	api := httptest.NewServer(&mux)
	defer api.Close()
	resource := api.URL + "/api/"
	mux.Handle("/", as.Protect(resource, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `[{"id": 1, "items": []}]`)
	})))
	t.Setenv("SHOP_CLIENT_SECRET", "shop-secret-123456")
	src := newSource(t, Config{Config: toolsource.Config{Name: "shop"}, Spec: "testdata/shop.yaml", BaseURL: resource,
		Auth: Auth{Config: oauthclient.Config{Type: oauthclient.TypeClientCredentials, ClientID: "shop-client", ClientSecret: "${env:SHOP_CLIENT_SECRET}"}}})
	out, err := src.Call(context.Background(), catalog.Tool{Server: "shop", Name: "listOrders"}, nil, execution.CallOptions{})
	if err != nil || compact(t, out) != `[{"id":1,"items":[]}]` {
		t.Fatalf("%s, %v", out, err)
	}
	if c := as.Counts(); c.ClientCredentials != 1 {
		t.Errorf("counts %+v, want one client-credentials grant", c)
	}
}

// TestSigV4: with auth sigv4 every request is signed for execute-api with
// the process's AWS credentials (aws-sdk-go-v2's v4 signer).
func TestSigV4(t *testing.T) {
	srv := newShop(t)
	var auth, date string
	srv.answer = func(w http.ResponseWriter, r *http.Request) bool {
		auth, date = r.Header.Get("Authorization"), r.Header.Get("X-Amz-Date")
		return false
	}
	cfg := aws.Config{Region: "eu-west-1", Credentials: credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG", "")}
	src := newSourceWith(t, toolsource.Env{AWS: func(context.Context) (aws.Config, error) { return cfg, nil }},
		Config{Config: toolsource.Config{Name: "shop", AllowDestructive: true}, Spec: "testdata/shop.yaml", BaseURL: srv.URL + "/api",
			Auth: Auth{Config: oauthclient.Config{Type: AuthSigV4}}})
	allow := execution.CallOptions{Lineage: execution.Lineage{AllowDestructive: true}}
	if _, err := src.Call(context.Background(), catalog.Tool{Server: "shop", Name: "createOrder"}, json.RawMessage(`{"body": {"items": [{"sku": "a", "qty": 1}]}}`), allow); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/") || !strings.Contains(auth, "/eu-west-1/execute-api/aws4_request") || date == "" {
		t.Errorf("Authorization %q, X-Amz-Date %q", auth, date)
	}
	if r := srv.last(t); r.Body != `{"items": [{"sku": "a", "qty": 1}]}` {
		t.Errorf("the signed request's body: %q", r.Body)
	}
	if strings.Contains(fmt.Sprint(src.Health()), "wJalrXUtnFEMI") {
		t.Error("health shows the secret key")
	}
}

// TestEchoedSecretsMasked: a service that echoes what it is sent does not
// hand the script its credentials.
func TestEchoedSecretsMasked(t *testing.T) {
	srv := newShop(t)
	srv.answer = func(w http.ResponseWriter, r *http.Request) bool {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"headers": r.Header, "query": r.URL.RawQuery})
		return true
	}
	t.Setenv("SHOP_TOKEN", "tok-echo-987654")
	src := newSource(t, Config{Config: toolsource.Config{Name: "shop", Headers: map[string]string{"Authorization": "Bearer ${env:SHOP_TOKEN}"}},
		Spec: "testdata/shop.yaml", BaseURL: srv.URL + "/api", Query: map[string]string{"key": "q-secret-555"}})
	out, err := src.Call(context.Background(), catalog.Tool{Server: "shop", Name: "listOrders"}, nil, execution.CallOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(out) || strings.Contains(string(out), "tok-echo-987654") || strings.Contains(string(out), "q-secret-555") {
		t.Errorf("result shows a secret: %s", out)
	}
	if !strings.Contains(string(out), "[REDACTED]") {
		t.Errorf("nothing masked: %s", out)
	}
}
