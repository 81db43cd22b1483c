package approvalpage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/execution"
)

//go:embed templates/*.html templates/style.css
var files embed.FS

// style is the page's only styling, sent inline and allowed by its hash:
// the page loads nothing else, and runs no script.
var style = mustRead("templates/style.css")

// csp allows the page its own inline style (by hash) and forms posted to
// itself, and nothing else: no script, no frame, no image, no base.
var csp = "default-src 'none'; style-src '" + styleHash() + "'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

func styleHash() string {
	sum := sha256.Sum256([]byte(style))
	return "sha256-" + base64.StdEncoding.EncodeToString(sum[:])
}

func mustRead(name string) string {
	b, err := files.ReadFile(name)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// templates are parsed when a page is first rendered, not at package
// initialisation: every process that links the page (the functions, pml run)
// would otherwise pay ~0.6 ms of its start for pages most never serve.
var templates = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("").Funcs(template.FuncMap{
		"when": func(t time.Time) string {
			if t.IsZero() {
				return "unknown"
			}
			return t.UTC().Format("2006-01-02 15:04:05 UTC")
		},
		"who": who,
		// style is trusted: it is this package's own file, allowed by hash.
		"style": func() template.CSS { return template.CSS(style) },
	}).ParseFS(files, "templates/*.html"))
})

// who names a principal for people: the empty principal is pml serve's
// unauthenticated caller.
func who(principal string) string {
	switch principal {
	case "":
		return "the local caller (pml serve's callers have no principal)"
	case LocalPrincipal:
		return "the person at this server's keyboard (" + LocalPrincipal + ")"
	}
	return principal
}

// pageData is what every template gets.
type pageData struct {
	Title     string
	Message   string
	SignIn    string // a sign-in link to offer
	Next      string // where a landing page moves on to
	Principal string
	Session   *session
	CSRF      string // the session's key, for the forms
	Signout   string
	Home      string // the list, as the session opens it
	Calls     *callsList
	Groups    []group
	Exec      *execView
	Draft     *draftView
	Decided   *decided
	Rolled    *rolledView
}

// group is one provider's part of the list.
type group struct {
	Kind  string
	ID    string // the list's element id
	Items []Item
	Error string
}

