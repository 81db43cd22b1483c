package approvalpage_test

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/approvalpage"
	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/execution"
)

// propose saves p as author's, with author's own credentials: under the
// deployed policy, a draft.
func (e *env) propose(author string, p capability.Proposal) capability.Draft {
	e.t.Helper()
	out, err := e.guard.Submit(context.Background(), approval.Decider{Principal: author, Channel: execution.ChannelCaller}, author, p)
	if err != nil || out.Status != capability.OutcomeDraft {
		e.t.Fatalf("proposing %s: %+v %v", p.Name, out, err)
	}
	return *out.Draft
}

// head is name's published head version and code ("" when none).
func (e *env) head(name string) (int, string, capability.Capability) {
	e.t.Helper()
	found, err := e.reg.Lookup(context.Background(), []string{name})
	if err != nil {
		e.t.Fatal(err)
	}
	c := found[name]
	return c.Version, c.Code, c
}

var headRE = regexp.MustCompile(`name="head" value="(\d+)"`)

// draftForm is what a draft page's form posts.
func draftForm(t *testing.T, page, decision, reason string) url.Values {
	t.Helper()
	c, h := csrfRE.FindStringSubmatch(page), headRE.FindStringSubmatch(page)
	if c == nil || h == nil {
		t.Fatalf("no decision form on the draft's page:\n%s", page)
	}
	return url.Values{"csrf": {c[1]}, "head": {h[1]}, "decision": {decision}, "reason": {reason}}
}

