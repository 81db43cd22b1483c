package bench

import (
	"context"
	"embed"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// denoPeer is the Deno Worker peer of the serve figures: our own script,
// because ../shared/peers/run measures no throughput and is not ours to
// change. It is embedded so that `pml bench` needs no source tree.
//
//go:embed peers/deno_throughput.ts peers/deno_throughput_worker.ts
var denoPeer embed.FS

// FindDeno returns the Deno that ../shared/peers/run installs, under
// $PEERS_CACHE (default ~/.cache/pml-peers), or "" when it is not there:
// the peer's figures come from the same Deno as the peers' own.
func FindDeno() string {
	cache := os.Getenv("PEERS_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		cache = filepath.Join(home, ".cache", "pml-peers")
	}
	deno := filepath.Join(cache, "node_modules", ".bin", "deno")
	if st, err := os.Stat(deno); err != nil || st.IsDir() || st.Mode().Perm()&0o111 == 0 {
		return ""
	}
	return deno
}

// DenoOptions say how the Deno Worker peer measures.
type DenoOptions struct {
	// Deno is the deno executable (FindDeno).
	Deno string
	// Warm and Duration are each throughput figure's uncounted warm-up and
	// measured time, as for ours.
	Warm, Duration time.Duration
	// Clients is how many requests run at once (ServeClients), Held how
	// many Workers the memory figure holds (HeldExecutions).
	Clients, Held int
}

// RunDenoPeer runs the Deno Worker peer of the serve figures and returns
// its figures, merged under the peer "deno-worker-bridge" (the same
// architecture and Deno as that peer in ../shared/peers/run):
// throughput_return_rps, throughput_one_call_rps and
// memory_per_concurrent_execution_kib.
func RunDenoPeer(ctx context.Context, o DenoOptions) (Peers, error) {
	dir, err := os.MkdirTemp("", "pml-bench-deno-")
	if err != nil {
		return nil, fmt.Errorf("deno peer: %w", err)
	}
	defer os.RemoveAll(dir)
	if err := os.CopyFS(dir, denoPeer); err != nil {
		return nil, fmt.Errorf("deno peer: %w", err)
	}
	// --allow-read is for the host to load the Worker's module; the
	// Worker itself runs with permissions "none". --expose-gc lets the
	// memory figure collect before it samples.
	args := []string{"run", "--quiet", "--unstable-worker-options", "--allow-read", "--v8-flags=--expose-gc",
		filepath.Join(dir, "peers", "deno_throughput.ts"),
		strconv.Itoa(o.Clients), ms(o.Warm), ms(o.Duration), strconv.Itoa(o.Held)}
	return runPeerCommand(ctx, o.Deno, args...)
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
