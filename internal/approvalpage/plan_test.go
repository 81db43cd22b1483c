package approvalpage_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
)

// loop deletes five keys in a loop (calls 6–10, line 3), then one more
// from a second line (call 11).
const loop = `const keys = ["l0", "l1", "l2", "l3", "l4"]
for (const key of keys) await mcp.demo.kv_set({key, value: 1})
for (const key of keys) await mcp.demo.kv_delete({key, note: "cleanup"})
await mcp.demo.kv_delete({key: "l0"}).catch((e) => e.code)
return "done"`

// TestPlanOnThePage: the page shows the script's plan — both call sites,
// the loop, the calls so far, the call that waits — and a grant form per
// call; a grant over the loop's site runs it on one decision, and the
// second site still asks; a forged count is refused and nothing runs; the
// asker itself is offered no grant, only to reject everything.
func TestPlanOnThePage(t *testing.T) {
	e := newEnv(t, nil)
	id := e.suspend(loop)
	b := e.browser()
	e.signInLocal(b)
	_, page := b.get(e.srv.URL + "/approvals/" + id)
	for _, want := range []string{`id="plan-sites"`, `<code>demo.kv_delete</code></td>`, `<td>3</td>`, `<td>4</td>`,
		`<td class="loop">yes</td>`, `<td class="calls">1</td>`, `<td class="waiting">#6</td>`,
		`id="grant-form-6"`, `name="count" min="1" max="100"`, `value="note"`, `id="approve-all"`, `id="reject-all"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if t.Failed() {
		t.Fatalf("page:\n%s", page)
	}
	f := form(t, page, "6", "approve", "")
	f.Set("scope", "site")
	f.Set("count", "1000")
	if status, body := b.post(e.srv.URL+"/approvals/"+id, f); status != 400 || !strings.Contains(body, "from 1 to 100") {
		t.Fatalf("a forged count: %d %s", status, body)
	}
	f.Set("count", "5")
	f["pin"] = []string{"note"}
	status, done := b.post(e.srv.URL+"/approvals/"+id, f)
	if status != 200 || !strings.Contains(done, "You approved call #6 and its call site for up to 5 calls") || !strings.Contains(done, "5 of its calls") ||
		!strings.Contains(done, "#11 demo.kv_delete") {
		t.Fatalf("grant: %d %s", status, done)
	}
	_, page = b.get(e.srv.URL + "/approvals/" + id)
	for _, want := range []string{`<td class="calls">5</td>`, `<td class="waiting">#11</td>`, `id="grant-g1"`, `<td class="used">5 of 5</td>`,
		`<code>note = &#34;cleanup&#34;</code>`} {
		if !strings.Contains(page, want) {
			t.Errorf("after the grant, the page lacks %q", want)
		}
	}
	_, calls, err := e.sink.GetExecution(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	granted := 0
	for _, c := range calls {
		if c.Approval != nil && c.Approval.Grant == "g1" && c.Approval.Via == "page" {
			granted++
		}
	}
	if granted != 5 {
		t.Fatalf("%d calls traced under the grant, want 5: %+v", granted, calls)
	}
	f = form(t, page, "11", "reject", "not this one")
	f.Set("scope", "all")
	if status, done = b.post(e.srv.URL+"/approvals/"+id, f); status != 200 || !strings.Contains(done, "You rejected every call") || !strings.Contains(done, "succeeded") {
		t.Fatalf("reject all: %d %s", status, done)
	}
}

// TestPlanForTheAsker: signed in as the agent whose execution waits, the
// person may reject everything but is offered no grant nor approval.
func TestPlanForTheAsker(t *testing.T) {
	e := newEnv(t, nil)
	id := e.suspend(loop)
	b := e.browser()
	if status, _ := e.signInAs(b, "agent-7", "pw-agent"); status != 200 {
		t.Fatalf("sign-in: %d", status)
	}
	_, page := b.get(e.srv.URL + "/approvals/" + id)
	if !strings.Contains(page, `id="plan-sites"`) || strings.Contains(page, `grant-form`) || strings.Contains(page, `id="approve-all"`) ||
		!strings.Contains(page, `id="reject-all"`) {
		t.Fatalf("the asker's page:\n%s", page)
	}
	f := form(t, page, "6", "approve", "")
	f.Set("scope", "site")
	f.Set("count", "5")
	if status, body := b.post(e.srv.URL+"/approvals/"+id, f); status != 403 {
		t.Fatalf("the asker granting: %d %s", status, body)
	}
	f = url.Values{"csrf": f["csrf"], "version": f["version"], "scope": {"all"}, "decision": {"approve"}}
	if status, body := b.post(e.srv.URL+"/approvals/"+id, f); status != 403 {
		t.Fatalf("the asker approving everything: %d %s", status, body)
	}
}
