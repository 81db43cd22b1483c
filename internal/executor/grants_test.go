package executor_test

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/trace"
)

// loopScript stores p0…p5, deletes them in a loop (calls 7–12, one call
// site; p5's note differs), then deletes "a" from a second site (call 13).
const loopScript = `const keys = []
for (let i = 0; i < 6; i++) { keys.push("p" + i); await mcp.demo.kv_set({key: "p" + i, value: i}) }
const out = []
for (const key of keys) out.push(await mcp.demo.kv_delete({key, note: key === "p5" ? "last" : "routine"}))
out.push(await mcp.demo.kv_delete({key: "a"}))
return out`

// grantRun is an execution of loopScript by the agent, under the
// deployed policy, decided by the operator through fresh services (as
// other processes would).
type grantRun struct {
	t    *testing.T
	d    *durable
	id   string
	sink *memSink
	last *execution.Response
}

func startGrantRun(t *testing.T, code string) *grantRun {
	t.Helper()
	d := newDurable(t)
	svc, sink := d.deployedService(nil)
	r := svc.Execute(context.Background(), execution.Request{Code: code, Approval: execution.ApprovalSuspend, Principal: agent})
	if !r.Suspended() {
		t.Fatalf("want a suspension: %+v %s", r.Error, r.Result)
	}
	return &grantRun{t: t, d: d, id: r.ExecutionID, sink: sink, last: r}
}

// decide resumes with decisions, as principal on channel, in a fresh
// service.
func (g *grantRun) decide(principal string, ch execution.Channel, decisions map[string]execution.Decision) (*execution.Response, *fault.Error) {
	svc, sink := g.d.deployedService(nil)
	r, ferr := svc.Resume(context.Background(), execution.ResumeRequest{ExecutionID: g.id, Principal: principal, Channel: ch, Decisions: decisions})
	if ferr == nil {
		g.last, g.sink = r, sink
	}
	return r, ferr
}

// pending are the call ids the execution waits on.
func pendingIDs(r *execution.Response) []int {
	var out []int
	for _, p := range r.Pending {
		out = append(out, p.CallID)
	}
	return out
}

// approvedUnder lists the calls whose records say they ran approved,
// as "id:grant" ("id:" for a call approved alone).
func approvedUnder(calls []trace.Call, by string) []string {
	var out []string
	for _, c := range calls {
		if c.Approval != nil && c.Approval.By == by {
			out = append(out, strconv.Itoa(c.CallID)+":"+c.Approval.Grant)
		}
	}
	return out
}

func siteGrant(count int, pin ...string) execution.Decision {
	return execution.Decision{Approve: true, Site: &execution.SiteScope{Count: count, Pin: pin}}
}

