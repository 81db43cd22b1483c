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
		{Key: "serve_throughput_return_rps", Name: "pml serve executions/s", Value: 1500, Unit: "/s", Target: "report", HigherIsBetter: true,
			Compare: []bench.PeerRef{{Peer: "deno-worker-bridge", Key: "throughput_return_rps", Label: "Deno Worker"}}},
	}
	peers := bench.Peers{
		"qjs":                {"peer": "qjs", "fib25_ms": 20.0},
		"goja":               {"peer": "goja", "fresh_sandbox_p50_ms": 0.05, "per_call_overhead_us": 1.5},
		"deno-worker-bridge": {"peer": "deno-worker-bridge", "deno": "2.9.6", "throughput_return_rps": 90.0},
	}
	var buf bytes.Buffer
	if err := writeJSON(&buf, benchJSON(figs, peers)); err != nil {
		t.Fatal(err)
	}
	var report map[string]json.RawMessage
	if err := json.Unmarshal(buf.Bytes(), &report); err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(maps.Keys(report)); !slices.Equal(got, []string{"date", "figures", "machine", "peer_figures"}) {
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
		{2, []string{"higher_is_better", "key", "name", "peers", "target", "unit", "value"}},
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

	// Every number a peer reported has a key of its own; its version
	// string does not.
	var peerFigs []map[string]any
	if err := json.Unmarshal(report["peer_figures"], &peerFigs); err != nil {
		t.Fatal(err)
	}
	wantPeer := []struct {
		key, peer, figure, unit string
		value                   float64
	}{
		{"peer_deno_worker_bridge_throughput_return_rps", "deno-worker-bridge", "throughput_return_rps", "/s", 90},
		{"peer_goja_fresh_sandbox_p50_ms", "goja", "fresh_sandbox_p50_ms", "ms", 0.05},
		{"peer_goja_per_call_overhead_us", "goja", "per_call_overhead_us", "µs", 1.5},
		{"peer_qjs_fib25_ms", "qjs", "fib25_ms", "ms", 20},
	}
	if len(peerFigs) != len(wantPeer) {
		t.Fatalf("peer_figures %v; want %d entries", peerFigs, len(wantPeer))
	}
	for i, w := range wantPeer {
		f := peerFigs[i]
		if got := slices.Sorted(maps.Keys(f)); !slices.Equal(got, []string{"figure", "key", "peer", "unit", "value"}) {
			t.Errorf("peer figure %d keys %v", i, got)
		}
		if f["key"] != w.key || f["peer"] != w.peer || f["figure"] != w.figure || f["unit"] != w.unit || f["value"] != w.value {
			t.Errorf("peer figure %d = %v; want %+v", i, f, w)
		}
	}
}

// TestBenchJSONWithoutPeers: with --peers "" the peers' figures are an
// empty list, not null, so scripts can iterate it.
func TestBenchJSONWithoutPeers(t *testing.T) {
	var buf bytes.Buffer
	if err := writeJSON(&buf, benchJSON(nil, nil)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"peer_figures": []`) {
		t.Errorf("report without peers:\n%s", buf.String())
	}
}

func TestBenchTableValue(t *testing.T) {
	tests := []struct {
		v    float64
		unit string
		want string
	}{
		{0.221, "ms", "0.221 ms"},
		{26.64, "ms", "26.6 ms"},
		{999.4, "/s", "999 /s"},
		{1234.5, "/s", "1234 /s"},
		{-1500, "KiB", "-1500 KiB"},
	}
	for _, tt := range tests {
		if got := value(tt.v, tt.unit); got != tt.want {
			t.Errorf("value(%v, %q) = %q; want %q", tt.v, tt.unit, got, tt.want)
		}
	}
}

// TestBenchTableThroughput: the serve throughput rows print whole numbers
// of executions per second beside the Deno peer's, with the ratio.
func TestBenchTableThroughput(t *testing.T) {
	figs := []bench.Figure{{Key: "serve_throughput_return_rps", Name: "pml serve executions/s", Value: 1500, Unit: "/s", Target: "report; higher is better", HigherIsBetter: true,
		Compare: []bench.PeerRef{{Peer: "deno-worker-bridge", Key: "throughput_return_rps", Label: "Deno Worker per request (no HTTP)"}}}}
	var buf bytes.Buffer
	if err := benchTable(&buf, figs, bench.Peers{"deno-worker-bridge": {"throughput_return_rps": 100.0}}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"1500 /s", "100 /s", "15.00×", "higher is better", "Deno Worker per request"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, buf.String())
		}
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