func (p *Page) render(w http.ResponseWriter, r *http.Request, status int, name string, data pageData) {
	if data.Session == nil {
		// Only a request that proves its session (cookie and key) is
		// shown as signed in: the header's form carries the key.
		if s, err := p.signedIn(r); err == nil {
			data.Session = &s
		}
	}
	if data.Session != nil {
		data.CSRF = p.token(*data.Session)
		data.Signout = p.path(Prefix + "/signout")
		data.Home = p.link(*data.Session, Prefix)
	}
	var buf bytes.Buffer
	if err := templates().ExecuteTemplate(&buf, name, data); err != nil {
		p.log.ErrorContext(r.Context(), "approval page not rendered", "template", name, "err", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// execView is one suspended execution, as the person reads it.
type execView struct {
	ID, Owner      string
	Asked, Expires time.Time
	Version        int
	Action         string // the decision forms' action
	Calls          []callView
	SourceLines    int
	Source         []sourceLine // the whole script, folded
	Mine           bool         // the person is the execution's owner
	// Approvals and Questions count the calls waiting for approval and
	// those whose server asked a question.
	Approvals, Questions int
	// Plan is the script's plan: every call site of a tool that needs a
	// person, and the decisions that cover more than one call (plan.go);
	// nil when there is none to show.
	Plan *planView
	// Effects are what the execution did to the world and the way to
	// undo it (effects.go); nil when there is nothing to show.
	Effects *effectsView
}

// answerLabel is the answer button's: done, for questions that only ask
// the person to open a page.
func answerLabel(qs []questionView) string {
	for _, q := range qs {
		if !q.URLMode {
			return "Send the answer"
		}
	}
	return "Done: I opened it"
}

// answerBack is an answer the page refused, shown again with its values
// and why.
type answerBack struct {
	call     int
	form     url.Values
	problems []answerProblem
}

// callView is one pending call.
type callView struct {
	CallID       int
	Server, Tool string
	// What the catalog says of the tool now (the resumed run resolves it
	// anew): its title, description and annotations.
	Known       bool
	Title       string
	Description string
	Annotations []string
	// Args is the arguments, indented JSON, whole; Keys names each
	// top-level key with the size of its value, so none hides in the
	// scroll.
	Args      string
	ArgsBytes int
	Keys      []argKey
	// Endpoint is what the call reaches (an HTTP operation, a Lambda
	// function), where its tool's kind says; Line is its line in the
	// script (0 when it came from no line of it).
	Endpoint string
	Line     int
	// Excerpt is the script around the lines that name the tool.
	Excerpt    [][]sourceLine
	MayApprove bool
	// Grant is the form that approves the call's site for more than one
	// call (plan.go), when the person may.
	Grant *siteForm
	// Question: the call was sent, and its remote server asked Questions
	// before it would answer; MayAnswer is whether the person's answer
	// counts (else they may only decline). Problems are why the person's
	// last answer was refused (its values are back in the fields).
	Question    bool
	Questions   []questionView
	MayAnswer   bool
	Problems    []answerProblem
	AnswerLabel string
	// The answer form's action, token and version (the question's
	// template has the call alone).
	Action, CSRF string
	Version      int
}

type argKey struct {
	Name  string
	Kind  string
	Bytes int
}

type sourceLine struct {
	N     int
	Text  string
	Match bool
}

func (p *Page) executionView(ctx context.Context, s session, doc *execution.Response, back *answerBack) pageData {
	d := p.decider(s)
	tools := map[string]catalog.Tool{}
	for _, t := range p.opts.Service.Catalog(ctx) {
		tools[t.FullName()] = t
	}
	lines := splitLines(doc.Code)
	ev := &execView{ID: doc.ExecutionID, Owner: doc.Owner, Asked: doc.CreatedAt, Expires: doc.ExpiresAt, Version: doc.StateVersion,
		Action: p.path(Prefix + "/" + doc.ExecutionID), Source: lines, SourceLines: len(lines), Mine: doc.Owner == s.Principal}
	if len(doc.Effects) > 0 {
		plan := p.plan(ctx, s, doc.ExecutionID)
		ev.Effects = newEffectsView(doc.Effects, plan)
		ev.Effects.Waiting = true
		p.withRollbackForm(ev.Effects, s, doc.ExecutionID, doc.StateVersion, plan)
	}
	for _, pc := range doc.Pending {
		cv := callView{CallID: pc.CallID, Server: pc.Server, Tool: pc.Tool, ArgsBytes: len(pc.Args),
			MayApprove: p.opts.Policy.MayApprove(d, doc.Owner)}
		if t, ok := tools[pc.Server+":"+pc.Tool]; ok {
			cv.Known, cv.Title, cv.Description, cv.Annotations = true, t.Title, t.Description, annotations(t)
			cv.Endpoint = t.Endpoint.String()
		}
		cv.Line = pc.Line
		cv.Args, cv.Keys = renderArgs(pc.Args)
		cv.Excerpt = excerpt(lines, pc.Tool)
		if pc.Reason == execution.PendingQuestion {
			var sent url.Values
			if back != nil && back.call == pc.CallID {
				sent, cv.Problems = back.form, back.problems
			}
			cv.Question, cv.Questions, cv.MayAnswer = true, questionViews(pc, sent), p.opts.Policy.MayAnswer(d, doc.Owner)
			cv.Action, cv.CSRF, cv.Version, cv.AnswerLabel = ev.Action, p.token(s), ev.Version, answerLabel(cv.Questions)
			ev.Questions++
		} else {
			ev.Approvals++
		}
		ev.Calls = append(ev.Calls, cv)
	}
	ev.Plan = p.planOf(doc, s, d, tools, ev)
	for i, pc := range doc.Pending {
		ev.Calls[i].Grant = grantForm(pc, ev.Plan)
	}
	return pageData{Title: "Execution " + doc.ExecutionID, Session: &s, Exec: ev}
}

// annotations says what the tool declares of itself, and what the
// specification assumes where it says nothing.
func annotations(t catalog.Tool) []string {
	a := t.Annotations
	hint := func(name string, v *bool, def string) string {
		if v == nil {
			return name + ": not declared (" + def + ")"
		}
		return name + ": " + strconv.FormatBool(*v)
	}
	out := []string{
		hint("readOnlyHint", a.ReadOnly, "the specification assumes false"),
		hint("destructiveHint", a.Destructive, "the specification assumes true"),
		hint("idempotentHint", a.Idempotent, "the specification assumes false"),
		hint("openWorldHint", a.OpenWorld, "the specification assumes true"),
	}
	if t.RequireApproval {
		out = append(out, "require_approval: the server's configuration asks a person for every call")
	}
	return out
}

// renderArgs is the arguments as indented JSON, every character shown
// (format and control characters written as \u escapes, which mean the
// same in JSON, so no text can hide or reorder what follows it), and the
// top-level keys in order with their values' sizes.
func renderArgs(raw json.RawMessage) (string, []argKey) {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		buf.Reset()
		buf.Write(raw)
	}
	var keys []argKey
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err == nil && tok == json.Delim('{') {
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				break
			}
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				break
			}
			name, _ := k.(string)
			keys = append(keys, argKey{Name: visible(name), Kind: kindOf(v), Bytes: len(v)})
		}
	}
	return visible(buf.String()), keys
}

