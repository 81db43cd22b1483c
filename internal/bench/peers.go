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
	"strings"
)

// Peers are the figures of the peer sandboxes: each peer's JSON lines
// merged into one object, by peer name.
type Peers map[string]map[string]any

// RunPeers runs the peers' benchmark script (shared/peers/run), which
// prints JSON lines naming their peer, and indexes them by peer. Lines that
// are not JSON objects are passed over.
func RunPeers(ctx context.Context, script string) (Peers, error) {
	cmd := exec.CommandContext(ctx, script)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %s", script, err, strings.TrimSpace(stderr.String()))
	}
	lines := Peers{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		p, _ := m["peer"].(string)
		if lines[p] == nil {
			lines[p] = map[string]any{}
		}
		for k, v := range m {
			lines[p][k] = v
		}
	}
	return lines, sc.Err()
}

// Value is the figure r names, if the peer reported it as a number.
func (p Peers) Value(r PeerRef) (float64, bool) {
	v, ok := p[r.Peer][r.Key].(float64)
	return v, ok
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
