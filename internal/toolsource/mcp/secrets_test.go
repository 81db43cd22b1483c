package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/server"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/toolsource"
)

// Every secret the tests configure contains this marker, so that a leak of
// any of them, or of a recognisable part, is found by one search.
const secretMarker = "SECRET"

const (
	// querySecret needs escaping in a URL, so that both its raw and its
	// decoded form must be scrubbed.
	querySecret  = "q-SECRET/+=42"
	headerSecret = "h-SECRET-token-7"
	// passSecret is a URL userinfo password.
	passSecret = "p-SECRET-pw"
)

// secretConfig points a server at base with every kind of secret the pool
// knows: a query value, userinfo, and an Authorization header resolved from
// the environment.
func secretConfig(t *testing.T, name, base, transport string) Config {
	t.Helper()
	t.Setenv("MCPCLIENT_TEST_BEARER", headerSecret)
	u := strings.Replace(base, "http://", "http://user:"+passSecret+"@", 1)
	return Config{Config: toolsource.Config{Name: name, Headers: map[string]string{"Authorization": "Bearer ${env:MCPCLIENT_TEST_BEARER}"}}, URL: u + "?api_key=" + strings.NewReplacer("/", "%2F", "+", "%2B", "=", "%3D").Replace(querySecret) + "&page=1", Transport: transport}
}

// echoServer is a real mcp-go streamable HTTP server behind a handler that
// can refuse requests with an HTTP status and a long body quoting the
// request's Authorization header and URL, as misconfigured proxies and
// careless servers do.
type echoServer struct {
	url    string
	status int
	// jsonRPC makes the refusal a JSON-RPC error answer that quotes the
	// header in its message.
	jsonRPC bool
	// refuseAll refuses every request; refuseCalls only tools/call.
	refuseAll, refuseCalls atomic.Bool
}

func newEchoServer(t *testing.T, status int, jsonRPC bool) *echoServer {
	t.Helper()
	m := server.NewMCPServer("echo", "1.0", server.WithToolCapabilities(true))
	quit := make(chan struct{})
	addTestTools(m, quit, nil)
	sh := server.NewStreamableHTTPServer(m)
	e := &echoServer{status: status, jsonRPC: jsonRPC}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var msg rpcMsg
		_ = json.Unmarshal(body, &msg)
		if e.refuseAll.Load() || (e.refuseCalls.Load() && msg.Method == "tools/call") {
			e.refuse(w, r, msg)
			return
		}
		sh.ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = hs.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = hs.Close()
		<-done
		close(quit)
		_ = sh.Shutdown(context.Background())
	})
	e.url = "http://" + ln.Addr().String() + "/mcp"
	return e
}

func (e *echoServer) refuse(w http.ResponseWriter, r *http.Request, msg rpcMsg) {
	echo := fmt.Sprintf("denied: Authorization: %s; url: %s; %s", r.Header.Get("Authorization"), r.URL, strings.Repeat("x", 8000))
	w.Header().Set("WWW-Authenticate", `Bearer realm="`+r.Header.Get("Authorization")+`"`)
	if e.jsonRPC && len(msg.ID) > 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(e.status)
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": msg.ID,
			"error": map[string]any{"code": -32001, "message": echo[:120]}})
		_, _ = w.Write(b)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(e.status)
	_, _ = io.WriteString(w, echo)
}

// leakCheck collects everything that leaves the pool and reports any
// secret in it.
type leakCheck struct {
	t    *testing.T
	mu   sync.Mutex
	logs strings.Builder
}

func (l *leakCheck) pool(cfgs ...Config) *Pool {
	return newTestPool(l.t, cfgs, withLogger(newLockedLogger(&l.logs, &l.mu)),
		withReconnectBackoff(20*time.Millisecond, 50*time.Millisecond, 3), withConnectTimeout(time.Second))
}

// err checks one error as a script would see it: its message and its JSON.
func (l *leakCheck) err(what string, err error) {
	l.t.Helper()
	if err == nil {
		return
	}
	fe := fault.As(err)
	b, _ := json.Marshal(fe)
	for _, s := range []string{err.Error(), string(b)} {
		if strings.Contains(s, secretMarker) {
			l.t.Errorf("%s: the error holds a secret: %s", what, s)
		}
	}
	// A quoted body is cut short: the 8000-byte echo must not come through.
	if len(fe.Message) > 2048 {
		l.t.Errorf("%s: error message of %d bytes; want a short one", what, len(fe.Message))
	}
}