func kindOf(v json.RawMessage) string {
	switch v = bytes.TrimSpace(v); {
	case len(v) == 0:
		return "?"
	case v[0] == '"':
		return "string"
	case v[0] == '{':
		return "object"
	case v[0] == '[':
		return "array"
	case v[0] == 't' || v[0] == 'f':
		return "boolean"
	case v[0] == 'n':
		return "null"
	}
	return "number"
}

// visible writes the characters that do not show, or that change how
// what follows them shows (bidirectional overrides, zero-width and other
// format characters, controls other than newline), as \uXXXX.
func visible(s string) string {
	if !strings.ContainsFunc(s, hidden) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if !hidden(r) {
			b.WriteRune(r)
			continue
		}
		if r > 0xFFFF {
			r1, r2 := utf16Pair(r)
			fmt.Fprintf(&b, `\u%04x\u%04x`, r1, r2)
			continue
		}
		fmt.Fprintf(&b, `\u%04x`, r)
	}
	return b.String()
}

func hidden(r rune) bool {
	return r == utf8.RuneError || (unicode.IsControl(r) && r != '\n') || unicode.Is(unicode.Cf, r) ||
		r == '\u2028' || r == '\u2029' || unicode.Is(unicode.Zs, r) && r != ' '
}

func utf16Pair(r rune) (rune, rune) {
	r -= 0x10000
	return 0xD800 + (r>>10)&0x3FF, 0xDC00 + r&0x3FF
}

// maxSourceLine bounds one line as shown in an excerpt; the whole script
// below it shows every line whole.
const maxSourceLine = 400

func splitLines(code string) []sourceLine {
	if code == "" {
		return nil
	}
	parts := strings.Split(strings.TrimRight(code, "\n"), "\n")
	out := make([]sourceLine, len(parts))
	for i, l := range parts {
		out[i] = sourceLine{N: i + 1, Text: visible(strings.TrimRight(l, "\r"))}
	}
	return out
}

// excerptContext is how many lines an excerpt shows around a match.
const excerptContext = 3

