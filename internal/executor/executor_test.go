package executor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/testutil/dynamolocal"
	"github.com/pml-sandbox/pml/internal/testutil/enginetest"
	"github.com/pml-sandbox/pml/internal/toolsource"
	mcpkind "github.com/pml-sandbox/pml/internal/toolsource/mcp"
	"github.com/pml-sandbox/pml/internal/trace"
)

var engine *guest.Engine

func TestMain(m *testing.M) {
	// The continuation benchmarks share DynamoDB Local: stopped before
	// the leak check.
	enginetest.Main(m, func(e *guest.Engine) { engine = e }, dynamolocal.StopAll)
}

// memSink keeps what it is given, for assertions.
type memSink struct {
	execs []trace.Execution
	calls [][]trace.Call
}

func (s *memSink) Record(_ context.Context, e trace.Execution, c []trace.Call) {
	s.execs = append(s.execs, e)
	s.calls = append(s.calls, c)
}
func (s *memSink) Flush(context.Context) error { return nil }

// fixture is a service over two real MCP servers: the demo server reached
// over SSE as "kv" and over streamable HTTP as "text", plus an odd server
// "ev" whose tool names are not JS identifiers.
type fixture struct {
	svc  *executor.Service
	sink *memSink
	pool *toolsource.Set
	mcp  *mcpkind.Kind
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ds, err := demoserver.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ds.Close() })
	odd := startOddServer(t)
	ctx := context.Background()
	kind := &mcpkind.Kind{}
	pool, err := kind.NewSet(ctx, toolsource.Env{Logger: slog.New(slog.DiscardHandler)}, []mcpkind.Config{
		{Config: toolsource.Config{Name: "kv", AllowDestructive: true}, URL: ds.SSEURL(), Transport: "sse"},
		{Config: toolsource.Config{Name: "text"}, URL: ds.StreamableURL(), Transport: "streamable"},
		{Config: toolsource.Config{Name: "ev", AllowDestructive: true}, URL: odd, Transport: "auto"},
	}...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pool.Close() })
	sink := &memSink{}
	svc := executor.New(engine, executor.Options{Policy: local, Sources: []execution.ToolSource{pool, demoserver.Source{}}, Sink: sink})
	// Wait for discovery so every test starts from a warm catalog.
	deadline := time.Now().Add(10 * time.Second)
	for len(svc.Catalog(ctx)) < 20 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	return &fixture{svc: svc, sink: sink, pool: pool, mcp: kind}
}

func startOddServer(t *testing.T) string {
	t.Helper()
	m := server.NewMCPServer("odd", "1.0", server.WithToolCapabilities(true))
	m.AddTool(mcp.NewTool("get-sum", mcp.WithDescription("Adds a and b"), mcp.WithNumber("a", mcp.Required()), mcp.WithNumber("b", mcp.Required()), mcp.WithReadOnlyHintAnnotation(true)),
		func(_ context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText(fmt.Sprint(r.GetFloat("a", 0) + r.GetFloat("b", 0))), nil
		})
	m.AddTool(mcp.NewTool("wipe", mcp.WithDescription("Deletes everything"), mcp.WithDestructiveHintAnnotation(true), mcp.WithReadOnlyHintAnnotation(false)),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText("wiped"), nil
		})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: server.NewStreamableHTTPServer(m, server.WithStateLess(true)), ReadHeaderTimeout: time.Second}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	return "http://" + ln.Addr().String() + "/mcp"
}

func (f *fixture) run(t *testing.T, code string, mods ...func(*execution.Request)) *execution.Response {
	t.Helper()
	req := execution.Request{Code: code, TimeoutMS: 10000, Source: "test"}
	for _, m := range mods {
		m(&req)
	}
	return f.svc.Execute(context.Background(), req)
}

func jsonEq(t *testing.T, got json.RawMessage, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("result %q: %v", got, err)
	}
	_ = json.Unmarshal([]byte(want), &w)
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	if string(gb) != string(wb) {
		t.Fatalf("result = %s, want %s", gb, wb)
	}
}

