package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/chromedp/chromedp"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/testutil/askserver"
	"github.com/pml-sandbox/pml/internal/testutil/moto"
	"github.com/pml-sandbox/pml/internal/testutil/oidcprovider"
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
	plainURL := execURL

	ctx := newBrowser(t)
	browse(t, ctx, "sign in with the link, landing on the list", chromedp.Navigate(link), visible("#waiting"))
	who, list := textOf(t, ctx, "#principal"), textOf(t, ctx, "#waiting")
	if who != "local:person" || !strings.Contains(list, id) || !strings.Contains(list, "#3 demo.kv_delete") || !strings.Contains(list, "#4 demo.kv_delete") {
		t.Fatalf("signed in as %q; list %q", who, list)
	}
	browse(t, ctx, "open the execution from the list", click(`a[href^="/approvals/`+id+`?"]`), visible("#execution"))
	// The page's own links carry the session's key; an address opened
	// from outside needs it too.
	execURL = keyed(t, ctx, execURL)
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
	evil := crossSite(t, plainURL, map[string]string{"csrf": token, "version": "1", "call": "4", "decision": "approve"})
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

// keyed is u as the page's own links open it: with the key of the session
// the tab is signed in with (?s=, read from the page's link to the list).
func keyed(t *testing.T, ctx context.Context, u string) string {
	t.Helper()
	home := read(t, ctx, "the page's link to the list", chromedp.Evaluate[string](`document.querySelector("#home").getAttribute("href")`))
	h, err := url.Parse(home)
	key := ""
	if err == nil {
		key = h.Query().Get("s")
	}
	if key == "" {
		t.Fatalf("the page's link to the list %q carries no session key", home)
	}
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	return u + sep + "s=" + url.QueryEscape(key)
}

// jsonString is s as a JSON string.
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// mcpCall posts one 2026-07-28 tools/call to base's /mcp as principal, its
// client declaring form and URL elicitation, and returns the result.
func mcpCall(t *testing.T, base, principal string, params map[string]any) map[string]any {
	t.Helper()
	params["_meta"] = map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
		"io.modelcontextprotocol/clientCapabilities": map[string]any{"elicitation": map[string]any{"form": map[string]any{}, "url": map[string]any{}}},
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "agent", "version": "1"}}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
	req, _ := http.NewRequest(http.MethodPost, base+"/mcp", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", params["name"].(string))
	req.Header.Set(principalHeader, principal)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if i := strings.Index(string(raw), "data: "); i >= 0 {
		raw = raw[i+6:]
	}
	var msg struct {
		Result map[string]any `json:"result"`
	}
	if err := json.Unmarshal(raw, &msg); err != nil || msg.Result == nil {
		t.Fatalf("tools/call: %d %s", resp.StatusCode, raw)
	}
	return msg.Result
}

