package approvalpage_test

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/compensate"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/trace"
)

// orders is a server of this package's tests, "shop": create makes an
// order, cancel (destructive) undoes one, each declared as the other's
// undo as a deployment would.
type orders struct {
	mu   sync.Mutex
	n    int
	sent []string
	open map[string]bool
}

func (o *orders) Tools(context.Context) ([]catalog.Tool, error) {
	yes, no := true, false
	undo, err := compensate.Compile("cancel", json.RawMessage(`{"id":"$.result.id"}`))
	if err != nil {
		return nil, err
	}
	return []catalog.Tool{
		{Server: "shop", Name: "create", Kind: trace.KindMCP, Annotations: catalog.Annotations{ReadOnly: &no, Destructive: &no}, Compensate: undo},
		{Server: "shop", Name: "cancel", Kind: trace.KindMCP, Annotations: catalog.Annotations{ReadOnly: &no, Destructive: &yes}},
	}, nil
}

func (o *orders) Call(_ context.Context, t catalog.Tool, args json.RawMessage, opt execution.CallOptions) (json.RawMessage, error) {
	if t.NeedsApproval() && !opt.AllowDestructive {
		opt.Refused()
		return nil, fault.New(fault.Forbidden, "needs approval")
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.open == nil {
		o.open = map[string]bool{}
	}
	var a struct{ ID string }
	_ = json.Unmarshal(args, &a)
	o.sent = append(o.sent, t.Name+" "+a.ID)
	if t.Name == "create" {
		o.n++
		id := fmt.Sprintf("o-%d", o.n)
		o.open[id] = true
		return json.RawMessage(`{"id":"` + id + `"}`), nil
	}
	delete(o.open, a.ID)
	return json.RawMessage(`{}`), nil
}

func (o *orders) calls() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.sent)
}

// twoOrdersThenWait creates two orders, then waits on a destructive call.
const twoOrdersThenWait = `await mcp.shop.create({}); await mcp.shop.create({});
return await mcp.demo.kv_delete({key: "a"})`

var planRE = regexp.MustCompile(`name="plan" value="([^"]+)"`)

// rollbackForm is what the page's rollback form posts.
func rollbackForm(t *testing.T, page string) url.Values {
	t.Helper()
	c, p := csrfRE.FindStringSubmatch(page), planRE.FindStringSubmatch(page)
	if c == nil || p == nil || !strings.Contains(page, `name="decision" value="rollback"`) {
		t.Fatalf("no rollback form on the page:\n%s", page)
	}
	f := url.Values{"csrf": {c[1]}, "decision": {"rollback"}, "plan": {p[1]}}
	if v := versionRE.FindStringSubmatch(page); v != nil {
		f.Set("version", v[1])
	}
	return f
}

