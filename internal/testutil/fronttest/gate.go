package fronttest

import (
	"context"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/approvalpage"
	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/runs"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/tracedb"
)

// Gate is the deployed gate in one process: the deployed policy (the
// caller decides nothing, no client is trusted with a form), the person
// at the keyboard an approver on the approval page, executions kept as
// runs; every request to URL comes from Agent.
type Gate struct {
	URL    string
	Exec   *runs.Service
	Page   *approvalpage.Page
	Key    approval.Key
	Policy approval.Policy
	Log    *slog.Logger
	Links  *approvalpage.LocalLinks
	Sink   *tracedb.Memory
}

// NewGate builds the gate on engine over the demo tools and sources, and
// serves what front builds over it (the front's handler, which serves the
// page's routes too).
func NewGate(t *testing.T, engine *guest.Engine, front func(*Gate) http.Handler, sources ...execution.ToolSource) *Gate {
	t.Helper()
	g := &Gate{Log: slog.New(slog.NewTextHandler(TestWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Policy: approval.Policy{Approvers: []string{approvalpage.LocalPrincipal}}, Links: approvalpage.NewLocalLinks(), Sink: tracedb.NewMemory(0)}
	dir := t.TempDir()
	sources = append([]execution.ToolSource{demoserver.Source{Set: demoserver.New()}}, sources...)
	svc := executor.New(engine, executor.Options{Sources: sources, Logger: g.Log, Sink: g.Sink,
		Suspensions: suspend.NewFile(filepath.Join(dir, "susp"), suspend.Options{}), Policy: g.Policy})
	g.Exec = runs.New(svc, runs.Options{Store: suspend.NewFileRuns(filepath.Join(dir, "runs"), suspend.Options{}), Policy: g.Policy, Logger: g.Log})
	t.Cleanup(func() { _ = g.Exec.Close(context.Background()) })
	var err error
	if g.Key, err = approval.LoadKeyFile(filepath.Join(dir, "key")); err != nil {
		t.Fatal(err)
	}
	if g.Page, err = approvalpage.New(approvalpage.Options{Service: g.Exec, Lister: svc, Policy: g.Policy, Key: g.Key, Links: g.Links, Logger: g.Log}); err != nil {
		t.Fatal(err)
	}
	g.URL = ServeAs(t, front(g), Agent).URL
	return g
}

var (
	csrfField    = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	versionField = regexp.MustCompile(`name="version" value="(\d+)"`)
	continueLink = regexp.MustCompile(`id="continue" href="([^"]+)"`)
)

// ApproveOnPage is the person: signs in with a fresh one-time link and
// takes decision on call of the execution at pageURL, and reports the
// page's status.
func (g *Gate) ApproveOnPage(t *testing.T, pageURL, call, decision string) int {
	return g.OnPage(t, pageURL, url.Values{"call": {call}, "decision": {decision}})
}

// OnPage is the person: signs in with a fresh one-time link, opens the
// page at pageURL and posts its form with fields, and reports the page's
// status.
func (g *Gate) OnPage(t *testing.T, pageURL string, fields url.Values) int {
	jar, _ := cookiejar.New(nil)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	b := &http.Client{Jar: jar, Transport: tr}
	// Signed in, the landing page's link opens pageURL with the
	// session's key, as the page's own links carry it.
	u, err := url.Parse(pageURL)
	if err != nil {
		t.Error(err)
		return 0
	}
	resp, err := b.Get(g.URL + "/approvals/signin?link=" + g.Links.Mint() + "&next=" + url.QueryEscape(u.Path))
	if err != nil {
		t.Error(err)
		return 0
	}
	landing, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	next := continueLink.FindSubmatch(landing)
	if next == nil {
		t.Errorf("no link on the landing page: %s", landing)
		return 0
	}
	resp, err = b.Get(g.URL + html.UnescapeString(string(next[1])))
	if err != nil {
		t.Error(err)
		return 0
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	c, v := csrfField.FindSubmatch(page), versionField.FindSubmatch(page)
	if c == nil || v == nil {
		t.Errorf("no form on %s: %s", pageURL, page)
		return 0
	}
	form := url.Values{"csrf": {string(c[1])}, "version": {string(v[1])}}
	for k, vs := range fields {
		form[k] = vs
	}
	resp, err = b.PostForm(pageURL, form)
	if err != nil {
		t.Error(err)
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