// TestApprovalPageLambdaInBrowser is the deployed gate: the execute
// function behind the Lambda emulator and an API Gateway stand-in, the
// caller an agent with a JWT of the deployment's OpenID provider (on
// loopback), alice an approver of the same provider. The agent's MCP
// client, which the deployment does not trust with a form, is sent to the
// approval page by URL-mode elicitation; in headless Chromium the agent
// signs in as itself and is offered no approval, and its forged one is
// refused; alice signs in, rejects one call and approves the other, each
// decision served by a fresh container; the agent's retry reads the
// result. Then alice publishes a capability the agent proposed (a draft,
// listed for her on the page) and it is callable at once in a fresh
// container. The notices on the bus name the pages.
func TestApprovalPageLambdaInBrowser(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	table := s.capTable + "_susp"
	if err := suspend.CreateTable(ctx, s.db.Client(), table); err != nil {
		t.Fatal(err)
	}
	m := moto.Start(t)
	cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("testing", "testing", "")}
	secret, err := secretsmanager.NewFromConfig(cfg, func(o *secretsmanager.Options) { o.BaseEndpoint = aws.String(m.Endpoint) }).CreateSecret(ctx,
		&secretsmanager.CreateSecretInput{Name: aws.String("pml-approval-key"), SecretString: aws.String(strings.Repeat("pAg3", 16))})
	if err != nil {
		t.Fatal(err)
	}
	queue := announcements(t, ctx, cfg, m.Endpoint, "pml-approvals", app.NoticeDetailType, app.DraftDetailType)
	base := s.apiGateway(t)
	idp := oidcprovider.Start(t, oidcprovider.Options{
		Clients: map[string]oidcprovider.Client{"approval-page": {Secret: "page-secret", RedirectURIs: []string{base + "/approvals/signin/callback"}}},
		Users:   map[string]string{"alice": "alice-pw", "agent-7": "agent-pw"},
	})
	agent, alice := "jwt:"+idp.URL+"#agent-7", "jwt:"+idp.URL+"#alice"
	s.emu.SetEnv(app.EnvSuspTable+"="+table, app.EnvApprovalKeySecret+"="+aws.ToString(secret.ARN), app.EnvApprovalBus+"=pml-approvals",
		app.EnvApprovers+"="+alice, app.EnvApprovalURL+"="+base,
		app.EnvOIDCIssuer+"="+idp.URL, app.EnvOIDCClientID+"=approval-page", app.EnvOIDCClientSecret+"=page-secret",
		"AWS_ENDPOINT_URL_SECRETS_MANAGER="+m.Endpoint, "AWS_ENDPOINT_URL_EVENTBRIDGE="+m.Endpoint)
	if _, err := s.emu.Recycle("execute"); err != nil {
		t.Fatal(err)
	}
	recycle := func() {
		t.Helper()
		if _, err := s.emu.Recycle("execute"); err != nil {
			t.Fatal(err)
		}
	}

	code := strings.ReplaceAll(pageScript, "mcp.demo.", "mcp.kv.")
	first := mcpCall(t, base, agent, map[string]any{"name": "execute_code", "arguments": map[string]any{"code": code}})
	state, _ := first["requestState"].(string)
	ask, _ := first["inputRequests"].(map[string]any)["approval-page"].(map[string]any)
	params, _ := ask["params"].(map[string]any)
	pageURL, _ := params["url"].(string)
	if first["resultType"] != "input_required" || state == "" || params["mode"] != "url" || !strings.HasPrefix(pageURL, base+"/approvals/ex_") {
		t.Fatalf("execute_code's first answer %+v", first)
	}
	id := strings.TrimPrefix(pageURL, base+"/approvals/")
	// The agent answers for its user: nothing runs.
	again := mcpCall(t, base, agent, map[string]any{"name": "execute_code", "arguments": map[string]any{"code": code}, "requestState": state,
		"inputResponses": map[string]any{"call-3": map[string]any{"action": "accept", "content": map[string]any{"decision": "approve"}},
			"approval-page": map[string]any{"action": "accept"}}})
	if again["resultType"] != "input_required" {
		t.Fatalf("the agent's own answers: %+v", again)
	}
	recycle()

	browser := newBrowser(t)
	// The agent signs in as itself.
	browse(t, browser, "open the page, signed out", chromedp.Navigate(pageURL), visible("#signin"), click("#signin"), visible("#user"))
	browse(t, browser, "sign in to the provider as the agent",
		chromedp.SendKeys(chromedp.CSS("#user"), "agent-7"), chromedp.SendKeys(chromedp.CSS("#password"), "agent-pw"),
		click("#login"), visible("#execution"))
	if who := textOf(t, browser, "#principal"); who != agent {
		t.Fatalf("signed in as %q, want %q", who, agent)
	}
	offered := read(t, browser, "the approve buttons", chromedp.Evaluate[int](`document.querySelectorAll("button.approve").length`))
	if offered != 0 || !strings.Contains(textOf(t, browser, "main"), "You asked for these calls") {
		t.Fatalf("the agent is offered %d approvals of its own calls", offered)
	}
	// It turns a reject form into an approval: the policy refuses.
	read(t, browser, "the forged form", chromedp.Evaluate[bool](`(document.querySelector("#call-4 .reject-form input[name=decision]").value = "approve", true)`))
	browse(t, browser, "post the forged approval", click("#reject-4"), visible("#message"))
	if msg := textOf(t, browser, "#message"); !strings.Contains(msg, "not yours") {
		t.Fatalf("the agent approving on the page: %q", msg)
	}
	recycle()

	// Alice signs in and decides.
	browse(t, browser, "sign out", visible("#signout"), click("#signout"), signedOutPage())
	browse(t, browser, "sign in as alice", chromedp.Navigate(pageURL), visible("#signin"), click("#signin"), visible("#user"),
		chromedp.SendKeys(chromedp.CSS("#user"), "alice"), chromedp.SendKeys(chromedp.CSS("#password"), "alice-pw"),
		click("#login"), visible("#execution"))
	if who := textOf(t, browser, "#principal"); who != alice {
		t.Fatalf("signed in as %q, want %q", who, alice)
	}
	if args := textOf(t, browser, "#args-3"); !strings.Contains(args, `"key": "production_customers"`) {
		t.Fatalf("call #3's arguments: %q", args)
	}
	browse(t, browser, "reject #3", chromedp.SendKeys(chromedp.CSS("#reason-3"), "not the customers"), click("#reject-3"), visible("#outcome"))
	if outcome := textOf(t, browser, "#outcome"); !strings.Contains(outcome, "waits again") {
		t.Fatalf("reject: %q", outcome)
	}
	recycle()
	browse(t, browser, "approve #4", chromedp.Navigate(keyed(t, browser, pageURL)), visible("#approve-4"), click("#approve-4"), visible("#outcome"))
	if outcome := textOf(t, browser, "#outcome"); !strings.Contains(outcome, "succeeded") {
		t.Fatalf("approve: %q", outcome)
	}
	recycle()

	// The agent's client comes back: the result, as the page decided.
	last := mcpCall(t, base, agent, map[string]any{"name": "execute_code", "arguments": map[string]any{"code": code}, "requestState": state,
		"inputResponses": map[string]any{"approval-page": map[string]any{"action": "accept"}}})
	sc, _ := last["structuredContent"].(map[string]any)
	r, _ := json.Marshal(sc["result"])
	if sc["ok"] != true || !strings.Contains(string(r), `"code":"REJECTED"`) || !strings.Contains(string(r), "not the customers") || !strings.Contains(string(r), `"b":{"ok"`) {
		t.Fatalf("the agent's retry after the page: %+v", last)
	}

	// The agent proposes a capability: a draft, which alice reads whole
	// and publishes on the page; it is callable at once, in a fresh
	// container.
	status, saved := callAs(t, "POST", base+"/capabilities", agent, `{"name": "notes:add", "code": "return args.a + args.b"}`)
	dr, _ := saved["draft"].(map[string]any)
	draftID, _ := dr["id"].(string)
	if status != http.StatusAccepted || saved["status"] != "draft" || draftID == "" {
		t.Fatalf("the agent's save: %d %+v", status, saved)
	}
	recycle()
	browse(t, browser, "the drafts waiting for alice", chromedp.Navigate(keyed(t, browser, base+"/approvals")), visible("#drafts"))
	if list := textOf(t, browser, "#drafts"); !strings.Contains(list, "notes:add") || !strings.Contains(list, agent) {
		t.Fatalf("alice's drafts: %q", list)
	}
	browse(t, browser, "open the draft", click("#drafts a"), visible("#draft-name"))
	if author, code := textOf(t, browser, "#author"), textOf(t, browser, "#code"); author != agent || !strings.Contains(code, "return args.a + args.b") {
		t.Fatalf("the draft's page: %q %q", author, code)
	}
	recycle()
	browse(t, browser, "publish it", click("#publish"), visible("#outcome"))
	if outcome := textOf(t, browser, "#outcome"); !strings.Contains(outcome, "as notes:add version 1") {
		t.Fatalf("publish: %q", outcome)
	}
	recycle()
	if status, ran := callAs(t, "POST", base+"/execute", agent, `{"code": "return await mcp.notes.add({a: 2, b: 3})"}`); status != http.StatusOK || ran["result"] != 5.0 {
		t.Fatalf("calling the published capability: %d %+v", status, ran)
	}

	// Two suspensions and the draft were announced, each with its page.
	var drafts int
	for _, n := range receive(t, ctx, cfg, m.Endpoint, queue, 3) {
		if strings.Contains(n, app.DraftDetailType) {
			drafts++
			if !strings.Contains(n, base+"/approvals/"+draftID) || strings.Contains(n, "return args") {
				t.Errorf("draft notice %s: want the draft's page, never its code", n)
			}
			continue
		}
		if !strings.Contains(n, pageURL) || !strings.Contains(n, id) || strings.Contains(n, "production_customers") {
			t.Errorf("notice %s: want the page's URL, never the arguments", n)
		}
	}
	if drafts != 1 {
		t.Errorf("%d draft notices, want 1", drafts)
	}
}

