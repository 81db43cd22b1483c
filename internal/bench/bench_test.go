package bench

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ms := func(ns ...int) []time.Duration {
		var ds []time.Duration
		for _, n := range ns {
			ds = append(ds, time.Duration(n)*time.Millisecond)
		}
		return ds
	}
	tests := []struct {
		name string
		ts   []time.Duration
		p    float64
		want time.Duration
	}{
		{"one sample", ms(7), 0.5, 7 * time.Millisecond},
		{"median of unsorted", ms(9, 1, 5), 0.5, 5 * time.Millisecond},
		{"median of even count takes the upper", ms(4, 1, 3, 2), 0.5, 3 * time.Millisecond},
		{"p99 is the largest of few", ms(3, 1, 2), 0.99, 3 * time.Millisecond},
		{"p0 is the smallest", ms(3, 1, 2), 0, time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := append([]time.Duration(nil), tt.ts...)
			if got := percentile(tt.ts, tt.p); got != tt.want {
				t.Errorf("percentile(%v, %v) = %v; want %v", tt.ts, tt.p, got, tt.want)
			}
			for i := range before {
				if tt.ts[i] != before[i] {
					t.Fatalf("percentile reordered its input: %v", tt.ts)
				}
			}
		})
	}
}

func TestRunPeers(t *testing.T) {
	script := filepath.Join(t.TempDir(), "run")
	body := `#!/bin/sh
echo '{"peer":"deno","fresh_sandbox_p50_ms":1.5}'
echo 'warming up'
echo '{"peer":"deno","per_call_overhead_us":12}'
echo '{"peer":"qjs","fib25_ms":20,"note":"text"}'
`
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	peers, err := RunPeers(context.Background(), script)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		ref  PeerRef
		want float64
		ok   bool
	}{
		{PeerRef{Peer: "deno", Key: "fresh_sandbox_p50_ms"}, 1.5, true},
		{PeerRef{Peer: "deno", Key: "per_call_overhead_us"}, 12, true}, // a later line merges in
		{PeerRef{Peer: "qjs", Key: "fib25_ms"}, 20, true},
		{PeerRef{Peer: "qjs", Key: "note"}, 0, false}, // not a number
		{PeerRef{Peer: "qjs", Key: "missing"}, 0, false},
		{PeerRef{Peer: "nobody", Key: "fib25_ms"}, 0, false},
	}
	for _, tt := range tests {
		got, ok := peers.Value(tt.ref)
		if got != tt.want || ok != tt.ok {
			t.Errorf("Value(%+v) = %v, %v; want %v, %v", tt.ref, got, ok, tt.want, tt.ok)
		}
	}
}

func TestRunPeersFailure(t *testing.T) {
	script := filepath.Join(t.TempDir(), "run")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho 'no node here' >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := RunPeers(context.Background(), script); err == nil {
		t.Fatal("a failing peers script gave no error")
	} else if want := "no node here"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not carry the script's stderr %q", err, want)
	}
}

// TestGojaBesideOurs: goja, the floor of what isolation costs, is printed
// beside our fresh-sandbox, per-call and fib(25) figures, and its label
// says it isolates no memory.
func TestGojaBesideOurs(t *testing.T) {
	for _, key := range []string{"fresh_sandbox_p50_ms", "per_call_overhead_us", "fib25_ms"} {
		t.Run(key, func(t *testing.T) {
			i := slices.IndexFunc(compare[key], func(r PeerRef) bool { return r.Peer == "goja" })
			if i < 0 {
				t.Fatalf("%s is not compared with goja: %v", key, compare[key])
			}
			if r := compare[key][i]; r.Key != key || !strings.Contains(r.Label, "no memory isolation") {
				t.Errorf("goja ref %+v: want key %s and a label saying it has no memory isolation", r, key)
			}
		})
	}
}

func TestPeerFigures(t *testing.T) {
	peers := Peers{
		"deno-worker-bridge":      {"peer": "deno-worker-bridge", "deno": "2.9.6", "per_call_overhead_us": 89.0},
		"quickjs-emscripten-node": {"fib25_ms": 15.5},
		"x":                       {"throughput_return_rps": 100.0, "memory_kib": 512.0, "cost_pct": 3.0, "count": 7.0},
	}
	want := []PeerFigure{
		{"peer_deno_worker_bridge_per_call_overhead_us", "deno-worker-bridge", "per_call_overhead_us", 89, "µs"},
		{"peer_quickjs_emscripten_node_fib25_ms", "quickjs-emscripten-node", "fib25_ms", 15.5, "ms"},
		{"peer_x_cost_pct", "x", "cost_pct", 3, "%"},
		{"peer_x_count", "x", "count", 7, ""},
		{"peer_x_memory_kib", "x", "memory_kib", 512, "KiB"},
		{"peer_x_throughput_return_rps", "x", "throughput_return_rps", 100, "/s"},
	}
	if got := peers.Figures(); !slices.Equal(got, want) {
		t.Errorf("Figures() =\n%v\nwant\n%v", got, want)
	}
	if got := (Peers(nil)).Figures(); len(got) != 0 {
		t.Errorf("no peers gave %v", got)
	}
}
