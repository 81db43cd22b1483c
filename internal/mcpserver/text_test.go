package mcpserver

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/trace"
)

// pending is n parked calls with the same arguments.
func pending(n int, args string) []execution.Pending {
	out := make([]execution.Pending, n)
	for i := range out {
		out[i] = execution.Pending{CallID: i + 1, Server: "demo", Tool: "kv_delete", Args: json.RawMessage(args), Reason: execution.PendingApproval}
	}
	return out
}

func TestModelTextFitsItsBudget(t *testing.T) {
	many := func(n int) []trace.Call {
		var out []trace.Call
		for i := range n {
			out = append(out, trace.Call{ExecutionID: "ex_1", CallID: i + 1, Server: "s" + strings.Repeat("é", i%7) + strconv.Itoa(i), Tool: "t", ErrorCode: fault.ToolError})
		}
		return out
	}
	logs := func(n int, line string) []trace.LogEntry {
		var out []trace.LogEntry
		for range n {
			out = append(out, trace.LogEntry{Level: "log", Message: line})
		}
		return out
	}
	big, _ := json.Marshal(strings.Repeat("日本", 50000))
	tests := []struct {
		name string
		resp execution.Response
		want []string // in the text
		cut  bool     // something was cut
	}{
		{name: "small", resp: execution.Response{OK: true, Result: json.RawMessage(`{"a":1}`), Calls: []trace.Call{}},
			want: []string{"ok (execution ex_1", "result:\n{\"a\":1}\n", "calls: none"}},
		{name: "null result", resp: execution.Response{OK: true, Result: json.RawMessage(`null`)}, want: []string{"result:\nnull\n"}},
		{name: "big multibyte result", resp: execution.Response{OK: true, Result: big}, want: []string{"bytes of the result cut"}, cut: true},
		{name: "huge error", resp: execution.Response{Error: &fault.Error{Code: fault.ScriptError, Message: strings.Repeat("m", 90000), Stack: strings.Repeat("  at x (main.js:1:1)\n", 3000)}},
			want: []string{"failed: SCRIPT_ERROR", "error: mmm", "of the error cut"}, cut: true},
		{name: "many failing tools", resp: execution.Response{OK: true, Result: json.RawMessage(`1`), Calls: many(5000)}, want: []string{"calls: 5000, 5000 failed", "of the call summary cut"}, cut: true},
		{name: "summary only", resp: execution.Response{OK: true, Result: json.RawMessage(`1`), CallSummary: execution.Summarize("ex_1", many(30))}, want: []string{"… and 10 more failed calls"}},
		{name: "no call detail", resp: execution.Response{OK: true, Result: json.RawMessage(`1`)}},
		{name: "flood of logs", resp: execution.Response{OK: true, Result: json.RawMessage(`1`), Logs: logs(10000, "ünïcödé line")},
			want: []string{"console (10000 lines)", "of the console output cut"}, cut: true},
		{name: "suspended", resp: execution.Response{Status: execution.StatusSuspended, Result: json.RawMessage(`null`), Calls: []trace.Call{{CallID: 1, Server: "demo", Tool: "kv_get"}},
			Pending: []execution.Pending{{CallID: 2, Server: "demo", Tool: "kv_delete", Args: json.RawMessage(`{"key":"k"}`), Reason: execution.PendingApproval}}, ExpiresAt: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)},
			want: []string{"suspended: 1 call awaits approval (execution ex_1", "until 2030-01-02T03:04:05Z", "#2 demo:kv_delete {\"key\":\"k\"}\n",
				`resume_execution {"execution_id": "ex_1", "decisions": {"2": "approve"}}`, "REJECTED", "calls: 1"}},
		{name: "suspended on many big calls", resp: execution.Response{Status: execution.StatusSuspended, Pending: pending(40, string(big))},
			want: []string{"suspended: 40 calls await approval", "#1 demo:kv_delete \"日本", "#40 demo:kv_delete \"日本", "of 300000 bytes cut]", `"decisions": {"1": "approve"}`}},
		{name: "everything at once", resp: execution.Response{OK: true, Result: big, Logs: logs(3000, strings.Repeat("z", 100)), Calls: many(900)},
			want: []string{"of the result cut", "of the console output cut"}, cut: true},
	}
	for _, tc := range tests {
		for _, budget := range []int{0, 1024, 3000, DefaultTextBytes, 1 << 20} {
			tc.resp.ExecutionID = "ex_1"
			text := modelText(&tc.resp, budget, true)
			if limit := max(budget, minTextBytes); len(text) > limit {
				t.Errorf("%s, budget %d: %d bytes", tc.name, budget, len(text))
			}
			if !utf8.ValidString(text) {
				t.Errorf("%s, budget %d: a character was split", tc.name, budget)
			}
			if tc.resp.Status == execution.StatusSuspended && !strings.Contains(text, "call resume_execution {") {
				t.Errorf("%s, budget %d: the text does not say how to resume:\n%s", tc.name, budget, text)
			}
			if budget == DefaultTextBytes {
				for _, w := range tc.want {
					if !strings.Contains(text, w) {
						t.Errorf("%s: lacks %q:\n%.2000s", tc.name, w, text)
					}
				}
				if cut := strings.Contains(text, "structuredContent has all of it"); cut != tc.cut {
					t.Errorf("%s: cut = %v, want %v", tc.name, cut, tc.cut)
				}
			}
		}
	}
}