// signInLink waits for pml serve to print a one-time link that signs in
// and goes on to what waits (after an execution suspended or a draft was
// proposed), and returns it.
func signInLink(t *testing.T, srv *served, what string) string {
	t.Helper()
	re := regexp.MustCompile(`sign in to decide \(one use, within [^)]+\): (http://\S+)`)
	for deadline := time.After(30 * time.Second); ; {
		select {
		case l := <-srv.lines:
			if m := re.FindStringSubmatch(l); m != nil {
				return m[1]
			}
		case <-deadline:
			t.Fatalf("pml serve printed no sign-in link for %s", what)
		}
	}
}

// TestApprovalPageQuestionInBrowser: a remote MCP server (mcp-go) asks
// before it answers a script's call; the agent's MCP client, which pml
// serve under the deployed policy does not trust with a form, is sent to
// the approval page. In headless Chromium the person at the keyboard signs
// in with the link pml serve printed, reads the server's question — its
// message, its fields, their defaults — and answers it: first without the
// required field (the browser's check taken out), which the server's
// schema refuses on the page, then whole. The server gets the answer with
// its own state, and the agent's retry reads the server's result.
func TestApprovalPageQuestionInBrowser(t *testing.T) {
	ask, err := askserver.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ask.Close() })
	dir := t.TempDir()
	srv := startServe(t, []string{app.EnvSuspDir + "=" + filepath.Join(dir, "suspended"), app.EnvApprovalKeyFile + "=" + filepath.Join(dir, "approval.key"),
		app.EnvMCPServers + `={"servers": [` + fmt.Sprintf(`{"name": "ask", "url": %q, "transport": "streamable"}`, ask.URL) + `]}`},
		"--caller-decides", "off")

	code := `return await mcp.ask.confirm_delete({item: "from-the-browser"})`
	first := mcpCall(t, srv.base, "", map[string]any{"name": "execute_code", "arguments": map[string]any{"code": code}})
	state, _ := first["requestState"].(string)
	params, _ := first["inputRequests"].(map[string]any)["approval-page"].(map[string]any)["params"].(map[string]any)
	pageURL, _ := params["url"].(string)
	msg, _ := params["message"].(string)
	if first["resultType"] != "input_required" || state == "" || params["mode"] != "url" || !strings.HasPrefix(pageURL, srv.base+"/approvals/ex_") ||
		!strings.Contains(msg, `The MCP server "ask" asks`) || !strings.Contains(msg, fmt.Sprintf(askserver.Question, "from-the-browser")) {
		t.Fatalf("execute_code's first answer %+v", first)
	}
	link := signInLink(t, srv, "the execution")

	ctx := newBrowser(t)
	browse(t, ctx, "sign in with the link, landing on the execution", chromedp.Navigate(link), visible("#question-1"))
	if m := textOf(t, ctx, "#message-1-0"); m != fmt.Sprintf(askserver.Question, "from-the-browser") {
		t.Fatalf("the server's question reads %q", m)
	}
	if label := textOf(t, ctx, `label[for="a-1-0-0"]`); !strings.Contains(label, "Delete it?") || !strings.Contains(label, "boolean · required") {
		t.Fatalf("the field reads %q", label)
	}
	if def := read(t, ctx, "the note's default", chromedp.Value(chromedp.CSS("#a-1-0-1"))); def != "none" {
		t.Fatalf("the note shows %q, want the server's default", def)
	}
	// The browser checks required fields; the page checks again, against
	// the server's own schema.
	read(t, ctx, "the form without its browser checks", chromedp.Evaluate[bool](`(document.querySelectorAll("[required]").forEach((e) => e.removeAttribute("required")), true)`))
	browse(t, ctx, "send the answer without the required field", click("#answer-1"), visible("#problems-1"))
	if p := textOf(t, ctx, "#problems-1"); !strings.Contains(p, "confirmed") {
		t.Fatalf("the refused answer says %q", p)
	}
	if len(ask.Retries()) != 0 {
		t.Fatalf("a refused answer reached the server: %+v", ask.Retries())
	}
	browse(t, ctx, "answer the question",
		click("#a-1-0-0-yes"), chromedp.SetValue(chromedp.CSS("#a-1-0-1"), "checked in a browser"),
		click("#answer-1"), visible("#outcome"))
	if outcome := textOf(t, ctx, "#outcome"); !strings.Contains(outcome, "You answered the question call #1") || !strings.Contains(outcome, "succeeded") {
		t.Fatalf("answer: %q", outcome)
	}
	r := ask.Retries()
	if len(r) != 1 || !r[0].Known || r[0].Answer.Action != "accept" {
		t.Fatalf("the server got %+v", r)
	}

	last := mcpCall(t, srv.base, "", map[string]any{"name": "execute_code", "arguments": map[string]any{"code": code}, "requestState": state,
		"inputResponses": map[string]any{"approval-page": map[string]any{"action": "accept"}}})
	sc, _ := last["structuredContent"].(map[string]any)
	if res, _ := json.Marshal(sc["result"]); sc["ok"] != true || string(res) != `{"deleted":true,"item":"from-the-browser","note":"checked in a browser"}` {
		t.Fatalf("the agent's retry after the page: %+v", last)
	}
}