// TestGrantCoversItsSiteUpToItsCount: an approver grants call 7's site 3
// calls: 7, 8 and 9 run on that one decision (each traced as the
// approver's, under the grant), 10 waits; approved alone, 11 waits — the
// grant is spent — and the second site's call is never covered. The plan
// lists both sites, the loop, the counts and the grant.
func TestGrantCoversItsSiteUpToItsCount(t *testing.T) {
	g := startGrantRun(t, loopScript)
	if p := g.last.Pending; len(p) != 1 || p[0].CallID != 7 || p[0].Line != 4 || p[0].Site == "" {
		t.Fatalf("pending %+v", p)
	}
	plan := g.last.Plan
	if plan == nil || len(plan.Sites) != 2 || !plan.Sites[0].InLoop || plan.Sites[0].Line != 4 || plan.Sites[0].Calls != 1 ||
		plan.Sites[1].InLoop || plan.Sites[1].Line != 5 || plan.Sites[1].Calls != 0 || plan.MaxGrant != execution.DefaultMaxGrant {
		t.Fatalf("plan %+v", plan)
	}
	site := g.last.Pending[0].Site
	r, ferr := g.decide(operator, execution.ChannelCaller, map[string]execution.Decision{"7": siteGrant(3)})
	if ferr != nil {
		t.Fatal(ferr)
	}
	if ids := pendingIDs(r); !slices.Equal(ids, []int{10}) || r.Pending[0].Site != site {
		t.Fatalf("after the grant, pending %v (%+v)", ids, r.Pending)
	}
	if got := approvedUnder(r.Calls, operator); !slices.Equal(got, []string{"7:g1", "8:g1", "9:g1"}) {
		t.Fatalf("approved calls %q", got)
	}
	if gr := r.Plan.Grants; len(gr) != 1 || gr[0].Used != 3 || gr[0].Max != 3 || gr[0].By != operator || gr[0].Site != site || r.Plan.Sites[0].Calls != 4 {
		t.Fatalf("plan after the grant %+v", r.Plan)
	}
	ev := g.sink.execs[len(g.sink.execs)-1].Events
	if resume := ev[len(ev)-2]; resume.Type != trace.EventResume || len(resume.Grants) != 1 || resume.Grants[0].Max != 3 ||
		resume.Grants[0].Tool != "demo:kv_delete" || resume.Principal != operator {
		t.Fatalf("the grant's trace event %+v", resume)
	}
	r, ferr = g.decide(operator, execution.ChannelCaller, map[string]execution.Decision{"10": {Approve: true}})
	if ferr != nil || !slices.Equal(pendingIDs(r), []int{11}) {
		t.Fatalf("after approving 10 alone: %+v %v", ferr, pendingIDs(r))
	}
	if got := approvedUnder(r.Calls, operator); !slices.Equal(got, []string{"7:g1", "8:g1", "9:g1", "10:"}) {
		t.Fatalf("approved calls %q", got)
	}
	// A grant over the rest of the loop leaves the second site asking.
	r, ferr = g.decide(operator, execution.ChannelCaller, map[string]execution.Decision{"11": siteGrant(10)})
	if ferr != nil || !slices.Equal(pendingIDs(r), []int{13}) || r.Pending[0].Line != 5 {
		t.Fatalf("the second site: %+v %+v", ferr, r.Pending)
	}
	r, ferr = g.decide(operator, execution.ChannelCaller, map[string]execution.Decision{"13": {Approve: true}})
	if ferr != nil || !r.OK || !strings.Contains(string(r.Result), "deleted a") {
		t.Fatalf("the end: %+v %+v %s", ferr, r.Error, r.Result)
	}
	if got := approvedUnder(r.Calls, operator); !slices.Equal(got, []string{"7:g1", "8:g1", "9:g1", "10:", "11:g2", "12:g2", "13:"}) {
		t.Fatalf("approved calls %q", got)
	}
}

// TestGrantPinnedArguments: a grant that pins "note" covers the calls
// whose note is the one it was made on; p5's differs, and it waits.
func TestGrantPinnedArguments(t *testing.T) {
	g := startGrantRun(t, loopScript)
	r, ferr := g.decide(operator, execution.ChannelCaller, map[string]execution.Decision{"7": siteGrant(100, "note")})
	if ferr != nil {
		t.Fatal(ferr)
	}
	if !slices.Equal(pendingIDs(r), []int{12}) || !strings.Contains(string(r.Pending[0].Args), `"last"`) {
		t.Fatalf("pending %+v", r.Pending)
	}
	if p := r.Plan.Grants[0].Pinned; len(p) != 1 || p[0].Key != "note" || p[0].Value != `"routine"` {
		t.Fatalf("pinned %+v", p)
	}
	if got := approvedUnder(r.Calls, operator); len(got) != 5 {
		t.Fatalf("approved calls %q", got)
	}
}

// TestGrantCoversCallsWaitingAtItsSite: five calls of one site wait at
// once (Promise.all); a grant of 3 on one of them approves it and the two
// oldest others, and the rest keep waiting.
func TestGrantCoversCallsWaitingAtItsSite(t *testing.T) {
	g := startGrantRun(t, `await Promise.all(["q0", "q1", "q2", "q3", "q4"].map((k) => mcp.demo.kv_set({key: k, value: 1})))
return await Promise.all(["q0", "q1", "q2", "q3", "q4"].map((key) => mcp.demo.kv_delete({key})))`)
	if ids := pendingIDs(g.last); !slices.Equal(ids, []int{6, 7, 8, 9, 10}) || !g.last.Plan.Sites[0].InLoop {
		t.Fatalf("pending %v, plan %+v", ids, g.last.Plan)
	}
	r, ferr := g.decide(operator, execution.ChannelCaller, map[string]execution.Decision{"8": siteGrant(3)})
	if ferr != nil || !slices.Equal(pendingIDs(r), []int{9, 10}) {
		t.Fatalf("%+v pending %v", ferr, pendingIDs(r))
	}
	if got := approvedUnder(r.Calls, operator); !slices.Equal(got, []string{"6:g1", "7:g1", "8:g1"}) {
		t.Fatalf("approved calls %q", got)
	}
}

