package integration

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/demoserver"
)

// otherPort is another web server on 127.0.0.1 (an agent's dev server, a
// local tool's) that the person opens in the same browser: it keeps the
// Cookie header of every request, and serves a page whose form posts a
// decision to the approval page (same site, another port) as it loads.
type otherPort struct {
	srv     *httptest.Server
	cookies chan string
}

func startOtherPort(t *testing.T, action string) *otherPort {
	o := &otherPort{cookies: make(chan string, 64)}
	page := `<!doctype html><html><body><p>a dev server</p><form id="f" method="post" action="` + action + `">` +
		`<input type="hidden" name="call" value="4"><input type="hidden" name="version" value="1"><input type="hidden" name="decision" value="approve">` +
		`</form><script>document.getElementById("f").submit()</script></body></html>`
	o.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case o.cookies <- r.Header.Get("Cookie"):
		default:
		}
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, page)
	}))
	t.Cleanup(o.srv.Close)
	return o
}

// replayTo sends a request to the approval page as the other server
// would, with the cookie it received and the headers it likes (a program
// forges Origin, Sec-Fetch-Site and Host at will).
func replayTo(t *testing.T, method, u, cookie string, form url.Values, headers ...string) (int, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, u, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.Header.Set("Cookie", cookie)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// pending is what execution id of srv waits for now, as its caller reads
// it.
func pending(t *testing.T, srv *served, id string) string {
	t.Helper()
	resp, err := http.Get(srv.base + "/executions/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc struct {
		Status  string `json:"status"`
		Pending []struct {
			CallID int `json:"call_id"`
		} `json:"pending"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	out := doc.Status
	for _, p := range doc.Pending {
		out += " #" + string(rune('0'+p.CallID))
	}
	return out
}

// TestApprovalPageOtherPortInBrowser (hostile review 5, findings 1 and
// 8), in headless Chromium with its own profile: the person signs in on
// pml serve's page with the link it printed, then opens another web
// server on 127.0.0.1. The browser sends that server the page's cookie
// (cookies do not separate ports; SameSite counts every loopback port as
// the same site) — and its page's form, posted to the approval page, is
// refused. The server replays the cookie, and every token it can read
// with it, to the page: it reads and decides nothing. The person decides
// a call; signs out; the old cookie, replayed with the session's real key,
// is refused too.
func TestApprovalPageOtherPortInBrowser(t *testing.T) {
	demo, err := demoserver.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = demo.Close() })
	dir := t.TempDir()
	srv := startServe(t, []string{app.EnvSuspDir + "=" + filepath.Join(dir, "suspended"), app.EnvApprovalKeyFile + "=" + filepath.Join(dir, "approval.key")},
		"--mcp", "demo="+demo.StreamableURL(), "--caller-decides", "off")
	status, doc := postJSON(t, srv.base+"/execute", `{"code": `+jsonString(pageScript)+`, "approval": "suspend"}`)
	id, _ := doc["execution_id"].(string)
	if status != http.StatusAccepted || id == "" {
		t.Fatalf("suspend: %d %+v", status, doc)
	}
	link := signInLink(t, srv, "the execution")
	execURL := srv.base + "/approvals/" + id
	other := startOtherPort(t, execURL)

	ctx := newBrowser(t)
	browse(t, ctx, "sign in with the link, landing on the execution", chromedp.Navigate(link), visible("#execution"))
	keyedURL := keyed(t, ctx, execURL)
	browse(t, ctx, "open the other server, whose page posts an approval to the page", chromedp.Navigate(other.srv.URL+"/"), visible("#message"))
	if msg := textOf(t, ctx, "#message"); !strings.Contains(msg, "another site") {
		t.Fatalf("the other port's form: %q", msg)
	}
	cookie := <-other.cookies
	if !strings.Contains(cookie, "pml-approvals=") {
		t.Fatalf("the browser sent the other port %q: the premise of the test does not hold", cookie)
	}

	// The other server replays what it got, as itself and dressed as the
	// page's own browser.
	var tokens []string
	csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	for _, u := range []string{execURL, srv.base + "/approvals", srv.base + "/approvals/ex_none", srv.base + "/approvals/signin"} {
		for _, h := range [][]string{nil, {"Sec-Fetch-Site", "same-origin", "Sec-Fetch-Mode", "navigate"}} {
			status, body := replayTo(t, http.MethodGet, u, cookie, nil, h...)
			if strings.Contains(body, "production_customers") || u != execURL && strings.Contains(body, id) {
				t.Fatalf("GET %s with the replayed cookie read the call: %d", u, status)
			}
			for _, m := range csrf.FindAllStringSubmatch(body, -1) {
				tokens = append(tokens, m[1])
			}
		}
	}
	for _, tok := range append(tokens, "") {
		f := url.Values{"csrf": {tok}, "version": {"1"}, "call": {"4"}, "decision": {"approve"}}
		for _, h := range [][]string{nil, {"Origin", srv.base, "Sec-Fetch-Site", "same-origin"}} {
			if status, body := replayTo(t, http.MethodPost, execURL, cookie, f, h...); status == http.StatusOK {
				t.Fatalf("the other server approved the call as the person (token %q): %s", tok, body)
			}
		}
	}
	if got := pending(t, srv, id); got != "suspended #3 #4" {
		t.Fatalf("after the other server's tries the execution is %q", got)
	}

	// The person decides; signs out; the old cookie with the real key is
	// refused.
	browse(t, ctx, "approve #4", chromedp.Navigate(keyedURL), visible("#approve-4"), click("#approve-4"), visible("#outcome"))
	if outcome := textOf(t, ctx, "#outcome"); !strings.Contains(outcome, "You approved call #4") || !strings.Contains(outcome, "waits again") {
		t.Fatalf("approve: %q", outcome)
	}
	key := read(t, ctx, "the session's key", chromedp.Evaluate[string](`document.querySelector("header input[name=csrf]").value`))
	browse(t, ctx, "sign out", click("#signout"), signedOutPage())
	if msg := textOf(t, ctx, "#message"); !strings.Contains(msg, "signed out") {
		t.Fatalf("sign out: %q", msg)
	}
	if status, body := replayTo(t, http.MethodGet, keyedURL, cookie, nil); status != http.StatusUnauthorized || strings.Contains(body, "production_customers") {
		t.Fatalf("the signed-out cookie with its key reads the call: %d", status)
	}
	f := url.Values{"csrf": {key}, "version": {"2"}, "call": {"3"}, "decision": {"approve"}}
	if status, _ := replayTo(t, http.MethodPost, execURL, cookie, f, "Origin", srv.base, "Sec-Fetch-Site", "same-origin"); status == http.StatusOK {
		t.Fatal("the signed-out cookie with its key approved")
	}
	browse(t, ctx, "the page after signing out", chromedp.Navigate(keyedURL), visible("#message"))
	if got := pending(t, srv, id); got != "suspended #3" {
		t.Fatalf("at the end the execution is %q", got)
	}
}
