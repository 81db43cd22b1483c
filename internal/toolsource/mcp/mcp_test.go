package mcp

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/argcheck"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/toolsource"
	"github.com/pml-sandbox/pml/internal/trace"
)

func TestDiscoverAndCall(t *testing.T) {
	cases := []struct {
		name, kind, transport, wantTransport string
		legacy                               bool
		wantProtocol                         string
	}{
		{"sse", TransportSSE, TransportSSE, TransportSSE, false, ProtocolVersion},
		{"streamable", TransportStreamable, TransportStreamable, TransportStreamable, false, ModernProtocolVersion},
		{"streamable 2025-11-25 server", TransportStreamable, TransportStreamable, TransportStreamable, true, ProtocolVersion},
		{"auto falls back to sse", TransportSSE, TransportAuto, TransportSSE, false, ProtocolVersion},
		{"auto streamable", TransportStreamable, TransportAuto, TransportStreamable, false, ModernProtocolVersion},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ts := newTestServer(t, tc.kind, srvOpts{legacy: tc.legacy})
			p := newTestPool(t, []Config{{Config: toolsource.Config{Name: "demo"}, URL: ts.URL(), Transport: tc.transport}})
			waitTools(t, p, "demo", "echo", "add", "get-sum")

			tools, err := p.Tools(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tl := range tools {
				names = append(names, tl.Name)
				if tl.Kind != trace.KindMCP || tl.Server != "demo" || len(tl.InputSchema) == 0 {
					t.Errorf("tool %+v: want kind mcp, server demo and an input schema", tl)
				}
				if tl.Name == "add" && (string(tl.OutputSchema) == "" || tl.Annotations.ReadOnly == nil || !*tl.Annotations.ReadOnly) {
					t.Errorf("add: output schema %s, annotations %+v", tl.OutputSchema, tl.Annotations)
				}
			}
			for _, bad := range []string{"__proto__", "constructor"} {
				if slices.Contains(names, bad) {
					t.Errorf("tool %q reached the catalog: %v", bad, names)
				}
			}
			if !slices.Contains(names, "delete_all") {
				t.Errorf("destructive tool delete_all not listed: %v", names)
			}

			h := p.Health()[0]
			if h.State != toolsource.StateHealthy || h.Transport != tc.wantTransport || h.ProtocolVersion != tc.wantProtocol || h.Tools != len(tools) {
				t.Errorf("health %+v; want healthy over %s at %s with %d tools", h, tc.wantTransport, tc.wantProtocol, len(tools))
			}

			calls := []struct {
				tool, args string
				opt        CallOptions
				want       string
			}{
				{"echo", `{"text":"hi"}`, CallOptions{}, `"hi"`},
				{"add", `{"a":1,"b":2}`, CallOptions{}, `{"sum":3}`},
				{"get-sum", `{"a":1,"b":2}`, CallOptions{}, `"{\"sum\":3}"`},
				{"get-sum", `{"a":1,"b":2}`, CallOptions{ParseJSONText: true}, `{"sum":3}`},
				{"multi", ``, CallOptions{}, `["a <b> & c",{"data":"aGk=","mimeType":"image/png","type":"image"}]`},
			}
			for _, c := range calls {
				got, err := call(t, p, "demo", c.tool, c.args, c.opt)
				if err != nil {
					t.Errorf("%s: %v", c.tool, err)
					continue
				}
				if got != c.want {
					t.Errorf("%s(%s) = %s; want %s", c.tool, c.args, got, c.want)
				}
			}
		})
	}
}

// TestRequireApprovalMarksTools: the tools a server's require_approval
// globs name carry RequireApproval, so the executor asks before running them;
// the others do not.
func TestRequireApprovalMarksTools(t *testing.T) {
	ts := newTestServer(t, TransportStreamable, srvOpts{})
	p := newTestPool(t, []Config{{Config: toolsource.Config{Name: "demo", RequireApproval: []string{"get-*", "echo"}}, URL: ts.URL()}})
	waitTools(t, p, "demo", "echo", "add", "get-sum")
	tools, err := p.Tools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var marked []string
	for _, tl := range tools {
		if tl.RequireApproval {
			marked = append(marked, tl.Name)
		}
		if tl.RequireApproval != tl.NeedsApproval() && !tl.IsDestructive() {
			t.Errorf("%s: NeedsApproval %v with RequireApproval %v", tl.Name, tl.NeedsApproval(), tl.RequireApproval)
		}
	}
	if !slices.Equal(marked, []string{"echo", "get-sum"}) {
		t.Errorf("tools requiring approval: %v, want [echo get-sum]", marked)
	}
}

