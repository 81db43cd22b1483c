package fault

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
)

func TestAsAndWire(t *testing.T) {
	base := errors.New("socket closed")
	tests := []struct {
		name string
		err  error
		code Code
		wire string
	}{
		{"plain error is internal", base, Internal, `{"code":"INTERNAL","message":"socket closed"}`},
		{"fault kept through wrapping", fmt.Errorf("calling: %w", New(Timeout, "deadline of %s", "1s")), Timeout, `{"code":"TIMEOUT","message":"deadline of 1s"}`},
		{"limit named", Limitf(LimitMemory, "heap"), LimitExceeded, `{"code":"LIMIT_EXCEEDED","message":"heap","limit":"memory"}`},
		{"tool named", New(ToolError, "boom").WithTool("kv:get"), ToolError, `{"code":"TOOL_ERROR","message":"boom","tool":"kv:get"}`},
		{"wrap keeps the cause", Wrap(Unavailable, base, "kv"), Unavailable, `{"code":"UNAVAILABLE","message":"kv: socket closed"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fe := As(tt.err)
			if fe.Code != tt.code || CodeOf(tt.err) != tt.code {
				t.Fatalf("code %s, want %s", fe.Code, tt.code)
			}
			b, _ := json.Marshal(fe)
			if string(b) != tt.wire {
				t.Fatalf("wire %s, want %s", b, tt.wire)
			}
		})
	}
	if !errors.Is(Wrap(Unavailable, base, ""), base) {
		t.Fatal("Wrap lost its cause")
	}
	if As(nil) != nil || CodeOf(nil) != "" {
		t.Fatal("nil is not an error")
	}
}
