package cli

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"text/tabwriter"
	"time"

	"github.com/pml-sandbox/pml/internal/bench"
)

func benchCmd(ctx context.Context, args []string, out, errOut io.Writer) (int, error) {
	fs := newFlagSet("bench", errOut)
	var (
		ef      engineFlags
		peers   = fs.String("peers", bench.FindPeers(), "the peers' benchmark script (shared/peers/run); empty to skip")
		asJSON  = fs.Bool("json", false, "print JSON instead of a table")
		samples = fs.Int("n", 500, "samples for the fresh-sandbox figure")
		serveD  = fs.Duration("serve-duration", 2*time.Second, "how long each pml serve throughput figure is measured, after a warm-up; 0 leaves them out")
	)
	ef.register(fs)
	if err := parse(fs, args); err != nil {
		return ExitUsage, err
	}
	progress := func(s string) { fmt.Fprintln(errOut, "bench:", s) }

	// The peers run first, then ours: one command, but never both at once
	// on the same cores.
	var peerFigs bench.Peers
	if *peers != "" {
		progress("running peers: " + *peers)
		p, err := bench.RunPeers(ctx, *peers)
		if err != nil {
			progress("peers: " + err.Error())
		}
		peerFigs = p
		if *serveD > 0 {
			peerFigs = denoThroughputPeer(ctx, peerFigs, *serveD, progress)
		}
	}
	opts := bench.Options{CacheDir: ef.dir(), Samples: *samples, ServeDuration: *serveD, Progress: progress}
	if *serveD <= 0 {
		opts.ServeDuration = -1 // left out
	}
	if self, err := os.Executable(); err == nil {
		opts.Executable = self
	}
	figs, err := bench.Measure(ctx, opts)
	if err != nil {
		return ExitFailed, err
	}
	if *asJSON {
		return ExitOK, writeJSON(out, benchJSON(figs, peerFigs))
	}
	return ExitOK, benchTable(out, figs, peerFigs)
}

// denoThroughputPeer adds the Deno Worker peer's serve figures to peers,
// measured as ours are (bench.RunDenoPeer). Without the Deno that the
// peers' script installs, or when it fails, the figures are left out and
// the table says n/a, as for the peers' own.
func denoThroughputPeer(ctx context.Context, peers bench.Peers, d time.Duration, progress func(string)) bench.Peers {
	deno := bench.FindDeno()
	if deno == "" {
		progress("Deno Worker throughput peer: skipped, Deno is not installed (the peers' script installs it under $PEERS_CACHE, default ~/.cache/pml-peers)")
		return peers
	}
	progress("running the Deno Worker throughput peer: " + deno)
	p, err := bench.RunDenoPeer(ctx, bench.DenoOptions{Deno: deno, Warm: bench.ServeWarmUp, Duration: d, Clients: bench.ServeClients, Held: bench.HeldExecutions})
	if err != nil {
		progress("Deno Worker throughput peer: " + err.Error())
		return peers
	}
	if peers == nil {
		peers = bench.Peers{}
	}
	for _, line := range p {
		peers.Add(line)
	}
	return peers
}

// benchJSON is the report `pml bench --json` prints: each of our figures
// with the values of the peers' figures it is compared with, by label, and
// every number the peers reported under a stable key of its own
// (bench.PeerKey), compared with ours or not.
func benchJSON(figs []bench.Figure, peers bench.Peers) map[string]any {
	type row struct {
		bench.Figure
		Peers map[string]float64 `json:"peers,omitempty"`
	}
	var rows []row
	for _, f := range figs {
		r := row{Figure: f, Peers: map[string]float64{}}
		for _, p := range f.Compare {
			if v, ok := peers.Value(p); ok {
				r.Peers[p.Label] = v
			}
		}
		rows = append(rows, r)
	}
	peerFigs := peers.Figures()
	if peerFigs == nil {
		peerFigs = []bench.PeerFigure{} // [] rather than null: no peers ran
	}
	return map[string]any{"machine": bench.Machine(), "date": time.Now().UTC().Format(time.DateOnly), "figures": rows, "peer_figures": peerFigs}
}

// benchTable prints one line a figure and peer, ours beside theirs.
func benchTable(out io.Writer, figs []bench.Figure, peers bench.Peers) error {
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "figure\tpml\ttarget\tpeer\tpeer value\tpml / peer\n")
	for _, f := range figs {
		first := true
		line := func(peer, pv, ratio string) {
			name, val, tgt := "", "", ""
			if first {
				name, val, tgt = f.Name, value(f.Value, f.Unit), f.Target
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", name, val, tgt, peer, pv, ratio)
			first = false
		}
		for _, p := range f.Compare {
			if v, ok := peers.Value(p); ok {
				line(p.Label, value(v, f.Unit), fmt.Sprintf("%.2f×", f.Value/v))
			} else {
				line(p.Label, "n/a", "")
			}
		}
		if len(f.Compare) == 0 {
			line("", "", "")
		}
	}
	fmt.Fprintf(tw, "\nmachine: %s; %s\n", bench.Machine(), time.Now().UTC().Format(time.DateOnly))
	return tw.Flush()
}

// value prints a figure to three significant digits, but a figure of a
// thousand or more (executions per second, KiB) whole rather than as
// 1.23e+03.
func value(v float64, unit string) string {
	if math.Abs(v) >= 1000 {
		return fmt.Sprintf("%.0f %s", v, unit)
	}
	return fmt.Sprintf("%.3g %s", v, unit)
}
