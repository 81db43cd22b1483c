package bench

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestFindDeno(t *testing.T) {
	tests := []struct {
		name string
		mode os.FileMode // of node_modules/.bin/deno; 0: absent
		want bool
	}{
		{"installed", 0o755, true},
		{"not executable", 0o644, false},
		{"absent", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cache := t.TempDir()
			deno := filepath.Join(cache, "node_modules", ".bin", "deno")
			if tt.mode != 0 {
				if err := os.MkdirAll(filepath.Dir(deno), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(deno, nil, tt.mode); err != nil {
					t.Fatal(err)
				}
			}
			t.Setenv("PEERS_CACHE", cache)
			got := FindDeno()
			if tt.want && got != deno || !tt.want && got != "" {
				t.Errorf("FindDeno() = %q; want found: %v (%s)", got, tt.want, deno)
			}
		})
	}
}

// TestRunDenoPeer runs the embedded Deno script briefly, when the Deno the
// peers' script installs is there.
func TestRunDenoPeer(t *testing.T) {
	deno := FindDeno()
	if deno == "" || testing.Short() {
		t.Skip("no Deno under $PEERS_CACHE (shared/peers/run installs it), or -short")
	}
	p, err := RunDenoPeer(context.Background(), DenoOptions{Deno: deno, Duration: 200 * time.Millisecond, Clients: 2, Held: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"throughput_return_rps", "throughput_one_call_rps", "memory_per_concurrent_execution_kib"} {
		if _, ok := p.Value(PeerRef{Peer: "deno-worker-bridge", Key: key}); !ok {
			t.Errorf("no %s in %v", key, p)
		}
	}
	for _, key := range []string{"throughput_return_rps", "throughput_one_call_rps"} {
		if v, _ := p.Value(PeerRef{Peer: "deno-worker-bridge", Key: key}); !(v > 0) {
			t.Errorf("%s = %v; want a positive number", key, v)
		}
	}
}