func TestBridge(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		name     string
		code     string
		mod      func(*execution.Request)
		want     string     // JSON result when ok
		wantCode fault.Code // error code otherwise
		calls    int        // traced calls expected
	}{
		{name: "call over SSE", code: `await mcp.kv.kv_set({key: "k", value: [1, 2]}); return (await mcp.kv.kv_get({key: "k"})).value`, want: `[1,2]`, calls: 2},
		{name: "call over streamable HTTP", code: `return await mcp.text.transform_text({text: "abc", op: "upper"})`, want: `"ABC"`, calls: 1},
		{name: "bracket access to non-identifier names", code: `return await mcp.ev["get-sum"]({a: 2, b: 3})`, want: `"5"`, calls: 1},
		{name: "schema violation is refused before anything leaves", code: `return await mcp.text.transform_text({text: 1, op: "shout"})`, wantCode: fault.InvalidArguments, calls: 1},
		{name: "isError becomes TOOL_ERROR", code: `return await mcp.kv.kv_delete({key: "missing"})`, mod: allowDestructive, wantCode: fault.ToolError, calls: 1},
		{name: "destructive refused by default", code: `return await mcp.ev.wipe({})`, wantCode: fault.Forbidden, calls: 1},
		{name: "destructive allowed when asked", code: `return await mcp.ev.wipe({})`, mod: allowDestructive, want: `"wiped"`, calls: 1},
		{name: "unknown tool rejected before the sandbox starts", code: `return await mcp.kv.kv_gte({key: "k"})`, wantCode: fault.ToolNotFound, calls: 0},
		{name: "narrowing hides the rest", code: `return await mcp.kv.kv_get({key: "k"})`, mod: narrow("text:*"), wantCode: fault.ToolNotFound, calls: 0},
		{name: "narrowing keeps what it names", code: `return Object.keys(mcp).sort()`, mod: narrow("text:*", "demo:echo"), want: `["demo","text"]`, calls: 0},
		{name: "narrowing cannot widen", code: `return 1`, mod: narrow("nowhere:*"), wantCode: fault.ToolNotFound, calls: 0},
		{name: "dynamic access resolves at call time", code: `const s = "te" + "xt"; return await mcp[s].word_count({text: "a b"})`, want: `{"words":2,"lines":1,"chars":3}`, calls: 1},
		{name: "dynamic access to a missing tool fails at once", code: `const s = "nope"; return await mcp.text[s]({})`, wantCode: fault.ToolNotFound, calls: 0},
		{name: "tools.search ranks inside the sandbox", code: `return (await tools.search("count words in a text", 1)).map(t => t.server + ":" + t.name)`, want: `["text:word_count"]`, calls: 1},
		{name: "tools.describe gives TypeScript", code: `const d = await tools.describe(); return d.includes("transform_text(args: {") && d.includes('"get-sum"')`, want: `true`, calls: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mods []func(*execution.Request)
			if tt.mod != nil {
				mods = append(mods, tt.mod)
			}
			r := f.run(t, tt.code, mods...)
			if tt.wantCode != "" {
				if r.OK || r.Error == nil || r.Error.Code != tt.wantCode {
					t.Fatalf("want %s, got ok=%v err=%+v result=%s", tt.wantCode, r.OK, r.Error, r.Result)
				}
			} else {
				if !r.OK {
					t.Fatalf("failed: %+v", r.Error)
				}
				jsonEq(t, r.Result, tt.want)
			}
			if len(r.Calls) != tt.calls {
				t.Fatalf("traced %d calls, want %d: %+v", len(r.Calls), tt.calls, r.Calls)
			}
		})
	}
}

func allowDestructive(r *execution.Request) { r.AllowDestructive = true }

func narrow(p ...string) func(*execution.Request) {
	return func(r *execution.Request) { r.Tools = p }
}

func TestUnresolvedNamesCarrySuggestions(t *testing.T) {
	f := newFixture(t)
	r := f.run(t, "const a = 1\nreturn await mcp.text.word_cuont({text: 'x'})")
	if r.OK || r.Error.Code != fault.ToolNotFound {
		t.Fatalf("got %+v", r.Error)
	}
	if !strings.Contains(r.Error.Message, "line 2") || !strings.Contains(r.Error.Message, "mcp.text.word_count") {
		t.Fatalf("message lacks the line or the suggestion: %q", r.Error.Message)
	}
}