// TestApproveOrRejectEverythingPending: "*" decides every pending call
// the decisions do not name; the agent may reject them all, never approve.
func TestApproveOrRejectEverythingPending(t *testing.T) {
	const code = `const s = (p) => p.then((v) => v, (e) => e.code)
return await Promise.all([s(mcp.demo.kv_delete({key: "a"})), s(mcp.demo.kv_delete({key: "b"})), s(mcp.demo.kv_delete({key: "k"}))])`
	g := startGrantRun(t, code)
	if _, ferr := g.decide(agent, execution.ChannelCaller, map[string]execution.Decision{"*": {Approve: true}}); ferr == nil || ferr.Code != fault.Forbidden {
		t.Fatalf("the agent approving everything: %+v", ferr)
	}
	r, ferr := g.decide(operator, execution.ChannelCaller, map[string]execution.Decision{"*": {Approve: true}, "2": {Reason: "not b"}})
	if ferr != nil || !r.OK {
		t.Fatalf("%+v %+v", ferr, r)
	}
	jsonEq(t, r.Result, `["deleted a", "REJECTED", "deleted k"]`)
	if got := approvedUnder(r.Calls, operator); !slices.Equal(got, []string{"1:", "3:"}) {
		t.Fatalf("approved calls %q", got)
	}

	g = startGrantRun(t, code)
	r, ferr = g.decide(agent, execution.ChannelCaller, map[string]execution.Decision{"*": {Reason: "no"}})
	if ferr != nil || !r.OK {
		t.Fatalf("the agent rejecting everything: %+v %+v", ferr, r)
	}
	jsonEq(t, r.Result, `["REJECTED", "REJECTED", "REJECTED"]`)
}

// TestGrantRefusals: nothing runs on a grant that cannot be made — past
// the deployment's bound, pinning a key the call lacks, over a call with
// no site, two over one site — nor on one the decider may not make: the
// execution still waits, at the same version.
func TestGrantRefusals(t *testing.T) {
	g := startGrantRun(t, loopScript)
	version := g.last.StateVersion
	for _, c := range []struct {
		name      string
		principal string
		decisions map[string]execution.Decision
		code      fault.Code
		says      string
	}{
		{"over the bound", operator, map[string]execution.Decision{"7": siteGrant(execution.DefaultMaxGrant + 1)}, fault.InvalidRequest, "from 1 to 100"},
		{"a forged count", operator, map[string]execution.Decision{"7": siteGrant(0)}, fault.InvalidRequest, "from 1 to 100"},
		{"a key the call lacks", operator, map[string]execution.Decision{"7": siteGrant(5, "table")}, fault.InvalidRequest, `pins argument "table"`},
		{"the agent granting", agent, map[string]execution.Decision{"7": siteGrant(5)}, fault.Forbidden, "not the caller's"},
		{"the agent's client, untrusted", agent, map[string]execution.Decision{"7": siteGrant(5)}, fault.Forbidden, ""},
	} {
		ch := execution.ChannelCaller
		if strings.Contains(c.name, "client") {
			ch = execution.ChannelClient
		}
		if _, ferr := g.decide(c.principal, ch, c.decisions); ferr == nil || ferr.Code != c.code || !strings.Contains(ferr.Message, c.says) {
			t.Errorf("%s: %+v, want %s saying %q", c.name, ferr, c.code, c.says)
		}
	}
	svc, _ := g.d.deployedService(nil)
	if w, ferr := svc.Waiting(context.Background(), g.id); ferr != nil || w.StateVersion != version || len(w.Plan.Grants) != 0 {
		t.Fatalf("after the refusals: %+v %+v", ferr, w)
	}

	// A call from eval'd code has no site: it is approved alone.
	g = startGrantRun(t, `return await eval("mcp.demo.kv_delete({key: 'a'})")`)
	if p := g.last.Pending[0]; p.Site != "" {
		t.Fatalf("a site for eval'd code: %+v", p)
	}
	if _, ferr := g.decide(operator, execution.ChannelCaller, map[string]execution.Decision{"1": siteGrant(5)}); ferr == nil || !strings.Contains(ferr.Message, "no call site") {
		t.Fatalf("a grant over no site: %+v", ferr)
	}
	// The JSON form of an oversized or forged grant is refused as it is read.
	var d execution.Decision
	for _, raw := range []string{`{"decision": "approve", "scope": "site", "count": 0}`, `{"decision": "reject", "scope": "site", "count": 2}`,
		`{"decision": "approve", "scope": "site"}`, `{"decision": "approve", "scope": "everything", "count": 2}`, `{"decision": "approve", "count": 2}`} {
		if err := json.Unmarshal([]byte(raw), &d); err == nil {
			t.Errorf("%s read as %+v", raw, d)
		}
	}
}

