package guest

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/pml-sandbox/pml/internal/fault"
)

// The host treats every value from the guest as untrusted: a tool number
// it never handed out, or an unreadable error document, gives a clean
// error, never a panic.
func TestGuestValuesAreUntrusted(t *testing.T) {
	newX := func() *execution {
		return &execution{req: &Request{Tools: DemoTools(), Host: DemoHost{}}, limits: DefaultLimits(), ctx: context.Background()}
	}
	for _, index := range []int32{4, 999, -5, -1 << 31} {
		x := newX()
		id := x.startCall(index, []byte("{}"), 0, 0)
		if len(x.ready) != 1 || x.ready[0].id != id || x.ready[0].ok || x.ready[0].fault.Code != fault.ToolNotFound {
			t.Fatalf("tool %d: %+v", index, x.ready)
		}
		if len(x.calls) != 0 {
			t.Fatalf("tool %d was traced as a call: %+v", index, x.calls)
		}
	}
	for _, doc := range []string{"", "{", "[]", `{"code": 5}`, `{"message": "no code"}`} {
		x := newX()
		id := x.registerFault([]byte(doc))
		if e := x.delivered[id]; e == nil || e.Code != fault.SandboxError {
			t.Fatalf("fault %q registered as %+v", doc, e)
		}
	}
	x := newX()
	for _, report := range []string{`[]`, `{"host_error": "x", "code": "TIMEOUT"}`, `{"host_error": 7, "code": "TIMEOUT"}`, `{"code": ""}`} {
		e := x.verifyFailure(json.RawMessage(report))
		if e.Code == fault.Timeout || e.Code == "" {
			t.Fatalf("report %s became %+v", report, e)
		}
	}
}

// jsonDepth counts only the brackets of arrays and objects: those inside
// strings, escaped quotes included, do not count.
func TestJSONDepth(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{``, 0},
		{`1`, 0},
		{`"[[["`, 0},
		{`[]`, 1},
		{`[[], {}]`, 2},
		{`{"a":[{"b":[]}]}`, 4},
		{`["\"[[", 1]`, 1},
		{`["\\", [1]]`, 2},
		{`["\\\"[", {"k\"{": [[]]}]`, 4},
		{`{"a":"]]]]"} `, 1},
	}
	for _, tt := range tests {
		if got := jsonDepth([]byte(tt.in)); got != tt.want {
			t.Errorf("jsonDepth(%s) = %d, want %d", tt.in, got, tt.want)
		}
	}
}
