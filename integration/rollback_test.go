package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/testutil/ledger"
	"github.com/pml-sandbox/pml/internal/testutil/mcptest"
	mcpkind "github.com/pml-sandbox/pml/internal/toolsource/mcp"
)

// shopConfig writes a server list naming the ledger as server "shop",
// with the undo of each write declared as a deployment would.
func shopConfig(t *testing.T, url string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "servers.yaml")
	doc := fmt.Sprintf(`servers:
  - name: shop
    url: %s
    transport: streamable
    compensate:
      create_order: {tool: cancel_order, args: {order_id: "$.result.id"}}
      set_price: {tool: set_price, args: {item: "$.args.item", price: "$.result.previous"}}
`, url)
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// threeOrders opens three orders, the middle one for an item whose order
// cannot be cancelled once made.
const threeOrders = `const ids = []
for (const item of ["apple", "stuck", "cherry"]) ids.push((await mcp.shop.create_order({item})).id)
return ids`

// rollbackDoc is the part of an execution's document these tests read.
type rollbackDoc struct {
	Rollback string             `json:"rollback"`
	Effects  []execution.Effect `json:"effects"`
}

func postRollback(t *testing.T, base, id, body string) (int, execution.Rollback, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/executions/"+id+"/rollback", strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var rb execution.Rollback
	_ = json.Unmarshal(raw, &rb)
	return resp.StatusCode, rb, string(raw)
}

// TestRollbackThroughServe: through pml serve's HTTP route, an execution's
// three applied effects are undone by three calls at the ledger, newest
// first; the one the ledger refuses leaves the others attempted, and the
// answer and the execution's document say which. A second rollback sends
// only that one again. A set is undone by setting back what its result
// says it replaced. An unknown id is 404; one that waits for a decision
// is 409.
func TestRollbackThroughServe(t *testing.T) {
	shop := ledger.Start(t)
	s := startServe(t, []string{app.EnvSuspDir + "=" + t.TempDir()}, "--config", shopConfig(t, shop.URL), "--demo", "on")
	ctx := context.Background()
	d := decodeDoc(t, post(t, ctx, s.base+"/execute", fmt.Sprintf(`{"code": %q}`, threeOrders)))
	if !d.OK || string(d.Result) != `["o-1","o-2","o-3"]` {
		t.Fatalf("%+v %s", d.Error, d.Result)
	}
	status, rb, raw := postRollback(t, s.base, d.ExecutionID, "")
	if status != 200 || rb.Status != execution.PartiallyRolledBack || rb.RollbackID == "" {
		t.Fatalf("rollback: %d %s", status, raw)
	}
	if got := shop.Calls()[3:]; !slices.Equal(got, []string{"cancel_order o-3", "cancel_order o-2", "cancel_order o-1"}) {
		t.Fatalf("the ledger saw %v", got)
	}
	if !slices.Equal(shop.Open(), []string{"o-2"}) {
		t.Fatalf("open %v", shop.Open())
	}
	if e := rb.Effects[1]; e.CallID != 2 || e.Outcome != execution.CompensationFailed || e.Error == nil || !strings.Contains(e.Error.Message, "has shipped") {
		t.Fatalf("the refused one: %+v", e)
	}
	var doc rollbackDoc
	getJSONOK(t, s.base+"/executions/"+d.ExecutionID, &doc)
	if doc.Rollback != execution.PartiallyRolledBack || len(doc.Effects) != 3 || doc.Effects[1].Compensation.Status != execution.CompensationFailed ||
		doc.Effects[0].Compensation.Status != execution.CompensationDone || doc.Effects[2].Compensation.Tool != "shop:cancel_order" {
		t.Fatalf("document %+v", doc)
	}
	// Again: only the one that failed is sent.
	if status, rb, raw = postRollback(t, s.base, d.ExecutionID, `{}`); status != 200 || rb.Status != execution.PartiallyRolledBack {
		t.Fatalf("again: %d %s", status, raw)
	}
	if got := shop.Calls()[6:]; !slices.Equal(got, []string{"cancel_order o-2"}) {
		t.Fatalf("the second rollback sent %v", got)
	}

	prices := decodeDoc(t, post(t, ctx, s.base+"/execute", `{"code": "await mcp.shop.set_price({item: 'pear', price: 3}); await mcp.shop.set_price({item: 'pear', price: 5}); return 1"}`))
	if status, rb, raw = postRollback(t, s.base, prices.ExecutionID, ""); status != 200 || rb.Status != execution.RolledBack || shop.Price("pear") != 0 {
		t.Fatalf("prices: %d %s, pear %v", status, raw, shop.Price("pear"))
	}
	if status, _, raw = postRollback(t, s.base, prices.ExecutionID, ""); status != 409 || !strings.Contains(raw, "rolled back already") {
		t.Fatalf("a third time: %d %s", status, raw)
	}

	if status, _, raw = postRollback(t, s.base, "ex_000000000000000000000000", ""); status != 404 {
		t.Fatalf("an unknown id: %d %s", status, raw)
	}
	waiting := decodeDoc(t, post(t, ctx, s.base+"/execute", `{"code": "await mcp.shop.create_order({item: 'fig'}); return await mcp.demo.kv_delete({key: 'x'})", "approval": "suspend"}`))
	if waiting.Status != "suspended" {
		t.Fatalf("not suspended: %+v", waiting)
	}
	if status, _, raw = postRollback(t, s.base, waiting.ExecutionID, ""); status != 409 || !strings.Contains(raw, "waits for decisions") {
		t.Fatalf("a waiting one: %d %s", status, raw)
	}
}