// excerpt is the script around each line that names tool (as a word:
// mcp.server.tool, mcp.server["tool"]), as runs of lines with the matches
// marked. None when no line names it: the script reaches it dynamically,
// and the whole script is below.
func excerpt(lines []sourceLine, tool string) [][]sourceLine {
	var match []bool
	any := false
	for _, l := range lines {
		m := namesWord(l.Text, tool)
		match = append(match, m)
		any = any || m
	}
	if !any {
		return nil
	}
	var runs [][]sourceLine
	var cur []sourceLine
	last := -1
	for i := range lines {
		near := false
		for j := max(0, i-excerptContext); j <= min(len(lines)-1, i+excerptContext); j++ {
			near = near || match[j]
		}
		if !near {
			continue
		}
		if last >= 0 && i != last+1 {
			runs = append(runs, cur)
			cur = nil
		}
		l := lines[i]
		l.Match = match[i]
		if len(l.Text) > maxSourceLine {
			l.Text = l.Text[:maxSourceLine] + fmt.Sprintf("… (%d more bytes: the whole line is in the script below)", len(l.Text)-maxSourceLine)
		}
		cur = append(cur, l)
		last = i
	}
	return append(runs, cur)
}

// namesWord reports whether line holds word not inside a longer
// identifier.
func namesWord(line, word string) bool {
	if word == "" {
		return false
	}
	for i := 0; ; {
		j := strings.Index(line[i:], word)
		if j < 0 {
			return false
		}
		j += i
		before, after := j == 0 || !identChar(line[j-1]), j+len(word) == len(line) || !identChar(line[j+len(word)])
		if before && after {
			return true
		}
		i = j + 1
	}
}

func identChar(c byte) bool {
	return c == '_' || c == '$' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

// decided is the answer to a decision.
type decided struct {
	// Heading and Said say what the person decided ("Call #3 rejected",
	// "You rejected call #3 of execution ex_… (reason: …).").
	Heading, Said string
	// Outcome is what came of it; Pending what still waits.
	Outcome            string
	Pending            []string
	ExecPath, ListPath string
}

// verb is what a decision did, as the person is told.
func verb(d execution.Decision) string {
	switch {
	case d.Answers != nil && d.Approve && answersAccept(d.Answers):
		return "answered"
	case d.Answers != nil:
		return "declined"
	case d.Approve:
		return "approved"
	}
	return "rejected"
}

// answersAccept reports whether every answer accepts its question.
func answersAccept(answers map[string]json.RawMessage) bool {
	for _, a := range answers {
		var r struct {
			Action string `json:"action"`
		}
		if json.Unmarshal(a, &r) != nil || r.Action != "accept" {
			return false
		}
	}
	return true
}

func decidedView(s session, id string, call int, d execution.Decision, resp *execution.Response, execPath, listPath string) pageData {
	v := verb(d)
	said := fmt.Sprintf("You %s call #%d of execution %s", v, call, id)
	if v == "answered" || v == "declined" {
		said = fmt.Sprintf("You %s the question call #%d of execution %s waited on", v, call, id)
	}
	if !d.Approve && d.Answers == nil && d.Reason != "" {
		said += " (reason: " + d.Reason + ")"
	}
	out := &decided{Heading: fmt.Sprintf("Call #%d %s", call, v), Said: said + ".", ExecPath: execPath, ListPath: listPath}
	switch {
	case resp.Suspended():
		out.Outcome = "The execution ran on and waits again."
		for _, pc := range resp.Pending {
			out.Pending = append(out.Pending, pendingLabel(pc))
		}
	case resp.Running():
		out.Outcome = "The execution runs on."
	case resp.OK:
		out.Outcome = "The execution ran to its end and succeeded."
	case resp.Error != nil:
		out.Outcome = "The execution ran to its end and failed: " + string(resp.Error.Code) + "."
	default:
		out.Outcome = "The execution ran to its end."
	}
	return pageData{Title: out.Heading, Session: &s, Decided: out}
}

// pendingLabel names a pending call in a line: "#3 demo.kv_delete", and
// what it waits for when its server asked a question.
func pendingLabel(pc execution.Pending) string {
	l := "#" + strconv.Itoa(pc.CallID) + " " + pc.Server + "." + pc.Tool
	if pc.Reason == execution.PendingQuestion {
		l += " (its server asks a question)"
	}
	return l
}