// TestDraftPublishedOnThePage: an agent's save is a draft under the
// deployed policy; the local person finds it on the list, reads it whole
// (its code, description, input schema, pins, provenance and author) and
// publishes it as version 1, by the page. The agent's next draft of the
// name is shown against version 1 with a line diff; a decision taken on a
// page shown before another version was published is refused, and so is a
// form sent twice; the person rejects it with a reason.
func TestDraftPublishedOnThePage(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	if _, err := e.reg.Save(ctx, capability.Capability{Name: "text:fmt", Code: "return String(args.n)", Publisher: "arn:aws:iam::1:role/ops"}, nil); err != nil {
		t.Fatal(err)
	}
	d := e.propose(e.agent(), capability.Proposal{Name: "math:sum", Code: "// adds\nreturn args.a + args.b",
		Description: "Adds a and b.", InputSchema: json.RawMessage(`{"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}`),
		Pins: map[string]int{"text:fmt": 1}, Provenance: []string{"ex_0a1b2c"}})

	b := e.browser()
	e.signInLocal(b)
	_, list := b.get(e.srv.URL + "/approvals")
	if !strings.Contains(list, `<table class="waiting" id="drafts">`) || !strings.Contains(list, "/approvals/"+d.ID) || !strings.Contains(list, "publish or reject") ||
		!strings.Contains(list, e.agent()) {
		t.Fatalf("list: %s", list)
	}
	draftURL := e.srv.URL + "/approvals/" + d.ID
	status, page := b.get(draftURL)
	if status != 200 {
		t.Fatalf("draft page: %d %s", status, page)
	}
	for _, want := range []string{
		`<span id="draft-name">math:sum</span>`, `<td id="author">` + e.agent() + `</td>`,
		"   1  // adds\n   2  return args.a + args.b\n", // the code, whole
		"Adds a and b.", `"type": "number"`, "text:fmt version 1", "<code>ex_0a1b2c</code>",
		"Nothing is published under this name yet", `id="publish"`, `id="reject"`, d.CodeHash,
	} {
		if !strings.Contains(html.UnescapeString(page), want) {
			t.Errorf("the draft's page lacks %q", want)
		}
	}
	if strings.Contains(strings.ToLower(page), "<script") {
		t.Errorf("the page sends a script")
	}
	publish := draftForm(t, page, "publish", "")
	status, body := b.post(draftURL, publish)
	if status != 200 || !strings.Contains(body, "You published draft "+d.ID+" as math:sum version 1") {
		t.Fatalf("publish: %d %s", status, body)
	}
	v, code, c := e.head("math:sum")
	if v != 1 || code != d.Code || c.Via != capability.ViaPage || c.Publisher != approvalpage.LocalPrincipal || c.Author != e.agent() || c.Draft != d.ID {
		t.Fatalf("published %+v", c)
	}
	if status, _ := b.post(draftURL, publish); status != http.StatusConflict {
		t.Fatalf("the same form again: %d, want 409", status)
	}
	if _, list = b.get(e.srv.URL + "/approvals"); strings.Contains(list, d.ID) {
		t.Fatalf("the published draft is still listed")
	}

	second := e.propose(e.agent(), capability.Proposal{Name: "math:sum", Code: "// adds\nreturn args.a + args.b + 1"})
	secondURL := e.srv.URL + "/approvals/" + second.ID
	_, page = b.get(secondURL)
	for _, want := range []string{
		`<strong id="replaces">version 1</strong>`, "Changes from version 1", "@@ -1,2 +1,2 @@",
		`<span class="ctx">  // adds</span>`, `<span class="del">- return args.a + args.b</span>`, `<span class="add">+ return args.a + args.b + 1</span>`,
	} {
		if !strings.Contains(html.UnescapeString(page), want) {
			t.Errorf("the second draft's page lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(page[strings.Index(page, "<main>"):])
	}
	// Another version is published meanwhile: the page shown is stale.
	if _, err := e.guard.Submit(ctx, approval.Decider{Principal: approvalpage.JWTPrincipal(e.idp.URL, "alice")}, approvalpage.JWTPrincipal(e.idp.URL, "alice"),
		capability.Proposal{Name: "math:sum", Code: "return 0"}); err != nil {
		t.Fatal(err)
	}
	status, body = b.post(secondURL, draftForm(t, page, "publish", ""))
	if status != http.StatusConflict || !strings.Contains(body, "new published version") {
		t.Fatalf("a decision on a stale page: %d %s", status, body)
	}
	if v, _, _ := e.head("math:sum"); v != 2 {
		t.Fatalf("head is version %d, want 2", v)
	}
	_, page = b.get(secondURL)
	if !strings.Contains(page, `<strong id="replaces">version 2</strong>`) || !strings.Contains(html.UnescapeString(page), `<span class="del">- return 0</span>`) {
		t.Fatalf("the page now:\n%s", page)
	}
	status, body = b.post(secondURL, draftForm(t, page, "reject", "off by one"))
	if status != 200 || !strings.Contains(body, "You rejected draft "+second.ID+" of math:sum (reason: off by one)") {
		t.Fatalf("reject: %d %s", status, body)
	}
	closed, err := e.guard.Draft(ctx, e.agent(), second.ID)
	if err != nil || closed.Status != capability.DraftRejected || closed.Reason != "off by one" {
		t.Fatalf("the rejected draft: %+v %v", closed, err)
	}
	if _, page = b.get(secondURL); !strings.Contains(page, "This draft was rejected") || strings.Contains(page, `id="publish"`) {
		t.Fatalf("a closed draft's page:\n%s", page)
	}
}

// TestDraftsWhoMayPublish: the deployment's policy decides on the page as
// everywhere. A principal that neither wrote the draft, owns its
// namespace nor approves sees nothing of it — not on the list, not its
// page, and its forms are refused; the author reads its own draft and may
// withdraw it but not publish it, even with a forged form; an owner of the
// namespace, no approver, publishes another's draft into it, and sees its
// author only as "another principal".
func TestDraftsWhoMayPublish(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	bob := approvalpage.JWTPrincipal(e.idp.URL, "bob")
	if _, err := e.reg.Save(ctx, capability.Capability{Name: "bobs:first", Code: "return 0", Publisher: bob}, nil); err != nil {
		t.Fatal(err)
	}
	secret := e.propose(e.agent(), capability.Proposal{Name: "math:mul", Code: "return 'the secret formula'"})
	intoBobs := e.propose(e.agent(), capability.Proposal{Name: "bobs:second", Code: "return 2"})

	// A stranger: bob, for the draft outside his namespace.
	sb := e.browser()
	e.signInAs(sb, "bob", "pw-bob")
	_, list := sb.get(e.srv.URL + "/approvals")
	if strings.Contains(list, secret.ID) || strings.Contains(list, "math:mul") {
		t.Fatalf("a stranger's list shows the draft: %s", list)
	}
	secretURL := e.srv.URL + "/approvals/" + secret.ID
	if status, body := sb.get(secretURL); status != http.StatusNotFound || strings.Contains(body, "secret formula") {
		t.Fatalf("a stranger reads the draft: %d", status)
	}
	_, bobsPage := sb.get(e.srv.URL + "/approvals/" + intoBobs.ID)
	forged := draftForm(t, bobsPage, "publish", "")
	if status, _ := sb.post(secretURL, forged); status != http.StatusNotFound {
		t.Fatalf("a stranger publishing: %d", status)
	}
	if v, _, _ := e.head("math:mul"); v != 0 {
		t.Fatalf("the stranger published version %d", v)
	}
	for _, probe := range []string{"cd_000000000000000000000000", "cd_nothex"} {
		if status, _ := sb.get(e.srv.URL + "/approvals/" + probe); status != http.StatusNotFound {
			t.Errorf("probing %s: %d", probe, status)
		}
	}

	// The author: reads it, may withdraw it, may not publish it.
	ab := e.browser()
	e.signInAs(ab, "agent-7", "pw-agent")
	if _, list := ab.get(e.srv.URL + "/approvals"); strings.Contains(list, secret.ID) {
		t.Fatalf("the author's list offers its own draft: %s", list)
	}
	_, own := ab.get(secretURL)
	if !strings.Contains(own, "the secret formula") || strings.Contains(own, `id="publish"`) || !strings.Contains(own, "Withdraw your draft") ||
		!strings.Contains(own, "Publishing this draft is not yours") {
		t.Fatalf("the author's page:\n%s", own)
	}
	ownForm := draftForm(t, own, "reject", "")
	ownForm.Set("decision", "publish")
	if status, body := ab.post(secretURL, ownForm); status != http.StatusForbidden || !strings.Contains(body, "not yours") {
		t.Fatalf("the author publishing on the page: %d %s", status, body)
	}
	noToken := draftForm(t, own, "reject", "")
	noToken.Del("csrf")
	if status, _ := ab.post(secretURL, noToken); status != http.StatusForbidden {
		t.Fatalf("a form without its token: %d", status)
	}
	if status, body := ab.post(secretURL, draftForm(t, own, "reject", "")); status != 200 || !strings.Contains(body, "You withdrew draft "+secret.ID) {
		t.Fatalf("the author withdrawing: %d %s", status, body)
	}
	if d, _ := e.guard.Draft(ctx, e.agent(), secret.ID); d.Status != capability.DraftWithdrawn {
		t.Fatalf("the withdrawn draft: %+v", d)
	}

	// The namespace's owner publishes another's draft into it.
	if !strings.Contains(list, intoBobs.ID) || !strings.Contains(list, "another principal (shown to approvers only)") || strings.Contains(list, e.agent()) {
		t.Fatalf("the owner's list: %s", list)
	}
	if !strings.Contains(bobsPage, `<td id="author">another principal (shown to approvers only)</td>`) {
		t.Fatalf("the owner's page shows the author:\n%s", bobsPage)
	}
	if status, body := sb.post(e.srv.URL+"/approvals/"+intoBobs.ID, draftForm(t, bobsPage, "publish", "")); status != 200 || !strings.Contains(body, "as bobs:second version 1") {
		t.Fatalf("the owner publishing: %d %s", status, body)
	}
	if v, _, c := e.head("bobs:second"); v != 1 || c.Publisher != bob || c.Via != capability.ViaPage {
		t.Fatalf("published %+v", c)
	}
}

// TestDraftCodeShownWhole: code is shown whole however long, every line,
// with markup as text and format characters as escapes; a diff too large
// to compute says so, and both codes are still there.
func TestDraftCodeShownWhole(t *testing.T) {
	e := newEnv(t, nil)
	var long strings.Builder
	for i := range 2500 {
		fmt.Fprintf(&long, "const v%d = %d;\n", i, i)
	}
	if _, err := e.reg.Save(context.Background(), capability.Capability{Name: "big:one", Code: long.String() + "return 1", Publisher: "arn:aws:iam::1:role/ops"}, nil); err != nil {
		t.Fatal(err)
	}
	d := e.propose(e.agent(), capability.Proposal{Name: "big:one", Code: long.String() + "return \"</pre><script>alert(1)</script>\u202e\" // the last line"})
	b := e.browser()
	e.signInLocal(b)
	_, page := b.get(e.srv.URL + "/approvals/" + d.ID)
	for _, want := range []string{
		"const v2499 = 2499;",
		`2501  return &#34;&lt;/pre&gt;&lt;script&gt;alert(1)&lt;/script&gt;\u202e&#34; // the last line`,
		"over 2000 lines: no diff is computed",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(strings.ToLower(page), "<script") || strings.ContainsRune(page, '\u202e') {
		t.Errorf("the code is not shown as text")
	}
}