// TestApprovalPageDraftInBrowser: under the deployed policy a caller's
// save_capability is a draft; pml serve prints a link for the person at
// its keyboard, who reads the draft whole in headless Chromium and
// publishes it — callable at once. The caller's next draft of the name is
// shown against the published version with a diff; the caller may not
// publish it, and the person rejects it with a reason: callers still run
// version 1.
func TestApprovalPageDraftInBrowser(t *testing.T) {
	dir := t.TempDir()
	srv := startServe(t, []string{app.EnvApprovalKeyFile + "=" + filepath.Join(dir, "approval.key")}, "--caller-decides", "off")
	status, doc := postJSON(t, srv.base+"/capabilities", `{"name": "math:sum", "code": "return args.a + args.b", "description": "Adds a and b."}`)
	d, _ := doc["draft"].(map[string]any)
	id, _ := d["id"].(string)
	if status != http.StatusAccepted || doc["status"] != "draft" || id == "" {
		t.Fatalf("the caller's save: %d %+v", status, doc)
	}
	link := signInLink(t, srv, "the draft")

	ctx := newBrowser(t)
	browse(t, ctx, "sign in with the link, landing on the draft", chromedp.Navigate(link), visible("#draft-name"))
	if name, code, replaces := textOf(t, ctx, "#draft-name"), textOf(t, ctx, "#code"), textOf(t, ctx, "#replaces"); name != "math:sum" ||
		!strings.Contains(code, "return args.a + args.b") || !strings.Contains(replaces, "Nothing is published") {
		t.Fatalf("the draft's page: %q %q %q", name, code, replaces)
	}
	if desc := textOf(t, ctx, "#description"); desc != "Adds a and b." {
		t.Fatalf("description %q", desc)
	}
	browse(t, ctx, "publish it", click("#publish"), visible("#outcome"))
	if outcome := textOf(t, ctx, "#outcome"); !strings.Contains(outcome, "You published draft "+id+" as math:sum version 1") {
		t.Fatalf("publish: %q", outcome)
	}
	sum := func() any {
		t.Helper()
		status, doc := postJSON(t, srv.base+"/execute", `{"code": "return await mcp.math.sum({a: 2, b: 3})"}`)
		if status != http.StatusOK {
			t.Fatalf("calling math:sum: %d %+v", status, doc)
		}
		return doc["result"]
	}
	if got := sum(); got != 5.0 {
		t.Fatalf("math:sum answered %v, want 5", got)
	}

	_, doc = postJSON(t, srv.base+"/capabilities", `{"name": "math:sum", "code": "return args.a * args.b"}`)
	d, _ = doc["draft"].(map[string]any)
	second, _ := d["id"].(string)
	if doc["status"] != "draft" || second == "" {
		t.Fatalf("the caller's second save: %+v", doc)
	}
	if status, doc := postJSON(t, srv.base+"/capabilities/drafts/"+second+"/publish", `{}`); status != http.StatusForbidden {
		t.Fatalf("the caller publishing its own draft: %d %+v", status, doc)
	}
	browse(t, ctx, "open the second draft", chromedp.Navigate(keyed(t, ctx, srv.base+"/approvals/"+second)), visible("#diff"))
	if replaces, diff := textOf(t, ctx, "#replaces"), textOf(t, ctx, "#diff"); replaces != "version 1" ||
		!strings.Contains(diff, "- return args.a + args.b") || !strings.Contains(diff, "+ return args.a * args.b") {
		t.Fatalf("the second draft against version 1: %q %q", replaces, diff)
	}
	browse(t, ctx, "reject it with a reason", chromedp.SendKeys(chromedp.CSS("#draft-reason"), "it multiplies"), click("#reject"), visible("#outcome"))
	if outcome := textOf(t, ctx, "#outcome"); !strings.Contains(outcome, "You rejected draft "+second) || !strings.Contains(outcome, "it multiplies") {
		t.Fatalf("reject: %q", outcome)
	}
	if got := sum(); got != 5.0 {
		t.Fatalf("after the rejection math:sum answered %v, want 5", got)
	}
}
