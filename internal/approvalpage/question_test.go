package approvalpage_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/approvalpage"
	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/testutil/askserver"
	"github.com/pml-sandbox/pml/internal/toolsource"
	mcpkind "github.com/pml-sandbox/pml/internal/toolsource/mcp"
	"github.com/pml-sandbox/pml/internal/trace"
)

// asker is a remote server in miniature: its one tool, remote.book, asks
// the questions it was given (2026-07-28 input_required, with a state of
// its own) and, sent again with the answers and that state, answers with
// the answers it got.
type asker struct {
	requests map[string]json.RawMessage

	mu      sync.Mutex
	answers []map[string]json.RawMessage
}

const askerState = "asker-state-not-for-the-page"

func newAsker(t *testing.T, requests map[string]string) *asker {
	t.Helper()
	a := &asker{requests: map[string]json.RawMessage{}}
	for k, v := range requests {
		if !json.Valid([]byte(v)) {
			t.Fatalf("question %s is not JSON", k)
		}
		a.requests[k] = json.RawMessage(v)
	}
	return a
}

func (a *asker) Tools(context.Context) ([]catalog.Tool, error) {
	ro := true
	return []catalog.Tool{{Server: "remote", Name: "book", Description: "Books a flight once its user says how.", Kind: trace.KindMCP,
		Annotations: catalog.Annotations{ReadOnly: &ro}}}, nil
}

func (a *asker) Call(_ context.Context, _ catalog.Tool, _ json.RawMessage, opt execution.CallOptions) (json.RawMessage, error) {
	if opt.Retry == nil {
		return nil, &execution.Question{Server: "remote", Tool: "book", Requests: a.requests, RequestState: askerState}
	}
	if opt.Retry.RequestState != askerState {
		return nil, errors.New("not the state the server issued")
	}
	a.mu.Lock()
	a.answers = append(a.answers, opt.Retry.InputResponses)
	a.mu.Unlock()
	return json.Marshal(opt.Retry.InputResponses)
}

// got is the answers of the last retry, as JSON with sorted keys.
func (a *asker) got(t *testing.T) string {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.answers) == 0 {
		return ""
	}
	return canonical(t, a.answers[len(a.answers)-1])
}

// canonical is v as JSON with sorted keys.
func canonical(t *testing.T, v any) string {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var v2 any
	if err := json.Unmarshal(raw, &v2); err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(v2)
	return string(out)
}

// askingCall calls remote.book; a declined question fails it REJECTED.
const askingCall = `return await mcp.remote.book({flight: "LH 123"})`

// answerForm is the answer form of call on page, with fields set (a nil
// value removes a field).
func answerForm(t *testing.T, page string, call, decision string, fields map[string][]string) url.Values {
	t.Helper()
	f := form(t, page, call, decision, "")
	f.Del("reason")
	for k, v := range fields {
		if v == nil {
			f.Del(k)
			continue
		}
		f[k] = v
	}
	return f
}

