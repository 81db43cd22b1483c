package guest

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestConfigDefaultsAreTheSnapshots: a request asking for nothing gets no
// configuration, and the guest then runs with the caps its snapshot holds,
// which must be the host's defaults (the glue's and the prelude's sources
// say what the snapshot holds).
func TestConfigDefaultsAreTheSnapshots(t *testing.T) {
	limits := DefaultLimits()
	if cfg, ferr := encodeConfig(Request{Code: "return 1"}, limits); ferr != nil || cfg != nil {
		t.Fatalf("a request of defaults got configuration %q (%v)", cfg, ferr)
	}
	if limits.InFlight != guestInFlight {
		t.Fatalf("default in-flight cap %d, the snapshot's %d", limits.InFlight, guestInFlight)
	}
	for file, want := range map[string]string{
		"../../guest-runtime/glue.c":     fmt.Sprintf("static int32_t inflight_cap = %d;", guestInFlight),
		"../../guest-runtime/prelude.js": fmt.Sprintf("let maxTimers = %d;", maxTimers),
	} {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(src), want) {
			t.Errorf("%s lacks %q", file, want)
		}
	}
	for _, req := range []Request{
		{Tools: DemoTools()}, {Args: []byte("1")}, {Session: true}, {Globals: map[string]json.RawMessage{"g": []byte("1")}},
	} {
		if cfg, _ := encodeConfig(req, limits); cfg == nil {
			t.Errorf("%+v got no configuration", req)
		}
	}
}
