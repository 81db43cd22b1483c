package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/testutil/lambdaemu"
	"github.com/pml-sandbox/pml/internal/testutil/xraylisten"
)

// ordersARN is the user function's ARN in the server list (the emulator
// routes an ARN to the function its name ends with).
const ordersARN = "arn:aws:lambda:us-east-1:123456789012:function:orders"

// TestLambdaTools: a user's Lambda function as a tool of the deployed
// shape: the execute binary, behind the Lambda emulator, invokes the
// user's function binary through the Invoke API with the function's own
// (here, local) credentials; one tool described by the function's tags,
// one by the configuration; the function's error is a TOOL_ERROR with its
// type and message; bad arguments and an unapproved destructive call never
// reach it; the calls are traced to DynamoDB and X-Ray as MCP calls are.
func TestLambdaTools(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "ordersfn")
	build := exec.Command("go", "build", "-o", bin, "./integration/testdata/ordersfn")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building ordersfn: %v\n%s", err, out)
	}
	log := filepath.Join(dir, "orders.log")
	server := fmt.Sprintf(`{"name": "orders", "type": "lambda", "allow_destructive": true, "functions": [
	  {"name": "get_order", "function": %q, "read_only": true},
	  {"name": "cancel_order", "function": "orders", "description": "Cancel an order.",
	   "input_schema": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}}]}`, ordersARN)
	s := newStackWith(t, stackOptions{servers: []string{server}, more: []lambdaemu.Function{{
		Name: "orders", Binary: bin, Env: []string{"ORDERS_LOG=" + log},
		Tags: map[string]string{
			"pml:description":  "Get an order by its id.",
			"pml:input_schema": `{"type":"object","properties":{"id":{"type":"integer","minimum":0}},"required":["id"],"additionalProperties":false}`,
		},
	}}})
	invocations := func() int {
		data, _ := os.ReadFile(log)
		return strings.Count(string(data), "\n")
	}
	const traceRoot = "1-67a1b2c3-0123456789abcdef01234567"
	traceHeader := "Root=" + traceRoot + ";Parent=53995c3f42cd8ad8;Sampled=1"
	exec := func(code string) (int, map[string]any, string) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"code": code})
		resp, r := decodeHTTP(t, s.invoke(t, "execute", httpEvent("POST", "/execute", string(body)), traceHeader))
		var result map[string]any
		_ = json.Unmarshal(r.Result, &result)
		return resp.StatusCode, result, r.ExecutionID
	}

	status, got, id := exec(`const o = await mcp.orders.get_order({id: 7});
		let failed;
		try { await mcp.orders.get_order({id: 0}) } catch (e) { failed = {code: e.code, message: e.message} }
		const refused = [];
		for (const args of [{id: "seven"}, {id: -1}, {}]) {
		  try { await mcp.orders.get_order(args) } catch (e) { refused.push(e.code) }
		}
		let cancel;
		try { await mcp.orders.cancel_order({id: 7}) } catch (e) { cancel = e.code }
		const list = (await tools.list()).filter(t => t.server === "orders").map(t => t.name + ": " + (t.description || ""));
		return {o, failed, refused, cancel, list}`)
	if status != 200 {
		t.Fatalf("status %d, %v", status, got)
	}
	want := map[string]any{
		"o":       map[string]any{"id": 7.0, "status": "shipped"},
		"failed":  map[string]any{"code": "TOOL_ERROR", "message": "function error OrderNotFound: no order 0"},
		"refused": []any{"INVALID_ARGUMENTS", "INVALID_ARGUMENTS", "INVALID_ARGUMENTS"},
		"cancel":  "FORBIDDEN",
		"list":    []any{"cancel_order: Cancel an order.", "get_order: Get an order by its id."},
	}
	gotJSON, _ := json.Marshal(got)
	wantJSON, _ := json.Marshal(want)
	if string(gotJSON) != string(wantJSON) {
		t.Fatalf("got  %s\nwant %s", gotJSON, wantJSON)
	}
	if n := invocations(); n != 2 {
		t.Errorf("the function ran %d times, want 2 (the refused calls must not reach it)", n)
	}

	// Traced as any tool call: in DynamoDB, and in X-Ray under the
	// caller's trace.
	ex, calls, err := s.traces.GetExecution(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var ok, failedCall int
	for _, c := range calls {
		if c.Server == "orders" && c.Tool == "get_order" {
			switch {
			case c.OK:
				ok++
			case c.ErrorCode == "TOOL_ERROR":
				failedCall++
			}
		}
	}
	if ok != 1 || failedCall != 1 {
		t.Errorf("execution %s: calls %+v", ex.ID, calls)
	}
	segs, found := s.xray.Wait(10*time.Second, func(ss []xraylisten.Segment) bool {
		for _, sg := range ss {
			if sg.TraceID == traceRoot && sg.Annotations["server"] == "orders" {
				return true
			}
		}
		return false
	})
	if !found {
		t.Errorf("no X-Ray subsegment of an orders call: %+v", segs)
	}
}
