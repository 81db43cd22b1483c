package xraysink_test

import (
	"context"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/testutil/xraylisten"
	"github.com/pml-sandbox/pml/internal/trace"
	"github.com/pml-sandbox/pml/internal/xraysink"
)

func record(header string) (trace.Execution, []trace.Call) {
	now := time.Now()
	ex := trace.Execution{ID: "ex_1", Status: "error", ErrorCode: fault.ToolError, StartedAt: now, DurationMS: 12, TraceHeader: header, Calls: 2}
	calls := []trace.Call{
		{ExecutionID: "ex_1", CallID: 1, Server: "kv", Tool: "get", OK: true, StartedAt: now.Add(time.Millisecond), DurationMS: 3, ArgsBytes: 5, ResultBytes: 9},
		{ExecutionID: "ex_1", CallID: 2, Server: "kv", Tool: "put", OK: false, ErrorCode: fault.ToolError, StartedAt: now.Add(5 * time.Millisecond), DurationMS: 4},
		{ExecutionID: "ex_child", CallID: 1, Server: "x", Tool: "y", OK: true, StartedAt: now},
	}
	return ex, calls
}

func TestSegments(t *testing.T) {
	tests := []struct {
		name, header      string
		wantType          string
		wantTrace, parent string
	}{
		{"plain: a segment of its own", "", "", "", ""},
		{"lambda: a subsegment of the function's segment", "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1", "subsegment", "1-5759e988-bd862e3fe1be46a994272793", "53995c3f42cd8ad8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := xraylisten.Start(t)
			t.Setenv("AWS_XRAY_DAEMON_ADDRESS", l.Addr())
			s, err := xraysink.New("pml-sandbox")
			if err != nil {
				t.Fatal(err)
			}
			ex, calls := record(tt.header)
			s.Record(context.Background(), ex, calls)
			segs, ok := l.Wait(3*time.Second, func(s []xraylisten.Segment) bool { return len(s) >= 3 })
			if !ok {
				t.Fatalf("received %d documents", len(segs))
			}
			root := segs[0]
			if root.Type != tt.wantType || root.ParentID != tt.parent || root.TraceID == "" || root.EndTime <= root.StartTime {
				t.Fatalf("root %+v", root)
			}
			if tt.wantTrace != "" && root.TraceID != tt.wantTrace {
				t.Fatalf("trace id %s, want %s", root.TraceID, tt.wantTrace)
			}
			if root.Annotations["execution_id"] != "ex_1" || root.Annotations["error_code"] != "TOOL_ERROR" || !root.Error {
				t.Fatalf("root annotations %+v", root.Annotations)
			}
			if len(segs) != 3 {
				t.Fatalf("%d documents: the child execution's call must not be emitted here", len(segs))
			}
			for i, want := range []struct {
				tool string
				ok   bool
			}{{"get", true}, {"put", false}} {
				sub := segs[1+i]
				if sub.Name != "kv:"+want.tool || sub.Annotations["server"] != "kv" || sub.Annotations["tool"] != want.tool || sub.Annotations["ok"] != want.ok || sub.TraceID != root.TraceID {
					t.Fatalf("subsegment %d: %+v", i, sub)
				}
			}
		})
	}
	t.Run("not sampled: nothing sent", func(t *testing.T) {
		l := xraylisten.Start(t)
		t.Setenv("AWS_XRAY_DAEMON_ADDRESS", l.Addr())
		s, _ := xraysink.New("pml-sandbox")
		ex, calls := record("Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=0")
		s.Record(context.Background(), ex, calls)
		if segs, got := l.Wait(300*time.Millisecond, func(s []xraylisten.Segment) bool { return len(s) > 0 }); got {
			t.Fatalf("sent %d documents for an unsampled trace", len(segs))
		}
	})
}
