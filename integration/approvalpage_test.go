package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/demoserver"
)

// pageScript waits on two destructive calls at once: #3 hides its key
// behind 520 spaces of a reassuring note (a question cut short would show
// only the note), #4 deletes "b".
const pageScript = `await mcp.demo.kv_set({key: "production_customers", value: 1});
await mcp.demo.kv_set({key: "b", value: 2});
const settle = (p) => p.then((v) => ({ok: v}), (e) => ({code: e.code, message: e.message}));
const [customers, b] = await Promise.all([
  settle(mcp.demo.kv_delete({note: "Routine cleanup. Dry-run verified, no user data is touched." + " ".repeat(520), key: "production_customers"})),
  settle(mcp.demo.kv_delete({key: "b"})),
]);
return {customers, b};`

// postJSON posts body to url and decodes the answer.
func postJSON(t *testing.T, url, body string, headers ...string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&doc)
	return resp.StatusCode, doc
}

// crossSite serves a page on another site (localhost, not 127.0.0.1) that
// posts a decision to action as soon as it loads, with the fields given
// (even the real token, as if it had been stolen): a cross-site request
// forgery.
func crossSite(t *testing.T, action string, fields map[string]string) string {
	var inputs strings.Builder
	for k, v := range fields {
		fmt.Fprintf(&inputs, `<input type="hidden" name="%s" value="%s">`, k, v)
	}
	page := `<!doctype html><html><body><form id="f" method="post" action="` + action + `">` + inputs.String() +
		`</form><script>document.getElementById("f").submit()</script></body></html>`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(page))
	}))
	t.Cleanup(srv.Close)
	return strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
}

