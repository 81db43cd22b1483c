package cli

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/bench"
)

// TestBenchJSONKeys pins the keys of `pml bench --json`, which scripts and
// docs/BENCHMARKS.md read: later figures may add keys, none may change.
func TestBenchJSONKeys(t *testing.T) {
	figs := []bench.Figure{
		{Key: "fib25_ms", Name: "fib(25)", Value: 16, Unit: "ms", Target: "≤ 1.5×", Compare: []bench.PeerRef{{Peer: "qjs", Key: "fib25_ms", Label: "quickjs-emscripten"}}},
		{Key: "fresh_sandbox_p99_ms", Name: "same, p99", Value: 0.4, Unit: "ms"},
	}
	peers := bench.Peers{"qjs": {"peer": "qjs", "fib25_ms": 20.0}}
	var buf bytes.Buffer
	if err := writeJSON(&buf, benchJSON(figs, peers)); err != nil {
		t.Fatal(err)
	}
	var report map[string]json.RawMessage
	if err := json.Unmarshal(buf.Bytes(), &report); err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(maps.Keys(report)); !slices.Equal(got, []string{"date", "figures", "machine"}) {
		t.Errorf("report keys %v", got)
	}
	var rows []map[string]json.RawMessage
	if err := json.Unmarshal(report["figures"], &rows); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		row  int
		keys []string
	}{
		{0, []string{"key", "name", "peers", "target", "unit", "value"}},
		{1, []string{"key", "name", "unit", "value"}}, // no target, no peers
	}
	for _, tt := range tests {
		if got := slices.Sorted(maps.Keys(rows[tt.row])); !slices.Equal(got, tt.keys) {
			t.Errorf("figure %d keys %v; want %v", tt.row, got, tt.keys)
		}
	}
	var got map[string]float64
	if err := json.Unmarshal(rows[0]["peers"], &got); err != nil || len(got) != 1 || got["quickjs-emscripten"] != 20 {
		t.Errorf("peers %s (%v)", rows[0]["peers"], err)
	}
}

func TestBenchTableRatio(t *testing.T) {
	figs := []bench.Figure{{Key: "k", Name: "fib(25)", Value: 30, Unit: "ms", Compare: []bench.PeerRef{
		{Peer: "qjs", Key: "fib25_ms", Label: "quickjs"},
		{Peer: "deno", Key: "fib25_ms", Label: "deno"},
	}}}
	var buf bytes.Buffer
	if err := benchTable(&buf, figs, bench.Peers{"qjs": {"fib25_ms": 20.0}}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"1.50×", "deno", "n/a", "machine: "} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, buf.String())
		}
	}
}
