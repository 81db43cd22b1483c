package executor_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
)

func TestCallDetail(t *testing.T) {
	sink := &memSink{}
	svc := demoService(sink)
	code := `for (let i = 0; i < 3; i++) await mcp.demo.add({a: i, b: 1});
try { await mcp.demo.fail({message: "no"}) } catch {}
return await mcp.demo.echo({x: 1})`
	tests := []struct {
		detail  string
		calls   bool // "calls" is in the document
		summary string
	}{
		{detail: "", calls: true},
		{detail: "full", calls: true},
		{detail: "summary", summary: `{"total":5,"failed":1,"by_tool":[{"tool":"demo:add","calls":3},{"tool":"demo:echo","calls":1},{"tool":"demo:fail","calls":1,"failed":1}],"failures":[{"call_id":4,"tool":"demo:fail","error_code":"TOOL_ERROR"}]}`},
		{detail: "none"},
	}
	for _, tc := range tests {
		t.Run(tc.detail, func(t *testing.T) {
			r := svc.Execute(context.Background(), execution.Request{Code: code, CallDetail: tc.detail})
			if !r.OK {
				t.Fatal(r.Error)
			}
			doc := map[string]json.RawMessage{}
			raw, _ := json.Marshal(r)
			_ = json.Unmarshal(raw, &doc)
			if _, ok := doc["calls"]; ok != tc.calls {
				t.Errorf("calls in the document: %v, want %v: %s", ok, tc.calls, raw)
			}
			if got := string(doc["call_summary"]); got != tc.summary {
				t.Errorf("call_summary = %s\nwant %s", got, tc.summary)
			}
			// The trace keeps every call whatever the response carries.
			if n := len(sink.calls[len(sink.calls)-1]); n != 5 {
				t.Errorf("traced %d calls, want 5", n)
			}
		})
	}
	// No calls at all is still "calls": [] by default.
	raw, _ := json.Marshal(svc.Execute(context.Background(), execution.Request{Code: "return 1"}))
	var doc map[string]json.RawMessage
	_ = json.Unmarshal(raw, &doc)
	if string(doc["calls"]) != "[]" {
		t.Errorf("calls = %s, want []", doc["calls"])
	}
	if r := svc.Execute(context.Background(), execution.Request{Code: "return 1", CallDetail: "some"}); r.Error == nil || r.Error.Code != fault.InvalidRequest {
		t.Errorf("call_detail some: %+v, want INVALID_REQUEST", r.Error)
	}
}