func (l *leakCheck) health(p *Pool) {
	l.t.Helper()
	b, _ := json.Marshal(p.Health())
	if strings.Contains(string(b), secretMarker) {
		l.t.Errorf("Health holds a secret: %s", b)
	}
	if !strings.Contains(string(b), `"url":"http://[REDACTED]@127.0.0.1:`) || !strings.Contains(string(b), "api_key=[REDACTED]") {
		l.t.Errorf("Health does not show the (redacted) URL: %s", b)
	}
}

// closeAndCheckLogs closes p (so no goroutine logs later) and checks every
// line it wrote.
func (l *leakCheck) closeAndCheckLogs(p *Pool) {
	l.t.Helper()
	_ = p.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range strings.Split(l.logs.String(), "\n") {
		if strings.Contains(line, secretMarker) {
			l.t.Errorf("a log line holds a secret: %s", line)
		}
	}
}

// TestSecretsNeverLeaveThePool: a server configured with secrets in its URL
// and headers works, then dies; its errors, its health and the pool's logs
// never show a secret.
func TestSecretsNeverLeaveThePool(t *testing.T) {
	ts := newTestServer(t, TransportStreamable, srvOpts{})
	l := &leakCheck{t: t}
	p := l.pool(secretConfig(t, "demo", ts.URL(), TransportStreamable))
	waitTools(t, p, "demo", "echo")
	if !strings.Contains(strings.Join(ts.auths(), ","), headerSecret) {
		t.Fatalf("the server never saw the header secret: %q", ts.auths())
	}
	_, err := call(t, p, "demo", "echo", `{"text":"x"}`, CallOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.health(p)

	ts.stop()
	// The first call after the kill fails in the transport and starts the
	// probe that retires the connection.
	_, err = call(t, p, "demo", "echo", `{"text":"x"}`, CallOptions{})
	if codeOf(err) != fault.Unavailable {
		t.Fatalf("call to a killed server: %v; want UNAVAILABLE", err)
	}
	l.err("call to a killed server", err)
	waitState(t, p, "demo", toolsource.StateUnavailable)
	// Wait for a connect attempt to fail on the dead address, so that its
	// error (which names the URL) is the server's last error.
	waitLastError(t, p, "demo", "connection refused")
	_, err = call(t, p, "demo", "echo", `{"text":"x"}`, CallOptions{})
	if codeOf(err) != fault.Unavailable {
		t.Fatalf("call to a dead server: %v; want UNAVAILABLE", err)
	}
	l.err("call to a dead server", err)
	l.health(p)
	l.closeAndCheckLogs(p)
}

// TestRefusalsQuotingSecrets: servers that answer with a status and a body
// quoting the Authorization header and URL, at connect time and at call
// time.
func TestRefusalsQuotingSecrets(t *testing.T) {
	for _, tc := range []struct {
		status  int
		jsonRPC bool
	}{
		{http.StatusUnauthorized, false},
		{http.StatusForbidden, false},
		{http.StatusInternalServerError, false},
		{http.StatusForbidden, true},
		{http.StatusOK, true},
	} {
		name := fmt.Sprintf("%d", tc.status)
		if tc.jsonRPC {
			name += "-jsonrpc"
		}
		t.Run(name+"/connect", func(t *testing.T) {
			e := newEchoServer(t, tc.status, tc.jsonRPC)
			e.refuseAll.Store(true)
			l := &leakCheck{t: t}
			p := l.pool(secretConfig(t, "demo", e.url, TransportAuto))
			_, err := call(t, p, "demo", "echo", `{"text":"x"}`, CallOptions{})
			if codeOf(err) != fault.Unavailable {
				t.Fatalf("call: %v; want UNAVAILABLE", err)
			}
			l.err("call to a refusing server", err)
			l.health(p)
			l.closeAndCheckLogs(p)
		})
		t.Run(name+"/call", func(t *testing.T) {
			e := newEchoServer(t, tc.status, tc.jsonRPC)
			l := &leakCheck{t: t}
			p := l.pool(secretConfig(t, "demo", e.url, TransportStreamable))
			waitTools(t, p, "demo", "echo")
			e.refuseCalls.Store(true)
			_, err := call(t, p, "demo", "echo", `{"text":"x"}`, CallOptions{})
			if err == nil {
				t.Fatal("a refused call succeeded")
			}
			l.err("refused call", err)
			l.health(p)
			l.closeAndCheckLogs(p)
		})
	}
}

// waitLastError waits until server's last error mentions substr.
func waitLastError(t *testing.T, p *Pool, name, substr string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, h := range p.Health() {
			if h.Name == name && strings.Contains(h.LastError, substr) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("server %s: last error never mentioned %q: %+v", name, substr, p.Health())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