// TestPageRejectsAndRollsBack: a waiting execution's page lists each
// effect with the call that would undo it, and "Reject all and roll back"
// cancels it (its pending call never runs) and runs the undos newest
// first — the destructive ones on the approver's click, which saw them
// listed. The page then reads as an ended execution, rolled back, with no
// form; a form whose list differs from what would run is refused, and
// someone who may not decide is told the id is unknown.
func TestPageRejectsAndRollsBack(t *testing.T) {
	shop := &orders{}
	e := newEnv(t, nil, shop)
	id := e.suspend(twoOrdersThenWait)
	b := e.browser()
	e.signInLocal(b)
	_, page := b.get(e.srv.URL + "/approvals/" + id)
	for _, want := range []string{`would run <code>shop.cancel {&#34;id&#34;:&#34;o-2&#34;}</code>`, `would run <code>shop.cancel {&#34;id&#34;:&#34;o-1&#34;}</code>`,
		"Reject all and roll back", "Those that need approval run on this click"} {
		if !strings.Contains(page, want) {
			t.Fatalf("the page lacks %q:\n%s", want, page)
		}
	}
	f := rollbackForm(t, page)

	// Another person, who may not decide for the agent, learns nothing.
	bob := e.browser()
	if status, _ := e.signInAs(bob, "bob", "pw-bob"); status != 200 {
		t.Fatal("bob's sign-in")
	}
	if status, body := bob.get(e.srv.URL + "/approvals/" + id); status != 404 || strings.Contains(body, "o-1") {
		t.Fatalf("bob reads: %d %s", status, body)
	}

	tampered := url.Values{}
	for k, v := range f {
		tampered[k] = v
	}
	tampered.Set("plan", "AAAA")
	if status, body := b.post(e.srv.URL+"/approvals/"+id, tampered); status != 409 || !strings.Contains(body, "Nothing was rolled back") {
		t.Fatalf("a different plan: %d %s", status, body)
	}
	status, done := b.post(e.srv.URL+"/approvals/"+id, f)
	if status != 200 || !strings.Contains(done, "Rolled back") || !strings.Contains(done, `id="outcome-2">compensated`) || !strings.Contains(done, `id="outcome-1">compensated`) {
		t.Fatalf("rollback: %d %s", status, done)
	}
	if got := shop.calls(); !slices.Equal(got, []string{"create ", "create ", "cancel o-2", "cancel o-1"}) || len(shop.open) != 0 {
		t.Fatalf("the server saw %v", got)
	}
	if _, ferr := e.svc.Waiting(context.Background(), id); ferr == nil || ferr.Code != fault.Conflict {
		t.Fatalf("the execution still waits: %+v", ferr)
	}
	status, after := b.get(e.srv.URL + "/approvals/" + id)
	if status != 200 || !strings.Contains(after, "does not wait for a decision") || strings.Contains(after, `value="rollback"`) ||
		!strings.Contains(html.UnescapeString(after), "compensated: compensated already, by call 1 of ") {
		t.Fatalf("after: %d %s", status, after)
	}
	// The form again: nothing is undone twice.
	if status, body := b.post(e.srv.URL+"/approvals/"+id, f); status != 409 {
		t.Fatalf("again: %d %s", status, body)
	}
	if len(shop.calls()) != 4 {
		t.Fatalf("the server saw %v", shop.calls())
	}
}

// TestPageRollbackWaitsForApproval: a person the policy does not let
// consent (the agent's own user, signed in where self-approval is on)
// rolls back; the destructive undo waits, and the page links to the
// rollback's own page, where it is decided like any call.
func TestPageRollbackWaitsForApproval(t *testing.T) {
	shop := &orders{}
	e := newEnv(t, nil, shop)
	resp := e.svc.Execute(context.Background(), execution.Request{Code: `await mcp.shop.create({}); return 1`, Principal: e.agent()})
	if !resp.OK {
		t.Fatal(resp.Error)
	}
	// The agent's user is the agent's principal: it may roll back its own
	// execution, and not consent to a destructive call.
	agent := e.browser()
	if status, _ := e.signInAs(agent, "agent-7", "pw-agent"); status != 200 {
		t.Fatal("sign-in")
	}
	_, page := agent.get(e.srv.URL + "/approvals/" + resp.ExecutionID)
	if !strings.Contains(page, "Those that need approval wait for someone who may approve them") || !strings.Contains(page, `id="rollback">Roll back<`) {
		t.Fatalf("page:\n%s", page)
	}
	status, done := agent.post(e.srv.URL+"/approvals/"+resp.ExecutionID, rollbackForm(t, page))
	m := regexp.MustCompile(`href="([^"]+)" id="rollback-decide"`).FindStringSubmatch(done)
	if status != 200 || !strings.Contains(done, "Rolling back: a decision is needed") || m == nil {
		t.Fatalf("rollback: %d %s", status, done)
	}
	// Alice, an approver, decides the rollback's call on its own page.
	alice := e.browser()
	if status, _ := e.signInAs(alice, "alice", "pw-alice"); status != 200 {
		t.Fatal("alice's sign-in")
	}
	rbID := regexp.MustCompile(`id="rollback-id">([^<]+)<`).FindStringSubmatch(done)[1]
	_, rbPage := alice.get(e.srv.URL + "/approvals/" + rbID)
	status, decided := alice.post(e.srv.URL+"/approvals/"+rbID, form(t, rbPage, "1", "approve", ""))
	if status != 200 || !strings.Contains(decided, "ran to its end and succeeded") {
		t.Fatalf("approve: %d %s", status, decided)
	}
	if got := shop.calls(); !slices.Equal(got, []string{"create ", "cancel o-1"}) {
		t.Fatalf("the server saw %v", got)
	}
	_, after := alice.get(e.srv.URL + "/approvals/" + resp.ExecutionID)
	if !strings.Contains(after, "Rollback: <strong>rolled_back</strong>") {
		t.Fatalf("after:\n%s", after)
	}
}