func TestParallelCallsAcrossTwoServers(t *testing.T) {
	f := newFixture(t)
	r := f.run(t, `const t0 = Date.now();
const xs = await Promise.all(Array.from({length: 16}, (_, i) => (i % 2 ? mcp.kv : mcp.text).sleep({ms: 100})));
return {n: xs.length, ms: Date.now() - t0}`)
	if !r.OK {
		t.Fatalf("%+v", r.Error)
	}
	var v struct{ N, MS int }
	_ = json.Unmarshal(r.Result, &v)
	if v.N != 16 {
		t.Fatalf("16 parallel 100 ms calls: %+v", v)
	}
	// Concurrency read from the calls' own records (when each started and
	// how long it took), not from a stopwatch a busy machine slows: one at
	// a time, no two would overlap.
	if most := mostInFlight(r.Calls); most < 8 {
		t.Fatalf("at most %d of 16 calls were in flight at once (%d ms in all)", most, v.MS)
	}
	servers := map[string]int{}
	for _, c := range r.Calls {
		servers[c.Server]++
		if !c.OK || c.Kind != trace.KindMCP || c.DurationMS < 90 {
			t.Errorf("badly traced call %+v", c)
		}
	}
	if servers["kv"] != 8 || servers["text"] != 8 {
		t.Fatalf("calls per server %v", servers)
	}
}

func TestExecutionsAreRecorded(t *testing.T) {
	f := newFixture(t)
	r := f.run(t, `return await mcp.text.word_count({text: "one two"})`)
	if !r.OK {
		t.Fatal(r.Error)
	}
	last := len(f.sink.execs) - 1
	if last < 0 || f.sink.execs[last].ID != r.ExecutionID || f.sink.execs[last].Status != "ok" || f.sink.execs[last].Source != "test" ||
		f.sink.execs[last].Calls != 1 || len(f.sink.calls[last]) != 1 || f.sink.execs[last].CodeHash == "" {
		t.Fatalf("recorded %+v / %+v", f.sink.execs, f.sink.calls)
	}
	bad := f.run(t, ``)
	if bad.OK || bad.Error.Code != fault.InvalidRequest {
		t.Fatalf("empty code: %+v", bad.Error)
	}
}

func TestWarmExecutionsReuseDiscovery(t *testing.T) {
	f := newFixture(t)
	before := f.mcp.Stats()
	for range 5 {
		if r := f.run(t, `return await mcp.text.now({})`); !r.OK {
			t.Fatal(r.Error)
		}
	}
	after := f.mcp.Stats()
	if after.Initializes != before.Initializes || after.ToolLists != before.ToolLists {
		t.Fatalf("warm executions re-discovered: %+v → %+v", before, after)
	}
	if after.Calls-before.Calls != 5 {
		t.Fatalf("calls %d → %d", before.Calls, after.Calls)
	}
}

// TestNoLeaksOverManyMCPExecutions runs executions with remote calls in a
// loop: goroutines and heap stay flat.
func TestNoLeaksOverManyMCPExecutions(t *testing.T) {
	if testing.Short() {
		t.Skip("long loop")
	}
	f := newFixture(t)
	loop := func(n int) {
		for i := range n {
			r := f.run(t, `const [a, b] = await Promise.all([mcp.kv.now({}), mcp.text.word_count({text: "a b"})]); return b.words`)
			if !r.OK {
				t.Fatalf("run %d: %+v", i, r.Error)
			}
		}
	}
	measure := func() (uint64, int) {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse, runtime.NumGoroutine()
	}
	loop(50)
	h0, g0 := measure()
	loop(500)
	time.Sleep(100 * time.Millisecond) // let finished calls' goroutines exit
	h1, g1 := measure()
	t.Logf("heap %d → %d KiB, goroutines %d → %d", h0>>10, h1>>10, g0, g1)
	// A few more kept-alive connections to the servers (two goroutines
	// each, up to the pool's idle limit) are not a leak: how many the
	// loop left depends on how its parallel calls overlapped. A leak of
	// one goroutine a run would show hundreds.
	if g1 > g0+10 {
		t.Errorf("goroutines grew from %d to %d", g0, g1)
	}
	if h1 > h0+16<<20 {
		t.Errorf("heap grew from %d to %d KiB", h0>>10, h1>>10)
	}
}

// local is the policy of local use (pml run, pml serve on loopback): the
// caller is the person at the keyboard and decides.
var local = approval.Policy{CallerDecides: true}

// mostInFlight is the largest number of calls whose recorded spans
// overlap at one moment.
func mostInFlight(calls []trace.Call) int {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, c := range calls {
		end := c.StartedAt.Add(time.Duration(c.DurationMS * float64(time.Millisecond)))
		edges = append(edges, edge{c.StartedAt, 1}, edge{end, -1})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta // an end before a start at the same moment
	})
	most, now := 0, 0
	for _, e := range edges {
		now += e.delta
		most = max(most, now)
	}
	return most
}
