package executor_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/testutil/syncbuf"
	"github.com/pml-sandbox/pml/internal/toolsource"
	mcpkind "github.com/pml-sandbox/pml/internal/toolsource/mcp"
	"github.com/pml-sandbox/pml/internal/trace"
)

// countingInvoker stands in for the capability runner and only counts: a
// capability that shadows a server must never be reached at all.
type countingInvoker struct{ calls atomic.Int64 }

func (c *countingInvoker) Invoke(context.Context, execution.Invocation) (*execution.Response, error) {
	c.calls.Add(1)
	return &execution.Response{OK: true, Result: json.RawMessage(`"the capability answered"`)}, nil
}

// shadowFixture is a service over one MCP server "kv" and a capability
// registry in which kv:kv_get (the server's tool's name) and math:double
// were saved before the service started.
type shadowFixture struct {
	svc  *executor.Service
	pool *toolsource.Set
	inv  *countingInvoker
	logs *syncbuf.Buffer
}

func newShadowFixture(t *testing.T, kvURL string) *shadowFixture {
	t.Helper()
	ctx := context.Background()
	reg := capability.NewFileRegistry(filepath.Join(t.TempDir(), "capabilities.json"))
	for _, name := range []string{"kv:kv_get", "math:double"} {
		if _, err := reg.Save(ctx, capability.Capability{Name: name, Code: "return 1"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	pool, err := (&mcpkind.Kind{ConnectTimeout: 10 * time.Second}).NewSet(ctx, toolsource.Env{Logger: slog.New(slog.DiscardHandler), Retry: toolsource.Retry{Initial: 20 * time.Millisecond, Max: 50 * time.Millisecond, Attempts: 3}}, mcpkind.Config{Config: toolsource.Config{Name: "kv"}, URL: kvURL, Transport: mcpkind.TransportSSE})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pool.Close() })
	f := &shadowFixture{pool: pool, inv: &countingInvoker{}, logs: &syncbuf.Buffer{}}
	log := slog.New(slog.NewJSONHandler(f.logs, nil))
	f.svc = executor.New(engine, executor.Options{
		Sources: []execution.ToolSource{pool, capability.NewSource(reg, f.inv, 0, log)},
		Logger:  log,
	})
	return f
}

func (f *shadowFixture) run(code string) *execution.Response {
	return f.svc.Execute(context.Background(), execution.Request{Code: code, TimeoutMS: 10000, Source: "test"})
}

// wantUnavailable checks that resp failed with a retryable UNAVAILABLE.
func wantUnavailable(t *testing.T, what string, resp *execution.Response) {
	t.Helper()
	if resp.OK || resp.Error == nil || resp.Error.Code != fault.Unavailable || !resp.Error.Retryable {
		t.Errorf("%s: ok=%v result=%s error %+v; want a retryable UNAVAILABLE", what, resp.OK, resp.Result, resp.Error)
		return
	}
	t.Logf("%s: %s", what, resp.Error)
}

func (f *shadowFixture) checkNoShadow(t *testing.T) {
	t.Helper()
	if n := f.inv.calls.Load(); n != 0 {
		t.Errorf("the capability kv:kv_get received %d call(s) meant for server kv", n)
	}
	for _, tl := range f.svc.Catalog(context.Background()) {
		if tl.Server == "kv" && tl.Kind == trace.KindCapability {
			t.Errorf("capability %s is in the catalog under a configured server's name", tl.FullName())
		}
	}
	if !hasTool(f.svc.Catalog(context.Background()), "math:double") {
		t.Error("a capability in its own namespace was dropped too")
	}
	if logs := f.logs.String(); !strings.Contains(logs, "kv:kv_get") || !strings.Contains(logs, "configured MCP server") {
		t.Errorf("dropping kv:kv_get was not logged with its reason:\n%s", logs)
	} else if n := strings.Count(logs, `"tool":"kv:kv_get"`); n != 1 {
		// Every execution builds the catalog again; the drop is news once.
		t.Errorf("dropping kv:kv_get was logged %d times, want once:\n%s", n, logs)
	}
}

func hasTool(tools []catalog.Tool, full string) bool {
	for _, tl := range tools {
		if tl.FullName() == full {
			return true
		}
	}
	return false
}

// closedPort is a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// TestServerNeverReachedIsUnavailable: a configured server that was never
// reached makes every mcp.kv.* fail with a retryable UNAVAILABLE, in the
// static check and at run time, and a capability saved earlier under its
// name neither takes over nor shows in the catalog.
func TestServerNeverReachedIsUnavailable(t *testing.T) {
	f := newShadowFixture(t, "http://"+closedPort(t)+"/sse")
	wantUnavailable(t, "a tool of the never-reached server", f.run(`return await mcp.kv.kv_get({key: "a"})`))
	wantUnavailable(t, "any name on the never-reached server", f.run(`return await mcp.kv.whatever({})`))
	resp := f.run(`try { await mcp.kv.kv_get({key: "a"}); return "no error" } catch (e) { return [e.code, e.retryable] }`)
	wantUnavailable(t, "a caught call", resp)
	f.checkNoShadow(t)

	// A request that narrowed the server away does not have its tools.
	resp = f.svc.Execute(context.Background(), execution.Request{Code: `return await mcp.kv.kv_get({key: "a"})`, Tools: []string{"math:*"}, TimeoutMS: 10000})
	if resp.Error == nil || resp.Error.Code != fault.ToolNotFound {
		t.Errorf("a server narrowed away: %+v; want TOOL_NOT_FOUND", resp.Error)
	}
	// Names on no server at all are still missing, not unavailable.
	if resp := f.run(`return await mcp.nope.x({})`); resp.Error == nil || resp.Error.Code != fault.ToolNotFound {
		t.Errorf("unknown server: %+v; want TOOL_NOT_FOUND", resp.Error)
	}
}

// TestServerStoppedMidTestIsUnavailable: a server that was up and then
// stops keeps its tools; calls get a retryable UNAVAILABLE, quickly, and
// the capability saved under the same name is never called.
func TestServerStoppedMidTestIsUnavailable(t *testing.T) {
	ds, err := demoserver.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = ds.Close()
		}
	})
	f := newShadowFixture(t, ds.SSEURL())
	if resp := f.run(`return await mcp.kv.kv_get({key: "a"})`); !resp.OK {
		t.Fatalf("while up: %+v", resp.Error)
	}

	_ = ds.Close()
	stopped = true
	waitDown(t, f.pool, "kv")
	start := time.Now()
	resp := f.run(`try { await mcp.kv.kv_get({key: "a"}); return "no error" } catch (e) { return [e.code, e.retryable] }`)
	if !resp.OK || string(resp.Result) != `["UNAVAILABLE",true]` {
		t.Errorf("caught call on a stopped server: ok=%v result=%s error %+v; want [\"UNAVAILABLE\",true]", resp.OK, resp.Result, resp.Error)
	}
	// Fast: not after a connect attempt (10 s in this fixture).
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("a call to a stopped server took %s; want it to fail fast", took)
	}
	wantUnavailable(t, "uncaught call on a stopped server", f.run(`return await mcp.kv.kv_get({key: "a"})`))
	// A name the server did not list before it went down may exist now.
	wantUnavailable(t, "unknown name on a stopped server", f.run(`return await mcp.kv.added_later({})`))
	if !hasTool(f.svc.Catalog(context.Background()), "kv:kv_set") {
		t.Error("the stopped server's tools left the catalog")
	}
	f.checkNoShadow(t)
}

// waitDown waits until the pool reports server unavailable.
func waitDown(t *testing.T, p *toolsource.Set, server string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, h := range p.Health() {
			if h.Name == server && h.State == toolsource.StateUnavailable {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("server %s never went down: %+v", server, p.Health())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
