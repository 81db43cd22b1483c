package script

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/guest"
)

// siteHost answers every call with {} and records where each was made.
type siteHost struct {
	mu    sync.Mutex
	sites []string // "server:tool@line:column", in call order
}

func (h *siteHost) CallTool(_ context.Context, c guest.Call) (json.RawMessage, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sites = append(h.sites, fmt.Sprintf("%s:%s@%d:%d", c.Server, c.Tool, c.Line, c.Column))
	return json.RawMessage(`{"items":[1,2]}`), nil
}

// TestCallSitesAgreeWithEngine holds the analysis's call sites to the
// engine's: every call a script makes of a tool it names statically is
// reported by the guest at the key the analysis gave that call, in loops,
// callbacks, across lines, after comments and wide characters, through
// brackets and optional calls, in TypeScript and after a session's
// Persist; a call the analysis cannot see (a computed name, .call) still
// has a site of its own, and one from eval'd code has none.
func TestCallSitesAgreeWithEngine(t *testing.T) {
	tools := []guest.Tool{{Server: "kv", Name: "del"}, {Server: "kv", Name: "get"}, {Server: "kv", Name: "odd-name"}}
	cases := []struct {
		name, code, lang string
		session          bool
		// sites the analysis lists, by tool, in code order: [tool, inLoop]
		listed []string
		// extra are calls the engine reports that the analysis cannot
		// list, by their "server:tool@line:column"; "@0:0" for none.
		extra []string
	}{
		{name: "first line", code: `return await mcp.kv.del({k: 1})`, listed: []string{"del"}},
		{name: "loop", code: "const xs = [1, 2, 3]\nfor (const x of xs) {\n  await mcp.kv.del({k: x})\n}\nawait mcp.kv.get({})",
			listed: []string{"del loop", "get"}},
		{name: "map and Promise.all", code: "const got = await mcp.kv.get({})\nawait Promise.all(got.items.map((x) =>\n  mcp.kv.del( {k: x} )))",
			listed: []string{"get", "del loop"}},
		{name: "while, comments, wide characters", code: "let i = 0 /* é */; const s = \"日本\"\nwhile (i++ < 2) await mcp.kv.del /* c */ // d\n  ({k: s})",
			listed: []string{"del loop"}},
		{name: "brackets and optional", code: "await mcp[\"kv\"][\"odd-name\"]({})\nawait mcp?.kv?.get?.({})\nawait globalThis.mcp.kv[`del`]({})",
			listed: []string{"odd-name", "get", "del"}},
		{name: "helper function", code: "async function del(k) { return mcp.kv.del({k}) }\nfor (let i = 0; i < 2; i++) await del(i)",
			listed: []string{"del"}},
		{name: "computed and call", code: "const t = \"del\"\nawait mcp.kv[t]({})\nawait mcp.kv.get.call(null, {})",
			extra: []string{"kv:del@2:16", "kv:get@3:22"}},
		{name: "eval", code: "await eval(\"mcp.kv.del({})\")", extra: []string{"kv:del@0:0"}},
		{name: "typescript", lang: LangTS, code: "type K = {k: number}\nconst a: K = {k: 1}\nawait mcp.kv.del(a as K)\nfor (const x of [1]) await mcp.kv.get({} as unknown as object)",
			listed: []string{"del", "get loop"}},
		{name: "session persist", session: true, code: "const a = 1\nawait mcp.kv.del({a}); let b = 2\nawait mcp.kv.get({b})",
			listed: []string{"del", "get"}},
	}
	eng := testEngine(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := Prepare(c.code, c.lang)
			if err != nil || !p.Checked {
				t.Fatalf("prepare: %v (checked %v)", err, p != nil && p.Checked)
			}
			if c.session {
				if p.Persist() == nil {
					t.Fatal("nothing persisted: the case tests nothing")
				}
			}
			sites := p.CallSites()
			var listed []string
			want := map[string]bool{}
			for _, s := range sites {
				l := s.Tool
				if s.InLoop {
					l += " loop"
				}
				listed = append(listed, l)
				want[s.FullName()+"@"+s.Key] = true
			}
			if !slices.Equal(listed, c.listed) {
				t.Fatalf("listed %q, want %q", listed, c.listed)
			}
			h := &siteHost{}
			res := eng.Run(context.Background(), guest.Request{Code: p.Code, Tools: tools, Host: h, Session: c.session, ArgsDeclared: p.Top.ArgsDeclared,
				Limits: guest.Limits{Timeout: 30 * time.Second}})
			if res.Err != nil {
				t.Fatalf("run: %v", res.Err)
			}
			var extra []string
			for _, got := range h.sites {
				if !want[got] {
					extra = append(extra, got)
				}
			}
			if !slices.Equal(extra, c.extra) {
				t.Fatalf("the engine reported calls at %q; the analysis listed %v; unlisted %q, want %q", h.sites, want, extra, c.extra)
			}
		})
	}
}

// TestCallSiteOfEarlierExecution: in a session, a function an earlier
// execution defined is not a place in the script that runs now, though
// both are main.js: its calls have no site (a grant on a site of this
// script must not cover them).
func TestCallSiteOfEarlierExecution(t *testing.T) {
	eng := testEngine(t)
	tools := []guest.Tool{{Server: "kv", Name: "del"}}
	first, err := Prepare("async function del() { return mcp.kv.del({}) }", LangJS)
	if err != nil {
		t.Fatal(err)
	}
	first.Persist()
	h := &siteHost{}
	r1 := eng.Run(context.Background(), guest.Request{Code: first.Code, Tools: tools, Host: h, Session: true, Limits: guest.Limits{Timeout: 30 * time.Second}})
	if r1.Err != nil || r1.State == nil {
		t.Fatalf("first: %v", r1.Err)
	}
	second, err := Prepare("await del()\nawait mcp.kv.del({})", LangJS)
	if err != nil {
		t.Fatal(err)
	}
	second.Persist()
	r2 := eng.Run(context.Background(), guest.Request{Code: second.Code, Tools: tools, Host: h, Session: true, From: r1.State, Limits: guest.Limits{Timeout: 30 * time.Second}})
	if r2.Err != nil {
		t.Fatalf("second: %v", r2.Err)
	}
	sites := second.CallSites()
	if len(sites) != 1 || !slices.Equal(h.sites, []string{"kv:del@0:0", "kv:del@" + sites[0].Key}) {
		t.Fatalf("sites %q (listed %+v)", h.sites, sites)
	}
}
