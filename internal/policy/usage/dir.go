package usage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pml-sandbox/pml/internal/atomicfile"
	"github.com/pml-sandbox/pml/internal/filelock"
	"github.com/pml-sandbox/pml/internal/policy"
)

// Dir counts in a directory (limits/ under the suspension directory): one
// JSON file per key, read and replaced under an exclusive flock of the
// directory's lock file, so that processes sharing the directory (pml
// serve and pml run beside it) count alike. Files whose window has passed
// are removed now and then.
type Dir struct {
	path string
	mu   sync.Mutex // the flock serialises processes; this, goroutines cheaply
	// swept is when expired files were last removed.
	swept time.Time
	now   func() time.Time
}

// NewDir returns a counter in path, created (0700) if missing.
func NewDir(path string) (*Dir, error) {
	if err := os.MkdirAll(path, 0o700); err != nil {
		return nil, fmt.Errorf("usage: %w", err)
	}
	return &Dir{path: path, now: time.Now}, nil
}

// sweepEvery is how often a Dir removes expired counts.
const sweepEvery = time.Minute

// Add implements policy.Counter.
func (d *Dir) Add(ctx context.Context, k policy.CountKey, n, max int64) (int64, bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	lf, err := os.OpenFile(filepath.Join(d.path, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return 0, false, fmt.Errorf("usage: %w", err)
	}
	defer lf.Close()
	if err := filelock.Lock(ctx, lf, unix.LOCK_EX); err != nil {
		return 0, false, fmt.Errorf("usage: %w", err)
	}
	defer func() { _ = unix.Flock(int(lf.Fd()), unix.LOCK_UN) }()
	p := filepath.Join(d.path, keyHash(k)+".json")
	var r record
	switch b, err := os.ReadFile(p); {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return 0, false, fmt.Errorf("usage: %w", err)
	default:
		if err := json.Unmarshal(b, &r); err != nil {
			return 0, false, fmt.Errorf("usage: %s: %w", p, err)
		}
	}
	if max >= 0 && r.Count+n > max {
		return r.Count, false, nil
	}
	r = record{Count: r.Count + n, Policy: k.Policy, Measure: k.Measure, Principal: k.Principal, Tool: k.Tool,
		Window: k.Window.Unix(), Expires: k.Expires.Unix()}
	b, _ := json.Marshal(r)
	if err := atomicfile.Write(p, b); err != nil {
		return 0, false, fmt.Errorf("usage: %w", err)
	}
	if now := d.now(); now.Sub(d.swept) > sweepEvery {
		d.swept = now
		d.sweep(now)
	}
	return r.Count, true, nil
}

// sweep removes the counts whose windows have passed, and temporary files
// a crash left. The caller holds the lock.
func (d *Dir) sweep(now time.Time) {
	ents, err := os.ReadDir(d.path)
	if err != nil {
		return
	}
	for _, e := range ents {
		p := filepath.Join(d.path, e.Name())
		if atomicfile.IsTemp(e.Name()) {
			_ = os.Remove(p)
			continue
		}
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		var r record
		if b, err := os.ReadFile(p); err == nil && json.Unmarshal(b, &r) == nil && r.Expires < now.Unix() {
			_ = os.Remove(p)
		}
	}
}
