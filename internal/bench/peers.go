package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Peers are the figures of the peer sandboxes: each peer's JSON lines
// merged into one object, by peer name.
type Peers map[string]map[string]any

// RunPeers runs the peers' benchmark script (shared/peers/run), which
// prints JSON lines naming their peer, and indexes them by peer. Lines that
// are not JSON objects are passed over.
func RunPeers(ctx context.Context, script string) (Peers, error) {
	return runPeerCommand(ctx, script)
}

// runPeerCommand runs a peer's benchmark and reads the JSON lines it
// prints.
func runPeerCommand(ctx context.Context, name string, args ...string) (Peers, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(stderr.String()))
	}
	lines := Peers{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			lines.Add(m)
		}
	}
	return lines, sc.Err()
}

// Add merges one JSON line of a peer into p, under the line's "peer": a
// later figure of the same name replaces an earlier one.
func (p Peers) Add(line map[string]any) {
	name, _ := line["peer"].(string)
	if p[name] == nil {
		p[name] = map[string]any{}
	}
	for k, v := range line {
		p[name][k] = v
	}
}

// Value is the figure r names, if the peer reported it as a number.
func (p Peers) Value(r PeerRef) (float64, bool) {
	v, ok := p[r.Peer][r.Key].(float64)
	return v, ok
}

// PeerFigure is one number a peer reported, under a key of its own in
// `pml bench --json`: PeerKey(Peer, Figure).
type PeerFigure struct {
	Key    string  `json:"key"`
	Peer   string  `json:"peer"`
	Figure string  `json:"figure"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit,omitempty"`
}

// PeerKey is the stable key of a peer's figure: "peer_", the peer's name,
// "_", the figure's key in the peer's JSON line, with every character but
// ASCII letters and digits made "_" so that the key is one identifier (jq
// .peer_goja_fib25_ms). The peer and figure stay apart in PeerFigure, as
// the underscores make the key alone ambiguous.
func PeerKey(peer, figure string) string {
	return "peer_" + identifier(peer) + "_" + identifier(figure)
}

func identifier(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, s)
}

// Figures lists every number the peers reported, sorted by key; strings
// (versions, notes) are left out.
func (p Peers) Figures() []PeerFigure {
	var figs []PeerFigure
	for peer, line := range p {
		for k, v := range line {
			if f, ok := v.(float64); ok {
				figs = append(figs, PeerFigure{Key: PeerKey(peer, k), Peer: peer, Figure: k, Value: f, Unit: unitOf(k)})
			}
		}
	}
	slices.SortFunc(figs, func(a, b PeerFigure) int { return strings.Compare(a.Key, b.Key) })
	return figs
}

// unitOf reads a figure's unit from its key's suffix, the convention the
// peers' scripts and ours share.
func unitOf(key string) string {
	for _, u := range []struct{ suffix, unit string }{
		{"_ms", "ms"}, {"_us", "µs"}, {"_rps", "/s"}, {"_kib", "KiB"}, {"_pct", "%"},
	} {
		if strings.HasSuffix(key, u.suffix) {
			return u.unit
		}
	}
	return ""
}

// FindPeers looks for shared/peers/run beside the repository or the binary.
func FindPeers() string {
	var bases []string
	if wd, err := os.Getwd(); err == nil {
		bases = append(bases, wd)
	}
	if exe, err := os.Executable(); err == nil {
		bases = append(bases, filepath.Dir(exe))
	}
	for _, b := range bases {
		for d := b; ; d = filepath.Dir(d) {
			p := filepath.Join(d, "shared", "peers", "run")
			if st, err := os.Stat(p); err == nil && !st.IsDir() {
				return p
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return ""
}
