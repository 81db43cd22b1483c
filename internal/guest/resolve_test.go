package guest_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
)

// resolvingHost is the demo host plus tools it resolves on demand: every
// tool of server "extra" whose name starts with "t", and "demo:lazy".
type resolvingHost struct {
	guest.DemoHost
	mu    sync.Mutex
	asked []string
}

func (h *resolvingHost) Resolve(_ context.Context, server, tool string) (guest.Tool, bool) {
	h.mu.Lock()
	h.asked = append(h.asked, server+":"+tool)
	h.mu.Unlock()
	switch {
	case server == "extra" && tool == "":
		return guest.Tool{}, true
	case server == "extra" && strings.HasPrefix(tool, "t"), server == "demo" && tool == "lazy":
		return guest.Tool{Server: "wrong", Name: "names are the ones asked"}, true
	}
	return guest.Tool{}, false
}

func (h *resolvingHost) CallImmediate(c guest.Call) (json.RawMessage, bool, error) {
	if c.Server == "extra" || c.Tool == "lazy" {
		r, err := h.CallTool(context.Background(), c)
		return r, true, err
	}
	return h.DemoHost.CallImmediate(c)
}

func (h *resolvingHost) CallTool(ctx context.Context, c guest.Call) (json.RawMessage, error) {
	if c.Server == "extra" || c.Tool == "lazy" {
		return json.Marshal(c.Server + ":" + c.Tool)
	}
	return h.DemoHost.CallTool(ctx, c)
}

// TestResolveAsReached: a host that resolves names gets asked for those
// the run's list lacks as the script reaches them, once per name; what it
// resolves is callable and stable, what it does not still throws
// TOOL_NOT_FOUND at once.
func TestResolveAsReached(t *testing.T) {
	tests := []struct {
		name, code, want string
		asked            []string
		code2            fault.Code
	}{
		{name: "a server and a tool", code: `const s = "ex" + "tra"; return await mcp[s]["t" + "wice"]({})`, want: `"extra:twice"`,
			asked: []string{"extra:", "extra:twice"}},
		{name: "asked once per name", code: `const s = "extra"; const a = mcp[s], b = mcp[s]; const f = a.tone;
			return [a === b, f === b.tone, await f({}), await mcp[s].tone({})]`, want: `[true,true,"extra:tone","extra:tone"]`,
			asked: []string{"extra:", "extra:tone"}},
		{name: "a new tool of a listed server", code: `const k = "la" + "zy"; return await mcp.demo[k]({})`, want: `"demo:lazy"`,
			asked: []string{"demo:lazy"}},
		{name: "listed tools are never asked", code: `const k = "ec" + "ho"; return await mcp.demo[k]({x: 1})`, want: `{"x":1}`},
		{name: "unknown tool throws at once", code: `const k = "nope"; try { mcp.extra[k] } catch (e) { return [e.code, e.tool] }`,
			want: `["TOOL_NOT_FOUND","extra:nope"]`, asked: []string{"extra:", "extra:nope"}},
		{name: "unknown server throws at once", code: `try { mcp["ghost"] } catch (e) { return e.code }`, want: `"TOOL_NOT_FOUND"`,
			asked: []string{"ghost:"}},
		{name: "symbols and quiet names are never asked", code: `const m = mcp.extra; return [typeof m.then, typeof m[Symbol.iterator], JSON.stringify(m)]`,
			want: `["undefined","undefined","{}"]`, asked: []string{"extra:"}},
		{name: "a huge name is never asked", code: `try { mcp.extra["t".repeat(5000)] } catch (e) { return e.code }`, want: `"TOOL_NOT_FOUND"`,
			asked: []string{"extra:"}},
		{name: "uncaught miss fails the run", code: `return await mcp.extra["zzz"]({})`, code2: fault.ToolNotFound,
			asked: []string{"extra:", "extra:zzz"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &resolvingHost{}
			r := run(t, tt.code, func(r *guest.Request) { r.Host = h })
			if tt.code2 != "" {
				if r.OK || r.Err.Code != tt.code2 {
					t.Fatalf("got %s %+v; want %s", r.Value, r.Err, tt.code2)
				}
			} else {
				mustOK(t, r)
				jsonEq(t, r.Value, tt.want)
			}
			if strings.Join(h.asked, ",") != strings.Join(tt.asked, ",") {
				t.Fatalf("asked %q; want %q", h.asked, tt.asked)
			}
		})
	}
}

// TestResolvedCallsAreRecorded: a resolved tool's calls carry its names,
// and the table the caller passed is not written to.
func TestResolvedCallsAreRecorded(t *testing.T) {
	tools := guest.DemoTools()
	tools = tools[:len(tools):len(tools)]
	h := &resolvingHost{}
	r := run(t, `return await mcp["extra"].two({})`, func(r *guest.Request) { r.Host, r.Tools = h, tools[:len(tools)-1] })
	mustOK(t, r)
	if len(r.Calls) != 1 || r.Calls[0].Server != "extra" || r.Calls[0].Tool != "two" || !r.Calls[0].OK {
		t.Fatalf("calls %+v", r.Calls)
	}
	if last := tools[len(tools)-1]; last.Server == "extra" {
		t.Fatal("the caller's tool table was written to")
	}
}

// TestResolvedToolsAreSuspended: the table a suspension keeps holds the
// tools resolved during the run, so a resumed run can call them by index.
func TestResolvedToolsAreSuspended(t *testing.T) {
	h := &resolvingHost{}
	r := run(t, `return await mcp["extra"].tpark({})`, func(r *guest.Request) {
		r.Host = h
		r.Park = guest.ParkAll(func(c guest.Call) bool { return c.Server == "extra" })
	})
	if r.Suspended == nil {
		t.Fatalf("not suspended: %+v", r.Err)
	}
	tools := r.Suspended.Tools
	if last := tools[len(tools)-1]; last.FullName() != "extra:tpark" {
		t.Fatalf("suspended table ends with %+v", last)
	}
	res := engine.Resume(context.Background(), r.Suspended, guest.Request{Host: h}, map[int]guest.Decision{1: {Approve: true}})
	mustOK(t, res)
	jsonEq(t, res.Value, `"extra:tpark"`)
}