func TestPagination(t *testing.T) {
	for _, kind := range []string{TransportSSE, TransportStreamable} {
		t.Run(kind, func(t *testing.T) {
			ts := newTestServer(t, kind, srvOpts{pageSize: 2})
			p := newTestPool(t, []Config{{Config: toolsource.Config{Name: "paged"}, URL: ts.URL(), Transport: kind}})
			waitTools(t, p, "paged", "add", "big", "create", "echo", "fail", "get-sum", "multi", "slow")
			// 11 tools on the server in pages of 2: at least 6 requests.
			if got := p.Stats().ToolLists; got < 6 {
				t.Errorf("tools/list requests = %d; want >= 6 (pages of 2)", got)
			}
		})
	}
}

// TestWarmReuse proves that a second "execution" in the same process makes
// no initialize and no tools/list.
func TestWarmReuse(t *testing.T) {
	ts := newTestServer(t, TransportSSE, srvOpts{})
	p := newTestPool(t, []Config{{Config: toolsource.Config{Name: "demo"}, URL: ts.URL()}})
	waitTools(t, p, "demo", "echo")
	before := p.Stats()
	first, _ := p.Tools(context.Background())
	for range 3 {
		tools, err := p.Tools(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		// An unchanged catalog is the same slice: the executor reuses what
		// it built from it.
		if len(tools) == 0 || &tools[0] != &first[0] || len(tools) != len(first) {
			t.Error("an unchanged catalog was answered as a new slice")
		}
		if _, err := call(t, p, "demo", "echo", `{"text":"x"}`, CallOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	after := p.Stats()
	if after.Initializes != before.Initializes || after.ToolLists != before.ToolLists {
		t.Errorf("warm executions re-discovered: before %+v after %+v", before, after)
	}
	if after.Calls != before.Calls+3 {
		t.Errorf("calls %d -> %d; want +3", before.Calls, after.Calls)
	}
}

func TestRefreshTTL(t *testing.T) {
	ts := newTestServer(t, TransportStreamable, srvOpts{})
	p := newTestPool(t, []Config{{Config: toolsource.Config{Name: "demo"}, URL: ts.URL()}}, withRefreshTTL(50*time.Millisecond))
	waitTools(t, p, "demo", "echo")
	before := p.Stats().ToolLists
	time.Sleep(100 * time.Millisecond)
	if _, err := p.Tools(context.Background()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for p.Stats().ToolLists == before {
		if time.Now().After(deadline) {
			t.Fatal("catalog past its TTL was never refreshed")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestParallelCallsAcrossServers(t *testing.T) {
	a := newTestServer(t, TransportSSE, srvOpts{})
	b := newTestServer(t, TransportStreamable, srvOpts{})
	p := newTestPool(t, []Config{{Config: toolsource.Config{Name: "a"}, URL: a.URL()}, {Config: toolsource.Config{Name: "b"}, URL: b.URL()}})
	waitTools(t, p, "a", "slow")
	waitTools(t, p, "b", "slow")

	const n = 16
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, n)
	outs := make([]string, n)
	for i := range n {
		wg.Go(func() {
			srv := []string{"a", "b"}[i%2]
			outs[i], errs[i] = call(t, p, srv, "slow", `{"ms":300}`, CallOptions{})
		})
	}
	wg.Wait()
	took := time.Since(start)
	for i := range n {
		if errs[i] != nil || outs[i] != `"done"` {
			t.Errorf("call %d: %s, %v", i, outs[i], errs[i])
		}
	}
	t.Logf("16 parallel 300 ms calls across two servers: %s", took)
	// Sequential would be 4.8 s; anything near that means calls queued.
	// The margin is for a loaded 2-core machine, not a speed target.
	if took > 2400*time.Millisecond {
		t.Errorf("16 parallel 300 ms calls took %s; want well under the 4.8 s of one at a time", took)
	}
}

func TestCallRefusals(t *testing.T) {
	ts := newTestServer(t, TransportSSE, srvOpts{})
	p := newTestPool(t, []Config{
		{Config: toolsource.Config{Name: "demo"}, URL: ts.URL()},
		{Config: toolsource.Config{Name: "open", AllowDestructive: true}, URL: ts.URL()},
		{Config: toolsource.Config{Name: "narrow", Allow: []string{"e*", "get-*", "delete_all"}, Deny: []string{"get-sum"}, AllowDestructive: true}, URL: ts.URL()},
	}, withMaxResultBytes(1000)) // the result cap of the two "result cap" cases
	waitTools(t, p, "demo", "echo")
	waitTools(t, p, "open", "delete_all")
	waitTools(t, p, "narrow", "echo")

	cases := []struct {
		name, server, tool, args string
		opt                      CallOptions
		code                     fault.Code
		paths                    []string
	}{
		{"missing required", "demo", "echo", `{}`, CallOptions{}, fault.InvalidArguments, []string{""}},
		{"wrong type", "demo", "echo", `{"text":5}`, CallOptions{}, fault.InvalidArguments, []string{"/text"}},
		{"nested paths", "demo", "create", `{"user":{"age":-1},"tags":["a",2],"extra":true}`, CallOptions{}, fault.InvalidArguments,
			[]string{"", "/tags/1", "/user", "/user/age"}},
		{"not an object", "demo", "echo", `[1,2]`, CallOptions{}, fault.InvalidArguments, []string{""}},
		{"not JSON", "demo", "echo", `{"text":`, CallOptions{}, fault.InvalidArguments, []string{""}},
		{"valid nested", "demo", "create", `{"user":{"name":"ada","age":36},"tags":["x"]}`, CallOptions{}, "", nil},
		{"unknown tool", "demo", "nope", `{}`, CallOptions{}, fault.ToolNotFound, nil},
		{"unknown server", "ghost", "echo", `{}`, CallOptions{}, fault.ToolNotFound, nil},
		{"dropped reserved name", "demo", "__proto__", `{}`, CallOptions{}, fault.ToolNotFound, nil},
		{"isError", "demo", "fail", `{}`, CallOptions{}, fault.ToolError, nil},
		{"destructive, server forbids", "demo", "delete_all", `{}`, CallOptions{AllowDestructive: true}, fault.Forbidden, nil},
		{"destructive, request forbids", "open", "delete_all", `{}`, CallOptions{}, fault.Forbidden, nil},
		{"destructive, both allow", "open", "delete_all", `{}`, CallOptions{AllowDestructive: true}, "", nil},
		{"allowed by glob", "narrow", "echo", `{"text":"x"}`, CallOptions{}, "", nil},
		{"not in allow list", "narrow", "add", `{"a":1,"b":1}`, CallOptions{}, fault.Forbidden, nil},
		{"denied", "narrow", "get-sum", `{}`, CallOptions{}, fault.Forbidden, nil},
		{"result cap", "demo", "big", `{"n":2000}`, CallOptions{}, fault.LimitExceeded, nil},
		{"under result cap", "demo", "big", `{"n":500}`, CallOptions{}, "", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := p.Stats().Calls
			_, err := call(t, p, tc.server, tc.tool, tc.args, tc.opt)
			if got := codeOf(err); got != tc.code {
				t.Fatalf("code %q (%v); want %q", got, err, tc.code)
			}
			if err == nil {
				return
			}
			fe := fault.As(err)
			if fe.Tool != tc.server+":"+tc.tool {
				t.Errorf("error tool %q; want %s:%s", fe.Tool, tc.server, tc.tool)
			}
			switch tc.code {
			case fault.InvalidArguments, fault.Forbidden, fault.ToolNotFound:
				if after := p.Stats().Calls; after != before {
					t.Errorf("a refused call reached the server (calls %d -> %d)", before, after)
				}
			case fault.ToolError:
				if !strings.Contains(fe.Message, "boom: the widget is broken") {
					t.Errorf("tool error message %q lacks the tool's text", fe.Message)
				}
			case fault.LimitExceeded:
				if fe.Limit != fault.LimitResultBytes {
					t.Errorf("limit %q; want %q", fe.Limit, fault.LimitResultBytes)
				}
			}
			if tc.paths != nil {
				t.Logf("%s", fe.Message)
				details, ok := fe.Details.([]argcheck.Error)
				if !ok || len(details) == 0 {
					t.Fatalf("details %#v; want []argcheck.Error", fe.Details)
				}
				var paths []string
				for _, d := range details {
					if d.Message == "" {
						t.Errorf("empty message at %q", d.Path)
					}
					if !slices.Contains(paths, d.Path) {
						paths = append(paths, d.Path)
					}
				}
				if !slices.Equal(paths, tc.paths) {
					t.Errorf("failing paths %q; want %q (details %+v)", paths, tc.paths, details)
				}
			}
		})
	}

	// The lists also shape the catalog.
	tools, _ := p.Tools(context.Background())
	var narrow []string
	for _, tl := range tools {
		if tl.Server == "narrow" {
			narrow = append(narrow, tl.Name)
		}
	}
	if want := []string{"delete_all", "echo"}; !slices.Equal(narrow, want) {
		t.Errorf("narrow server lists %v; want %v", narrow, want)
	}
}

func TestSlowToolTimesOutWhileOtherServerAnswers(t *testing.T) {
	slow := newTestServer(t, TransportSSE, srvOpts{})
	fast := newTestServer(t, TransportStreamable, srvOpts{})
	p := newTestPool(t, []Config{
		{Config: toolsource.Config{Name: "slow", CallTimeout: 3 * time.Second}, URL: slow.URL()},
		{Config: toolsource.Config{Name: "fast"}, URL: fast.URL()},
	})
	waitTools(t, p, "slow", "slow")
	waitTools(t, p, "fast", "echo")

	slowErr := make(chan error, 1)
	var slowTook time.Duration
	go func() {
		start := time.Now()
		_, err := call(t, p, "slow", "slow", `{"ms":5000}`, CallOptions{})
		slowTook = time.Since(start)
		slowErr <- err
	}()
	slow.waitSlowStarted(t)
	for range 5 {
		if _, err := call(t, p, "fast", "echo", `{"text":"x"}`, CallOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The fast server answered while the slow call was still stuck: it
	// did not wait for it (an event, not a stopwatch).
	select {
	case err := <-slowErr:
		t.Fatalf("the slow call ended (%v after %s) before the fast server's calls did", err, slowTook)
	default:
	}
	err := <-slowErr
	if codeOf(err) != fault.Timeout {
		t.Fatalf("slow call: %v; want TIMEOUT", err)
	}
	// Never early; late only by what a loaded machine adds.
	if slowTook < 3*time.Second || slowTook > 13*time.Second {
		t.Errorf("slow call failed after %s; want its 3 s timeout", slowTook)
	}
	// a timeout is not a reason to drop the server
	if h := p.Health()[0]; h.State != toolsource.StateHealthy {
		t.Errorf("health after a timeout: %+v", h)
	}
}

func TestServerKilledMidCallThenRestarted(t *testing.T) {
	for _, kind := range []string{TransportSSE, TransportStreamable} {
		t.Run(kind, func(t *testing.T) {
			ts := newTestServer(t, kind, srvOpts{})
			p := newTestPool(t, []Config{{Config: toolsource.Config{Name: "demo"}, URL: ts.URL(), Transport: kind}})
			waitTools(t, p, "demo", "slow")

			errc := make(chan error, 1)
			var took time.Duration
			go func() {
				start := time.Now()
				_, err := call(t, p, "demo", "slow", `{"ms":5000}`, CallOptions{})
				took = time.Since(start)
				errc <- err
			}()
			ts.waitSlowStarted(t)
			ts.stop()
			err := <-errc
			fe := fault.As(err)
			if fe == nil || fe.Code != fault.Unavailable || !fe.Retryable {
				t.Fatalf("call on a killed server: %v; want retryable UNAVAILABLE", err)
			}
			// The tool would have answered after 5 s: the call failed
			// because the connection died, not at a timeout.
			if took > 4*time.Second {
				t.Errorf("killed-server call failed after %s; want before its 5 s tool could have answered", took)
			}

			// While down, calls fail at once.
			waitState(t, p, "demo", toolsource.StateUnavailable)
			start := time.Now()
			_, err = call(t, p, "demo", "echo", `{"text":"x"}`, CallOptions{})
			// At once: not after a connect attempt (the test pool's
			// connect timeout is 3 s).
			if codeOf(err) != fault.Unavailable || time.Since(start) > 1500*time.Millisecond {
				t.Errorf("call to a down server: %v after %s; want UNAVAILABLE at once", err, time.Since(start))
			}
			// ...and its tools stay listed, so that calls to them get
			// UNAVAILABLE rather than TOOL_NOT_FOUND.
			if tools, _ := p.Tools(context.Background()); len(tools) == 0 {
				t.Error("a down server's last known tools left the catalog")
			}

			ts.restart()
			deadline := time.Now().Add(5 * time.Second)
			for {
				out, err := call(t, p, "demo", "echo", `{"text":"back"}`, CallOptions{})
				if err == nil {
					if out != `"back"` {
						t.Fatalf("after restart: %s", out)
					}
					break
				}
				if codeOf(err) != fault.Unavailable || time.Now().After(deadline) {
					t.Fatalf("after restart: %v (health %+v)", err, p.Health())
				}
				time.Sleep(50 * time.Millisecond)
			}
			if st := p.Stats(); st.Reconnects < 1 {
				t.Errorf("stats %+v; want a reconnect", st)
			}
		})
	}
}

func waitState(t *testing.T, p *Pool, name string, want toolsource.State) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		for _, h := range p.Health() {
			if h.Name == name && h.State == want {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("server %s never became %s: %+v", name, want, p.Health())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestToolsListChanged(t *testing.T) {
	cases := []struct {
		name, kind string
		legacy     bool
	}{
		{"sse", TransportSSE, false},
		{"streamable 2025-11-25", TransportStreamable, true},
		{"streamable 2026-07-28", TransportStreamable, false},
	}
	for _, tc := range cases {
		kind := tc.kind
		t.Run(tc.name, func(t *testing.T) {
			ts := newTestServer(t, kind, srvOpts{legacy: tc.legacy})
			p := newTestPool(t, []Config{{Config: toolsource.Config{Name: "demo"}, URL: ts.URL(), Transport: kind}})
			waitTools(t, p, "demo", "echo")
			// The notification goes out on the event stream (SSE: the
			// connection itself; streamable 2025-11-25: the GET stream
			// opened after initialize; 2026-07-28: subscriptions/listen),
			// so it must be open first.
			ts.waitStreamOpen(t)
			ts.addTool("fresh")
			waitTools(t, p, "demo", "fresh")
			out, err := call(t, p, "demo", "fresh", `{}`, CallOptions{})
			if err != nil || out != `"fresh"` {
				t.Fatalf("new tool: %s, %v", out, err)
			}
		})
	}
}

func TestExpiredSessionReinitialised(t *testing.T) {
	// Sessions are 2025-11-25's: 2026-07-28 has none to lose.
	ts := newTestServer(t, TransportStreamable, srvOpts{stateful: true, legacy: true})
	p := newTestPool(t, []Config{{Config: toolsource.Config{Name: "demo"}, URL: ts.URL(), Transport: TransportStreamable}})
	waitTools(t, p, "demo", "echo")
	if _, err := call(t, p, "demo", "echo", `{"text":"1"}`, CallOptions{}); err != nil {
		t.Fatal(err)
	}
	before := p.Stats()
	// A restarted stateful server knows no sessions: our next request gets
	// 404 and must be re-initialised and retried without the caller seeing.
	ts.stop()
	ts.restart()
	out, err := call(t, p, "demo", "echo", `{"text":"2"}`, CallOptions{})
	if err != nil || out != `"2"` {
		t.Fatalf("call after session loss: %s, %v (health %+v)", out, err, p.Health())
	}
	after := p.Stats()
	if after.Initializes != before.Initializes+1 {
		t.Errorf("initializes %d -> %d; want exactly one re-initialisation", before.Initializes, after.Initializes)
	}
	if after.Reconnects != before.Reconnects {
		t.Errorf("reconnects %d -> %d; the session should be re-initialised, not the connection rebuilt", before.Reconnects, after.Reconnects)
	}
}

func TestHeadersFromSecretsAreSentNotLogged(t *testing.T) {
	const secret = "s3cr3t-token-value"
	t.Setenv("MCPCLIENT_TEST_TOKEN", secret)
	ts := newTestServer(t, TransportStreamable, srvOpts{})
	var logs strings.Builder
	var mu sync.Mutex
	logger := newLockedLogger(&logs, &mu)
	cfg := Config{Config: toolsource.Config{Name: "demo", Headers: map[string]string{"Authorization": "Bearer ${env:MCPCLIENT_TEST_TOKEN}"}}, URL: ts.URL()}
	p := newTestPool(t, []Config{cfg}, withLogger(logger))
	waitTools(t, p, "demo", "echo")
	if _, err := call(t, p, "demo", "echo", `{"text":"x"}`, CallOptions{}); err != nil {
		t.Fatal(err)
	}
	seen := ts.auths()
	if len(seen) == 0 || !slices.Contains(seen, "Bearer "+secret) {
		t.Fatalf("server saw Authorization %q; want the resolved secret", seen)
	}
	logger.Info("config", "server", cfg)
	_ = p.Close()
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(logs.String(), secret) {
		t.Errorf("a log line holds the secret:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), redacted) {
		t.Errorf("config was not logged redacted:\n%s", logs.String())
	}
}

func TestMissingSecretKeepsServerUnavailable(t *testing.T) {
	ts := newTestServer(t, TransportStreamable, srvOpts{})
	p := newTestPool(t, []Config{{Config: toolsource.Config{Name: "demo", Headers: map[string]string{"Authorization": "Bearer ${env:MCPCLIENT_TEST_UNSET_VAR}"}}, URL: ts.URL()}},
		withReconnectBackoff(10*time.Millisecond, 10*time.Millisecond, 2))
	_, err := call(t, p, "demo", "echo", `{"text":"x"}`, CallOptions{})
	if codeOf(err) != fault.Unavailable || !strings.Contains(err.Error(), "MCPCLIENT_TEST_UNSET_VAR") {
		t.Fatalf("call: %v; want UNAVAILABLE naming the missing variable", err)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, cfgs := range [][]Config{
		{{Config: toolsource.Config{Name: ""}, URL: "http://127.0.0.1:1/mcp"}},
		{{Config: toolsource.Config{Name: "__proto__"}, URL: "http://127.0.0.1:1/mcp"}},
		{{Config: toolsource.Config{Name: "a:b"}, URL: "http://127.0.0.1:1/mcp"}},
		{{Config: toolsource.Config{Name: "a"}, URL: "http://127.0.0.1:1/mcp"}, {Config: toolsource.Config{Name: "a"}, URL: "http://127.0.0.1:2/mcp"}},
		{{Config: toolsource.Config{Name: "a"}, URL: "ftp://127.0.0.1/x"}},
		{{Config: toolsource.Config{Name: "a"}, URL: "http://127.0.0.1:1/mcp", Transport: "websocket"}},
	} {
		p, err := openPool(cfgs)
		if err == nil {
			_ = p.Close()
			t.Errorf("New(%v) succeeded", cfgs)
			continue
		}
		if codeOf(err) != fault.InvalidRequest {
			t.Errorf("New(%v): %v; want INVALID_REQUEST", cfgs, err)
		}
	}
}

func TestClosedPool(t *testing.T) {
	ts := newTestServer(t, TransportSSE, srvOpts{})
	p := newTestPool(t, []Config{{Config: toolsource.Config{Name: "demo"}, URL: ts.URL()}})
	waitTools(t, p, "demo", "echo")
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := p.Call(context.Background(), "demo", "echo", json.RawMessage(`{"text":"x"}`), CallOptions{})
	if fe := fault.As(err); fe == nil || fe.Code != fault.Unavailable || fe.Retryable {
		t.Errorf("call after Close: %v; want non-retryable UNAVAILABLE", err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestDownServerAbsentOthersServed(t *testing.T) {
	ts := newTestServer(t, TransportSSE, srvOpts{})
	p := newTestPool(t, []Config{
		{Config: toolsource.Config{Name: "dead"}, URL: "http://127.0.0.1:1/mcp"},
		{Config: toolsource.Config{Name: "live"}, URL: ts.URL()},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	tools, err := p.Tools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range tools {
		if tl.Server == "dead" {
			t.Fatalf("dead server listed %s", tl.Name)
		}
	}
	if len(tools) == 0 {
		t.Fatal("live server's tools missing")
	}
	h := p.Health()
	if h[0].State != toolsource.StateUnavailable || h[0].LastError == "" || h[1].State != toolsource.StateHealthy {
		t.Errorf("health %+v", h)
	}
	_, err = call(t, p, "dead", "echo", `{}`, CallOptions{})
	if fe := fault.As(err); fe.Code != fault.Unavailable || !fe.Retryable {
		t.Errorf("call to dead server: %v", err)
	}
}

// TestDownServerKeepsLastKnownTools: a server that goes down keeps its last
// known catalog; any call to it, even to a name it never listed, is a
// retryable UNAVAILABLE, and CheckServer says so before any call.
func TestDownServerKeepsLastKnownTools(t *testing.T) {
	ts := newTestServer(t, TransportSSE, srvOpts{})
	p := newTestPool(t, []Config{{Config: toolsource.Config{Name: "demo"}, URL: ts.URL(), Transport: TransportSSE}})
	waitTools(t, p, "demo", "echo")
	if err := p.CheckServer("demo"); err != nil {
		t.Fatalf("CheckServer while up: %v", err)
	}
	before, _ := p.Tools(context.Background())

	ts.stop()
	waitState(t, p, "demo", toolsource.StateUnavailable)
	after, _ := p.Tools(context.Background())
	if len(after) != len(before) {
		t.Errorf("a down server lists %d tools; want its last known %d", len(after), len(before))
	}
	if h := p.Health()[0]; h.Tools != len(before) {
		t.Errorf("health %+v; want the %d last known tools counted", h, len(before))
	}
	for _, tool := range []string{"echo", "never_listed"} {
		start := time.Now()
		_, err := call(t, p, "demo", tool, `{"text":"x"}`, CallOptions{})
		if fe := fault.As(err); fe == nil || fe.Code != fault.Unavailable || !fe.Retryable {
			t.Errorf("%s on a down server: %v; want retryable UNAVAILABLE", tool, err)
		}
		// At once: not after a connect attempt (3 s in the test pool).
		if took := time.Since(start); took > 1500*time.Millisecond {
			t.Errorf("%s on a down server failed after %s; want at once", tool, took)
		}
	}
	if fe := fault.As(p.CheckServer("demo")); fe == nil || fe.Code != fault.Unavailable || !fe.Retryable {
		t.Errorf("CheckServer on a down server: %v; want retryable UNAVAILABLE", fe)
	}
}

func TestServersAndCheckServer(t *testing.T) {
	ts := newTestServer(t, TransportSSE, srvOpts{})
	p := newTestPool(t, []Config{
		{Config: toolsource.Config{Name: "dead"}, URL: "http://127.0.0.1:1/mcp?api_key=SECRET-key"},
		{Config: toolsource.Config{Name: "live"}, URL: ts.URL()},
	})
	waitTools(t, p, "live", "echo")
	if got := p.Servers(); !slices.Equal(got, []string{"dead", "live"}) {
		t.Errorf("Servers() = %v; want the configured names in order", got)
	}
	err := p.CheckServer("dead")
	if fe := fault.As(err); fe == nil || fe.Code != fault.Unavailable || !fe.Retryable || strings.Contains(fe.Message, "SECRET") {
		t.Errorf("CheckServer(dead) = %v; want a scrubbed retryable UNAVAILABLE", err)
	}
	if err := p.CheckServer("live"); err != nil {
		t.Errorf("CheckServer(live) = %v", err)
	}
	if codeOf(p.CheckServer("ghost")) != fault.ToolNotFound {
		t.Errorf("CheckServer(ghost) = %v; want TOOL_NOT_FOUND", p.CheckServer("ghost"))
	}
}