// TestApprovalPageServeInBrowser: pml serve, as deployed policy has it
// (--caller-decides off), suspends an execution, and is restarted; the
// person at its keyboard opens the one-time link the new process printed
// in headless Chromium, finds the execution on the list, reads the
// pending calls — the key after 520 spaces of padding shown whole — and
// rejects one with a reason and approves the other: the execution,
// suspended by the first process, resumes in the second. A form stripped
// of its CSRF token, a forgery from another site, a stale form and a
// second use of the link are refused.
func TestApprovalPageServeInBrowser(t *testing.T) {
	demo, err := demoserver.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = demo.Close() })
	dir := t.TempDir()
	env := []string{app.EnvSuspDir + "=" + filepath.Join(dir, "suspended"), app.EnvApprovalKeyFile + "=" + filepath.Join(dir, "approval.key")}
	args := []string{"--mcp", "demo=" + demo.StreamableURL(), "--caller-decides", "off"}

	first := startServe(t, env, args...)
	status, doc := postJSON(t, first.base+"/execute", `{"code": `+jsonString(pageScript)+`, "approval": "suspend"}`)
	id, _ := doc["execution_id"].(string)
	if status != http.StatusAccepted || doc["status"] != "suspended" || doc["approval_url"] != first.base+"/approvals/"+id {
		t.Fatalf("suspend: %d %+v", status, doc)
	}
	// The caller may not approve (the deployed policy) — not even with
	// the page's own form, which needs a session.
	if status, _ := postJSON(t, first.base+"/executions/"+id+"/resume", `{"decisions": {"4": "approve"}}`); status != http.StatusForbidden {
		t.Fatalf("the caller approving: %d", status)
	}
	_ = first.proc.Signal(syscallTERM)
	select {
	case <-first.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the first pml serve did not stop")
	}

	second := startServe(t, env, args...)
	link := ""
	linkRE := regexp.MustCompile(`sign in once with (http://\S+/approvals/signin\?link=[A-Za-z0-9_-]+)`)
	for deadline := time.After(30 * time.Second); link == ""; {
		select {
		case l := <-second.lines:
			if m := linkRE.FindStringSubmatch(l); m != nil {
				link = m[1]
			}
		case <-deadline:
			t.Fatal("pml serve printed no sign-in link")
		}
	}
	execURL := second.base + "/approvals/" + id

	ctx := newBrowser(t)
	browse(t, ctx, "sign in with the link, landing on the list", chromedp.Navigate(link), visible("#waiting"))
	who, list := textOf(t, ctx, "#principal"), textOf(t, ctx, "#waiting")
	if who != "local:person" || !strings.Contains(list, id) || !strings.Contains(list, "#3 demo.kv_delete") || !strings.Contains(list, "#4 demo.kv_delete") {
		t.Fatalf("signed in as %q; list %q", who, list)
	}
	browse(t, ctx, "open the execution from the list", click(`a[href="/approvals/`+id+`"]`), visible("#execution"))
	args3, description, source := textOf(t, ctx, "#args-3"), textOf(t, ctx, "#call-3 .description"), textOf(t, ctx, "#call-3 .source")
	if !strings.Contains(args3, `"key": "production_customers"`) || !strings.Contains(args3, "touched."+strings.Repeat(" ", 520)+`"`) {
		t.Fatalf("call #3's arguments are not shown whole: %q", args3)
	}
	if description == "" || !strings.Contains(source, `key: "production_customers"`) {
		t.Fatalf("description %q, source around the call %q", description, source)
	}

	// The token taken out of the form: refused.
	read(t, ctx, "the form without its token", chromedp.Evaluate[bool](`(document.querySelector("#call-4 .approve-form input[name=csrf]").remove(), true)`))
	browse(t, ctx, "post a form without its CSRF token", click("#approve-4"), visible("#message"))
	if msg := textOf(t, ctx, "#message"); !strings.Contains(msg, "does not carry this session's token") {
		t.Fatalf("a form without its token: %q", msg)
	}
	// Another site's page posts the whole form, token and all.
	browse(t, ctx, "reload the execution", chromedp.Navigate(execURL), visible("#execution"))
	token := read(t, ctx, "the form's token", chromedp.Value(chromedp.CSS("#call-4 .approve-form input[name=csrf]")))
	// The form as it is now, at version 1, to be sent again later.
	oldVersion := read(t, ctx, "the form's version", chromedp.Value(chromedp.CSS("#call-4 .approve-form input[name=version]")))
	evil := crossSite(t, execURL, map[string]string{"csrf": token, "version": "1", "call": "4", "decision": "approve"})
	browse(t, ctx, "a forgery from another site", chromedp.Navigate(evil), visible("#message"))
	if msg := textOf(t, ctx, "#message"); !strings.Contains(msg, "another site") {
		t.Fatalf("a cross-site forgery: %q", msg)
	}

	browse(t, ctx, "reject #3 with a reason",
		chromedp.Navigate(execURL), visible("#reason-3"),
		chromedp.SendKeys(chromedp.CSS("#reason-3"), "the note hides the key: production_customers"),
		click("#reject-3"), visible("#outcome"))
	if outcome := textOf(t, ctx, "#outcome"); !strings.Contains(outcome, "You rejected call #3") || !strings.Contains(outcome, "waits again") {
		t.Fatalf("reject: %q", outcome)
	}
	// The form of the page before the rejection, sent again (its
	// version put back): refused, though #4 waits.
	browse(t, ctx, "open the execution again", chromedp.Navigate(execURL), visible("#approve-4"))
	read(t, ctx, "the old form", chromedp.Evaluate[bool](`(document.querySelector("#call-4 .approve-form input[name=version]").value = `+jsonString(oldVersion)+`, true)`))
	browse(t, ctx, "send the old form again", click("#approve-4"), visible("#message"))
	if msg := textOf(t, ctx, "#message"); oldVersion != "1" || !strings.Contains(msg, "moved on") {
		t.Fatalf("a replayed form (version %s): %q", oldVersion, msg)
	}
	browse(t, ctx, "approve #4", chromedp.Navigate(execURL), visible("#approve-4"), click("#approve-4"), visible("#outcome"))
	if outcome := textOf(t, ctx, "#outcome"); !strings.Contains(outcome, "You approved call #4") || !strings.Contains(outcome, "succeeded") {
		t.Fatalf("approve: %q", outcome)
	}
	// The link was used once.
	browse(t, ctx, "open the link again", chromedp.Navigate(link), visible("#message"))
	if msg := textOf(t, ctx, "#message"); !strings.Contains(msg, "not valid") {
		t.Fatalf("a second use of the link: %q", msg)
	}

	// The caller reads how it ended: #3 rejected with the reason, #4 ran.
	resp, err := http.Get(second.base + "/executions/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var end struct {
		Status string `json:"status"`
		Result struct {
			Customers struct{ Code, Message string } `json:"customers"`
			B         struct{ OK json.RawMessage }   `json:"b"`
		} `json:"result"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&end); err != nil {
		t.Fatal(err)
	}
	if end.Status != "completed" || end.Result.Customers.Code != "REJECTED" || !strings.Contains(end.Result.Customers.Message, "the note hides the key") ||
		len(end.Result.B.OK) == 0 {
		t.Fatalf("the execution ended %+v", end)
	}
}

// jsonString is s as a JSON string.
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