// TestRemoteQuestionAnsweredOnThePage: a real remote MCP server (mcp-go)
// asks before it answers a script's call; the execution waits, and the
// local person reads the server's question on the page — its message,
// who asks, each field with its title, type and default — and answers it
// in the form. The answer goes to the server with the state it issued,
// the script gets the server's result, and the trace records the answer
// as the person's, via the page.
func TestRemoteQuestionAnsweredOnThePage(t *testing.T) {
	ask, err := askserver.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ask.Close() })
	pool, err := new(mcpkind.Kind).NewSet(context.Background(), toolsource.Env{Logger: slog.New(slog.DiscardHandler)}, mcpkind.Config{Config: toolsource.Config{Name: "ask"}, URL: ask.URL, Transport: "streamable"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pool.Close() })
	e := newEnv(t, nil, pool)
	id := e.suspend(`return await mcp.ask.confirm_delete({item: "report"})`)

	b := e.browser()
	e.signInLocal(b)
	if _, list := b.get(e.srv.URL + "/approvals"); !strings.Contains(list, "#1 ask.confirm_delete (its server asks a question)") || !strings.Contains(list, "answer or decline") {
		t.Fatalf("list: %s", list)
	}
	status, page := b.get(e.srv.URL + "/approvals/" + id)
	if status != 200 {
		t.Fatalf("page: %d %s", status, page)
	}
	for _, want := range []string{
		"The MCP server <q>ask</q> asks, before it answers this call",
		fmt.Sprintf(askserver.Question, "report"),
		"<strong>Delete it?</strong> <code>confirmed</code> · boolean · required",
		`name="a.0.confirmed" value="true"`,
		`<code>note</code> · string</label>`,
		`name="a.0.note" id="a-1-0-1" value="none"`, // the server's default
		`id="answer-1"`, `id="decline-1"`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(strings.ToLower(page), "<script") || strings.Contains(page, "ask-") {
		t.Errorf("the page sends a script, or the server's state")
	}
	status, done := b.post(e.srv.URL+"/approvals/"+id, answerForm(t, page, "1", "answer", map[string][]string{"a.0.confirmed": {"true"}, "a.0.note": {"by the page"}}))
	if status != 200 || !strings.Contains(done, "You answered the question call #1") || !strings.Contains(done, "succeeded") {
		t.Fatalf("answer: %d %s", status, done)
	}
	r := ask.Retries()
	if len(r) != 1 || !r[0].Known || r[0].Item != "report" || r[0].Answer.Action != mcp.ElicitationResponseActionAccept ||
		canonical(t, r[0].Answer.Content) != `{"confirmed":true,"note":"by the page"}` {
		t.Fatalf("the server got %+v", r)
	}
	ex, _, err := e.sink.GetExecution(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	last := ex.Events[len(ex.Events)-1]
	if last.Type != trace.EventResume || last.Via != trace.ViaPage || last.Principal != approvalpage.LocalPrincipal || last.Decisions[0].Decision != "answer" {
		t.Fatalf("trace event %+v", last)
	}
}

// bookingSchema asks for every kind of field MCP's questions define.
const bookingSchema = `{"type": "object", "properties": {
  "name": {"type": "string", "title": "Your name", "description": "as on your badge", "minLength": 2, "maxLength": 20},
  "email": {"type": "string", "format": "email", "title": "E-mail"},
  "seats": {"type": "integer", "title": "Seats", "minimum": 1, "maximum": 4, "default": 2},
  "class": {"type": "string", "title": "Class", "oneOf": [{"const": "eco", "title": "Economy"}, {"const": "biz", "title": "Business"}]},
  "meals": {"type": "array", "title": "Meals", "items": {"type": "string", "enum": ["veg", "fish"]}, "maxItems": 1},
  "window": {"type": "boolean", "title": "Window seat", "default": true}
}, "required": ["name", "class"]}`

// TestAnswersCheckedAgainstTheServersSchema: the page shows each field of
// the server's requested schema as a form field (titles, descriptions,
// constraints, choices, defaults), and an answer the schema refuses is
// not sent: the page comes back with what was wrong, field by field, and
// what the person typed. Fields and questions the server did not ask are
// dropped. The answer that fits reaches the server as typed, once.
func TestAnswersCheckedAgainstTheServersSchema(t *testing.T) {
	a := newAsker(t, map[string]string{"form": `{"message": "Book LH 123 for the agent?\u202e <b>now</b>", "requestedSchema": ` + bookingSchema + `}`})
	e := newEnv(t, nil, a)
	id := e.suspend(askingCall)
	b := e.browser()
	e.signInLocal(b)
	execURL := e.srv.URL + "/approvals/" + id
	_, page := b.get(execURL)
	for _, want := range []string{
		`Book LH 123 for the agent?\u202e &lt;b&gt;now&lt;/b&gt;`, // the message as text, its override shown
		"<strong>Your name</strong> <code>name</code> · string · required · at least 2 characters · at most 20 characters",
		"as on your badge",
		`type="email" name="a.0.email"`,
		`type="number" step="1" name="a.0.seats" id="a-1-0-2" value="2" min="1" max="4"`,
		`<option value="0">Economy (eco)</option>`,
		`<option value="1">Business (biz)</option>`,
		`type="checkbox" name="a.0.meals" value="1" id="a-1-0-4-1"> fish`,
		`name="a.0.window" value="true" id="a-1-0-5-yes" checked`,
		"The server's requested schema",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(page[strings.Index(page, "<main>"):])
	}
	// The fields in the server's order, not by name.
	if i := []int{strings.Index(page, `name="a.0.name"`), strings.Index(page, `name="a.0.email"`), strings.Index(page, `name="a.0.seats"`),
		strings.Index(page, `name="a.0.class"`), strings.Index(page, `name="a.0.meals"`), strings.Index(page, `name="a.0.window"`)}; !slices.IsSorted(i) || i[0] < 0 {
		t.Errorf("the fields are not in the server's order: at %v", i)
	}
	if strings.ContainsRune(page, '\u202e') || strings.Contains(page, "<b>now") {
		t.Errorf("the message is not shown as text")
	}

	for name, tc := range map[string]struct {
		fields map[string][]string
		want   []string
	}{
		"too short, too many, no class": {map[string][]string{"a.0.name": {"x"}, "a.0.seats": {"9"}},
			[]string{"Your name (name):", "Seats (seats):", `missing property &#39;class&#39;`, `value="x"`, `value="9"`}},
		"not a number":          {map[string][]string{"a.0.name": {"Ada"}, "a.0.class": {"0"}, "a.0.seats": {"two"}}, []string{"Seats (seats): is not a whole number"}},
		"not a choice":          {map[string][]string{"a.0.name": {"Ada"}, "a.0.class": {"7"}}, []string{"Class (class): is not one of the choices"}},
		"too many meals":        {map[string][]string{"a.0.name": {"Ada"}, "a.0.class": {"0"}, "a.0.meals": {"0", "1"}}, []string{"Meals (meals):"}},
		"a yes that is not one": {map[string][]string{"a.0.name": {"Ada"}, "a.0.class": {"0"}, "a.0.window": {"maybe"}}, []string{"Window seat (window): is neither yes nor no"}},
	} {
		status, body := b.post(execURL, answerForm(t, page, "1", "answer", tc.fields))
		if status != http.StatusBadRequest || !strings.Contains(body, "Your answer was not sent") {
			t.Errorf("%s: %d, want 400 and the page again", name, status)
			continue
		}
		for _, want := range tc.want {
			if !strings.Contains(body, want) {
				t.Errorf("%s: the page lacks %q", name, want)
			}
		}
	}
	if got := a.got(t); got != "" {
		t.Fatalf("a refused answer reached the server: %s", got)
	}
	if _, ferr := e.svc.Waiting(context.Background(), id); ferr != nil {
		t.Fatalf("the execution stopped waiting: %v", ferr)
	}

	good := answerForm(t, page, "1", "answer", map[string][]string{"a.0.name": {"Ada"}, "a.0.email": {"ada@example.com"}, "a.0.seats": {"3"},
		"a.0.class": {"1"}, "a.0.meals": {"0"}, "a.0.window": {"false"}, "a.0.extra": {"not asked"}, "a.1.name": {"no such question"}})
	status, body := b.post(execURL, good)
	if status != 200 || !strings.Contains(body, "succeeded") {
		t.Fatalf("the answer that fits: %d %s", status, body)
	}
	want := `{"form":{"action":"accept","content":{"class":"biz","email":"ada@example.com","meals":["veg"],"name":"Ada","seats":3,"window":false}}}`
	if got := a.got(t); got != want {
		t.Fatalf("the server got %s, want %s", got, want)
	}
	// Sent again, it finds nothing waiting (as for any id the person
	// does not decide: nothing tells them apart).
	if status, body := b.post(execURL, good); status != http.StatusNotFound || !strings.Contains(body, "decided already") {
		t.Fatalf("the same answer again: %d, want 404", status)
	}
	if a.mu.Lock(); len(a.answers) != 1 {
		t.Errorf("the server was answered %d times", len(a.answers))
	}
	a.mu.Unlock()
}

// TestURLModeQuestionOnThePage: a server that asks its user to open a
// page of its own is shown as a link, with the address whole and its host
// apart; done answers it (accept, no content), decline makes the call
// fail REJECTED. An address the page must not link to is shown as text.
func TestURLModeQuestionOnThePage(t *testing.T) {
	a := newAsker(t, map[string]string{"link": `{"mode": "url", "message": "Link your account to book", "url": "https://auth.example.com/link?session=1", "elicitationId": "e-1"}`})
	e := newEnv(t, nil, a)
	b := e.browser()
	e.signInLocal(b)

	id := e.suspend(askingCall)
	_, page := b.get(e.srv.URL + "/approvals/" + id)
	for _, want := range []string{
		`href="https://auth.example.com/link?session=1" rel="noopener noreferrer"`,
		`<strong id="url-host-1-0">auth.example.com</strong>`,
		"Link your account to book", "Done: I opened it",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if status, body := b.post(e.srv.URL+"/approvals/"+id, answerForm(t, page, "1", "answer", nil)); status != 200 || !strings.Contains(body, "succeeded") {
		t.Fatalf("done: %d %s", status, body)
	}
	if got := a.got(t); got != `{"link":{"action":"accept"}}` {
		t.Fatalf("the server got %s", got)
	}

	id = e.suspend(askingCall)
	_, page = b.get(e.srv.URL + "/approvals/" + id)
	if status, body := b.post(e.srv.URL+"/approvals/"+id, answerForm(t, page, "1", "decline", nil)); status != 200 || !strings.Contains(body, "You declined") ||
		!strings.Contains(body, "failed: REJECTED") {
		t.Fatalf("decline: %d %s", status, body)
	}

	lookalike := newAsker(t, map[string]string{"link": `{"mode": "url", "message": "Sign in", "url": "https://p\u0430ypal.example/login"}`})
	l := newEnv(t, nil, lookalike)
	lb := l.browser()
	l.signInLocal(lb)
	_, page = lb.get(l.srv.URL + "/approvals/" + l.suspend(askingCall))
	if !strings.Contains(page, "p\u0430ypal.example (xn--pypal-4ve.example)</strong>") {
		t.Fatalf("a look-alike host is not shown as its DNS name:\n%s", page)
	}

	hostile := newAsker(t, map[string]string{"link": `{"mode": "url", "message": "Open this", "url": "javascript:alert(document.cookie)"}`})
	h := newEnv(t, nil, hostile)
	hb := h.browser()
	h.signInLocal(hb)
	_, page = hb.get(h.srv.URL + "/approvals/" + h.suspend(askingCall))
	if strings.Contains(page, `href="javascript`) || !strings.Contains(page, "not a web address this page links to") || !strings.Contains(page, "javascript:alert(document.cookie)") {
		t.Fatalf("a javascript: address is linked or hidden:\n%s", page)
	}
}

// TestQuestionsRefuseTheHostile: the execution's own principal, signed in
// on the page, may decline the server's question but not answer it (an
// answer is weighed as an approval), even with a forged form; a form
// without the session's token, an answer to a call that waits for
// approval, and a principal who decides nothing here are refused, and
// nothing reaches the server.
func TestQuestionsRefuseTheHostile(t *testing.T) {
	a := newAsker(t, map[string]string{"form": `{"message": "Book it?", "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}}`})
	e := newEnv(t, nil, a)
	id := e.suspend(askingCall)
	execURL := e.srv.URL + "/approvals/" + id

	caller := e.browser()
	if status, _ := e.signInAs(caller, "agent-7", "pw-agent"); status != 200 {
		t.Fatal("the caller could not sign in")
	}
	_, own := caller.get(execURL)
	if strings.Contains(own, `id="answer-1"`) || !strings.Contains(own, "Answering this question is not yours") || !strings.Contains(own, `id="decline-1"`) {
		t.Fatalf("the caller's own page offers an answer:\n%s", own)
	}
	status, body := caller.post(execURL, answerForm(t, own, "1", "answer", map[string][]string{"a.0.ok": {"true"}}))
	if status != http.StatusForbidden || !strings.Contains(body, "not yours") {
		t.Fatalf("the caller answering its own question: %d %s", status, body)
	}
	noToken := answerForm(t, own, "1", "answer", map[string][]string{"a.0.ok": {"true"}, "csrf": nil})
	if status, _ := caller.post(execURL, noToken); status != http.StatusForbidden {
		t.Fatalf("an answer without the token: %d", status)
	}
	bob := e.browser()
	e.signInAs(bob, "bob", "pw-bob")
	if status, body := bob.get(execURL); status != http.StatusNotFound || strings.Contains(body, "Book it?") {
		t.Fatalf("a stranger reads the question: %d", status)
	}
	if status, _ := bob.post(execURL, answerForm(t, own, "1", "answer", map[string][]string{"a.0.ok": {"true"}, "csrf": {"x"}})); status != http.StatusForbidden {
		t.Fatalf("a stranger's answer: %d", status)
	}
	if got := a.got(t); got != "" {
		t.Fatalf("the server was answered: %s", got)
	}

	// An answer to a call that waits for approval is no answer.
	approvalID := e.suspend(padded)
	person := e.browser()
	e.signInLocal(person)
	_, page := person.get(e.srv.URL + "/approvals/" + approvalID)
	if status, _ := person.post(e.srv.URL+"/approvals/"+approvalID, answerForm(t, page, "2", "answer", nil)); status != http.StatusBadRequest {
		t.Fatalf("an answer to a call waiting for approval: %d", status)
	}

	// The caller declines its own question: the call fails REJECTED.
	status, body = caller.post(execURL, answerForm(t, own, "1", "decline", nil))
	if status != 200 || !strings.Contains(body, "You rejected call #1") || !strings.Contains(body, "failed: REJECTED") || a.got(t) != "" {
		t.Fatalf("the caller declining: %d %s", status, body)
	}
	ex, _, err := e.sink.GetExecution(context.Background(), id)
	if err != nil || ex.ErrorCode != "REJECTED" {
		t.Fatalf("declined by the caller: %+v %v", ex, err)
	}
}

// TestSelfAnswer: where the deployment allows self-approval, the
// execution's own principal answers its server's question on the page.
func TestSelfAnswer(t *testing.T) {
	a := newAsker(t, map[string]string{"form": `{"message": "Book it?", "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}}}`})
	e := newEnv(t, func(p *approval.Policy) { p.SelfApproval = true }, a)
	id := e.suspend(askingCall)
	b := e.browser()
	e.signInAs(b, "agent-7", "pw-agent")
	_, page := b.get(e.srv.URL + "/approvals/" + id)
	if status, body := b.post(e.srv.URL+"/approvals/"+id, answerForm(t, page, "1", "answer", map[string][]string{"a.0.ok": {"true"}})); status != 200 {
		t.Fatalf("self-answer: %d %s", status, body)
	}
	if got := a.got(t); got != `{"form":{"action":"accept","content":{"ok":true}}}` {
		t.Fatalf("the server got %s", got)
	}
}

// TestAnswerFormNamesItsVersion: an execution waits on a question and on
// a call to approve; once the approval moved it on, the answer form of
// the page shown before is refused (the page may have shown what is no
// longer so), and the form of the page shown now is taken.
func TestAnswerFormNamesItsVersion(t *testing.T) {
	a := newAsker(t, map[string]string{"form": `{"message": "Book it?", "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}}}`})
	e := newEnv(t, nil, a)
	id := e.suspend(`await mcp.demo.kv_set({key: "a", value: 1});
const [booked, deleted] = await Promise.all([mcp.remote.book({}), mcp.demo.kv_delete({key: "a"})]);
return {booked, deleted};`)
	b := e.browser()
	e.signInLocal(b)
	execURL := e.srv.URL + "/approvals/" + id
	if _, list := b.get(e.srv.URL + "/approvals"); !strings.Contains(list, "approve or reject, answer or decline") {
		t.Fatalf("list: %s", list)
	}
	_, before := b.get(execURL)
	if status, body := b.post(execURL, form(t, before, "3", "approve", "")); status != 200 || !strings.Contains(body, "waits again") {
		t.Fatalf("approving #3: %d %s", status, body)
	}
	status, body := b.post(execURL, answerForm(t, before, "2", "answer", map[string][]string{"a.0.ok": {"true"}}))
	if status != http.StatusConflict || !strings.Contains(body, "moved on") || a.got(t) != "" {
		t.Fatalf("the answer form of the page before: %d %s", status, body)
	}
	_, now := b.get(execURL)
	if status, body := b.post(execURL, answerForm(t, now, "2", "answer", map[string][]string{"a.0.ok": {"true"}})); status != 200 || !strings.Contains(body, "succeeded") {
		t.Fatalf("the answer form of the page now: %d %s", status, body)
	}
	if got := a.got(t); got != `{"form":{"action":"accept","content":{"ok":true}}}` {
		t.Fatalf("the server got %s", got)
	}
}