// TestGrantEndsWithItsExecution: the same script run again asks again,
// though a grant covered its site in the run before.
func TestGrantEndsWithItsExecution(t *testing.T) {
	g := startGrantRun(t, loopScript)
	if _, ferr := g.decide(operator, execution.ChannelCaller, map[string]execution.Decision{"7": siteGrant(100)}); ferr != nil {
		t.Fatal(ferr)
	}
	if r, ferr := g.decide(operator, execution.ChannelCaller, map[string]execution.Decision{"13": {Approve: true}}); ferr != nil || !r.OK {
		t.Fatalf("%+v %+v", ferr, r)
	}
	svc, _ := g.d.deployedService(nil)
	again := svc.Execute(context.Background(), execution.Request{Code: loopScript, Approval: execution.ApprovalSuspend, Principal: agent})
	if !again.Suspended() || !slices.Equal(pendingIDs(again), []int{7}) || len(again.Plan.Grants) != 0 {
		t.Fatalf("the script again: %+v pending %v", again.Error, pendingIDs(again))
	}
}

// TestRefusedAtOnceNotParked: a call that needs a person but could never
// run — its arguments do not match the tool's schema — fails at once
// with INVALID_ARGUMENTS: no one is asked about it.
func TestRefusedAtOnceNotParked(t *testing.T) {
	d := newDurable(t)
	svc, _ := d.deployedService(nil)
	r := svc.Execute(context.Background(), execution.Request{Code: `try { await mcp.demo.kv_delete({kee: "a"}) } catch (e) { return e.code }`,
		Approval: execution.ApprovalSuspend, Principal: agent})
	if r.Suspended() || !r.OK || string(r.Result) != `"INVALID_ARGUMENTS"` {
		t.Fatalf("%+v %s", r.Error, r.Result)
	}
	// Without approval "suspend" too, the refusal is the one that tells.
	r = svc.Execute(context.Background(), execution.Request{Code: `await mcp.demo.kv_delete({key: 1})`, Principal: agent})
	if r.Error == nil || r.Error.Code != fault.InvalidArguments {
		t.Fatalf("%+v", r.Error)
	}
}

// TestComputedNameHasASite: a tool reached by a computed name has a site
// of its own, learned from its first call (the plan marks it computed),
// and a grant over it covers that site's calls only.
func TestComputedNameHasASite(t *testing.T) {
	g := startGrantRun(t, `const t = ["kv", "delete"].join("_")
for (const key of ["a", "b"]) await mcp.demo[t]({key})
return await mcp.demo.kv_delete({key: "k"})`)
	site := g.last.Plan.Sites
	if len(site) != 2 || site[0].Line != 3 || site[0].Computed || !site[1].Computed || site[1].Line != 2 || site[1].Calls != 1 {
		t.Fatalf("plan %+v", site)
	}
	r, ferr := g.decide(operator, execution.ChannelCaller, map[string]execution.Decision{"1": siteGrant(5)})
	if ferr != nil || !slices.Equal(pendingIDs(r), []int{3}) || r.Pending[0].Line != 3 {
		t.Fatalf("%+v %+v", ferr, r.Pending)
	}
}