// TestRollbackOverMCP: rollback_execution at pml serve's /mcp undoes what
// execute_code did, newest first, at the ledger.
func TestRollbackOverMCP(t *testing.T) {
	shop := ledger.Start(t)
	s := startServe(t, []string{app.EnvSuspDir + "=" + t.TempDir()}, "--config", shopConfig(t, shop.URL))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := mcptest.Streamable(t, s.base+"/mcp", mcpkind.ProtocolVersion)
	call := func(name string, args map[string]any, v any) *mcp.CallToolResult {
		t.Helper()
		var req mcp.CallToolRequest
		req.Params.Name, req.Params.Arguments = name, args
		res, err := c.CallTool(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(raw, v); err != nil {
			t.Fatalf("%s: %s", name, raw)
		}
		return res
	}
	var r execution.Response
	if res := call("execute_code", map[string]any{"code": `for (const item of ["a", "b", "c"]) await mcp.shop.create_order({item}); return 1`}, &r); res.IsError {
		t.Fatalf("execute_code: %+v", r.Error)
	}
	var rb execution.Rollback
	res := call("rollback_execution", map[string]any{"execution_id": r.ExecutionID}, &rb)
	if res.IsError || rb.Status != execution.RolledBack || len(rb.Effects) != 3 {
		t.Fatalf("rollback_execution: %+v", rb)
	}
	if got := shop.Calls()[3:]; !slices.Equal(got, []string{"cancel_order o-3", "cancel_order o-2", "cancel_order o-1"}) {
		t.Fatalf("the ledger saw %v", got)
	}
	text := res.Content[0].(mcp.TextContent).Text
	if !strings.Contains(text, "rolled_back") || !strings.Contains(text, "#1 shop.create_order (applied): compensated by shop.cancel_order") {
		t.Fatalf("text %s", text)
	}
	var refused map[string]any
	if res := call("rollback_execution", map[string]any{"execution_id": r.ExecutionID}, &refused); !res.IsError || !strings.Contains(fmt.Sprint(refused), "CONFLICT") {
		t.Fatalf("again: %+v", refused)
	}
}

// TestRollbackCLI: pml rollback undoes what pml run did, over the same
// stores, newest first at the ledger; asked again it is refused.
func TestRollbackCLI(t *testing.T) {
	shop := ledger.Start(t)
	cfg := shopConfig(t, shop.URL)
	env := pmlEnv(t)
	out, code := runPML(t, env, "run", "--config", cfg, "--demo", "off", "-e", threeOrders)
	var d runDoc
	if err := json.Unmarshal([]byte(out), &d); err != nil || code != 0 || !d.OK {
		t.Fatalf("pml run: exit %d %s", code, out)
	}
	out, code = runPML(t, env, "rollback", "--config", cfg, "--demo", "off", d.ExecutionID)
	var rb execution.Rollback
	if err := json.Unmarshal([]byte(out), &rb); err != nil || code != 1 || rb.Status != execution.PartiallyRolledBack {
		t.Fatalf("pml rollback: exit %d %s", code, out)
	}
	if got := shop.Calls()[3:]; !slices.Equal(got, []string{"cancel_order o-3", "cancel_order o-2", "cancel_order o-1"}) {
		t.Fatalf("the ledger saw %v", got)
	}
	out, code = runPML(t, env, "trace", d.ExecutionID)
	if code != 0 || !strings.Contains(out, `"rollback": "partially_rolled_back"`) {
		t.Fatalf("pml trace: exit %d %s", code, out)
	}
	if out, code = runPML(t, env, "rollback", "--config", cfg, "--demo", "off", "ex_000000000000000000000000"); code != 1 || !strings.Contains(out, "NOT_FOUND") {
		t.Fatalf("an unknown id: exit %d %s", code, out)
	}
}

// TestRollbackInBrowser: in headless Chromium, the person at pml serve's
// keyboard (signed in with the link it printed) opens an execution that
// waits on a destructive call, reads what it did and the call that would
// undo each effect, and clicks "Reject all and roll back": the pending
// call never runs, the two orders are cancelled newest first at the
// ledger, and the execution's document reads rolled_back.
func TestRollbackInBrowser(t *testing.T) {
	shop := ledger.Start(t)
	dir := t.TempDir()
	srv := startServe(t, []string{app.EnvSuspDir + "=" + filepath.Join(dir, "suspended"), app.EnvApprovalKeyFile + "=" + filepath.Join(dir, "approval.key")},
		"--config", shopConfig(t, shop.URL), "--demo", "on", "--caller-decides", "off")
	status, doc := postJSON(t, srv.base+"/execute", `{"code": `+jsonString(`await mcp.shop.create_order({item: "apple"}); await mcp.shop.create_order({item: "cherry"});
return await mcp.demo.kv_delete({key: "k"})`)+`, "approval": "suspend"}`)
	id, _ := doc["execution_id"].(string)
	if status != http.StatusAccepted || id == "" {
		t.Fatalf("suspend: %d %+v", status, doc)
	}
	link := ""
	linkRE := regexp.MustCompile(`sign in once with (http://\S+/approvals/signin\?link=[A-Za-z0-9_-]+)`)
	for deadline := time.After(30 * time.Second); link == ""; {
		select {
		case l := <-srv.lines:
			if m := linkRE.FindStringSubmatch(l); m != nil {
				link = m[1]
			}
		case <-deadline:
			t.Fatal("pml serve printed no sign-in link")
		}
	}
	ctx := newBrowser(t)
	browse(t, ctx, "sign in with the link", chromedp.Navigate(link), visible("#waiting"))
	browse(t, ctx, "open the execution from the list", click(`a[href^="/approvals/`+id+`?"]`), visible("#effects"))
	undo1, undo2 := textOf(t, ctx, "#undo-1"), textOf(t, ctx, "#undo-2")
	if !strings.Contains(undo1, `would run shop.cancel_order {"order_id":"o-1"}`) || !strings.Contains(undo2, `would run shop.cancel_order {"order_id":"o-2"}`) {
		t.Fatalf("the undo column: %q, %q", undo1, undo2)
	}
	browse(t, ctx, "reject all and roll back", click("#rollback"), visible("#rollback-outcome"))
	if h := textOf(t, ctx, "h1"); h != "Rolled back" {
		t.Fatalf("heading %q: %s", h, textOf(t, ctx, "#rollback-outcome"))
	}
	if o1, o2 := textOf(t, ctx, "#outcome-1"), textOf(t, ctx, "#outcome-2"); o1 != "compensated" || o2 != "compensated" {
		t.Fatalf("outcomes %q %q", o1, o2)
	}
	if got := shop.Calls(); !slices.Equal(got, []string{"create_order apple", "create_order cherry", "cancel_order o-2", "cancel_order o-1"}) {
		t.Fatalf("the ledger saw %v", got)
	}
	var after rollbackDoc
	getJSONOK(t, srv.base+"/executions/"+id, &after)
	if after.Rollback != execution.RolledBack {
		t.Fatalf("document %+v", after)
	}
	var ended runDoc
	getJSONOK(t, srv.base+"/executions/"+id, &ended)
	if ended.Status != "cancelled" {
		t.Fatalf("the execution was not cancelled: %+v", ended)
	}
}

// getJSONOK reads url's JSON answer into v, which must be a 200.
func getJSONOK(t *testing.T, url string, v any) {
	t.Helper()
	if status := getJSON(t, url, v); status != http.StatusOK {
		t.Fatalf("GET %s: %d", url, status)
	}
}
