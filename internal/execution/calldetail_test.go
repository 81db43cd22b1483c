package execution_test

import (
	"reflect"
	"testing"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/trace"
)

func TestSummarize(t *testing.T) {
	calls := []trace.Call{
		{ExecutionID: "ex_a", CallID: 1, Server: "kv", Tool: "get", OK: true},
		{ExecutionID: "ex_a", CallID: 2, Server: "kv", Tool: "get", ErrorCode: fault.Unavailable},
		{ExecutionID: "ex_child", CallID: 1, Server: "fs", Tool: "read", ErrorCode: fault.Timeout},
		{ExecutionID: "ex_a", CallID: 4, Server: "*", Tool: "*", ErrorCode: fault.LimitExceeded, Count: 7},
	}
	got := execution.Summarize("ex_a", calls)
	want := &execution.CallSummary{Total: 10, Failed: 9,
		ByTool: []execution.ToolCount{{Tool: "*:*", Calls: 7, Failed: 7}, {Tool: "kv:get", Calls: 2, Failed: 1}, {Tool: "fs:read", Calls: 1, Failed: 1}},
		Failures: []execution.FailedCall{
			{CallID: 2, Tool: "kv:get", ErrorCode: fault.Unavailable},
			{ExecutionID: "ex_child", CallID: 1, Tool: "fs:read", ErrorCode: fault.Timeout},
			{CallID: 4, Tool: "*:*", ErrorCode: fault.LimitExceeded, Count: 7},
		}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Summarize:\n got %+v\nwant %+v", got, want)
	}
	var many []trace.Call
	for i := range 30 {
		many = append(many, trace.Call{ExecutionID: "ex_a", CallID: i + 1, Server: "s", Tool: "t", ErrorCode: fault.ToolError})
	}
	if s := execution.Summarize("ex_a", many); len(s.Failures) != 20 || s.FailuresOmitted != 10 || s.Failed != 30 {
		t.Errorf("30 failures: %d listed, %d omitted, %d failed", len(s.Failures), s.FailuresOmitted, s.Failed)
	}
}
