package suspend

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/pml-sandbox/pml/internal/atomicfile"
)

// The directory store's index of what waits (waiting.go): a directory per
// owner under waiting/, named by a hash of the principal (any principal
// makes a short, safe name) and holding the principal in its file owner,
// and an empty file per hint, named by its key. Listing reads the names
// of the owners, or of one owner's hints, and the records of the page
// alone. Creating and removing an owner's directory happen under the
// directory's lock, so a hint is never written into a directory being
// removed.

const ownerFile = "owner"

func (f *fileBackend) waitDir() string { return filepath.Join(f.dir, "waiting") }

func ownerDirName(owner string) string {
	sum := sha256.Sum256([]byte(owner))
	return base64.RawURLEncoding.EncodeToString(sum[:24])
}

func (f *fileBackend) ownerDir(owner string) string {
	return filepath.Join(f.waitDir(), ownerDirName(owner))
}

func (f *fileBackend) markWaiting(_ context.Context, h waitHint, _ time.Time) error {
	lock, err := f.lock()
	if err != nil {
		return err
	}
	defer unlock(lock)
	dir := f.ownerDir(h.Owner)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, ownerFile)); err != nil {
		if err := atomicfile.Write(filepath.Join(dir, ownerFile), []byte(h.Owner)); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, h.Key), nil, 0o600)
}

func (f *fileBackend) unmarkWaiting(_ context.Context, h waitHint) error {
	dir := f.ownerDir(h.Owner)
	if err := os.Remove(filepath.Join(dir, h.Key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return f.dropOwnerIfEmpty(dir)
}

// dropOwnerIfEmpty removes an owner's directory that holds no hint.
func (f *fileBackend) dropOwnerIfEmpty(dir string) error {
	lock, err := f.lock()
	if err != nil {
		return err
	}
	defer unlock(lock)
	names, err := hintNames(dir)
	if err != nil || len(names) > 0 {
		return err
	}
	return os.RemoveAll(dir)
}

// hintNames lists the hint files of an owner's directory, in order.
func hintNames(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if n := e.Name(); n != ownerFile && !atomicfile.IsTemp(n) {
			out = append(out, n)
		}
	}
	return out, nil
}

// page is names (sorted) after after, at most limit, and whether more
// follow.
func page(names []string, after string, limit int) ([]string, bool) {
	i, found := slices.BinarySearch(names, after)
	if found {
		i++
	}
	names = names[i:]
	if len(names) > limit {
		return names[:limit], true
	}
	return names, false
}

func (f *fileBackend) owners(_ context.Context, after string, limit int) ([]ownerHint, bool, error) {
	entries, err := os.ReadDir(f.waitDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	names, more := page(names, after, limit)
	var out []ownerHint
	for _, n := range names {
		owner, err := os.ReadFile(filepath.Join(f.waitDir(), n, ownerFile))
		if err != nil {
			continue // being created or removed
		}
		out = append(out, ownerHint{Owner: string(owner), Cursor: n})
	}
	return out, more, nil
}

func (f *fileBackend) waitingOf(_ context.Context, owner, after string, limit int) ([]waitHint, bool, error) {
	names, err := hintNames(f.ownerDir(owner))
	if err != nil {
		return nil, false, err
	}
	names, more := page(names, after, limit)
	var out []waitHint
	for _, n := range names {
		if h, ok := hintOf(owner, n); ok {
			out = append(out, h)
		}
	}
	return out, more, nil
}

// sweepHints removes the hints whose records' expiry is ttlGrace past
// (their records are swept too), and the owners left with none.
func (f *fileBackend) sweepHints(now time.Time) {
	owners, err := os.ReadDir(f.waitDir())
	if err != nil {
		return
	}
	for _, o := range owners {
		dir := filepath.Join(f.waitDir(), o.Name())
		names, err := hintNames(dir)
		if err != nil {
			continue
		}
		for _, n := range names {
			if x, ok := hintExpiry(n); !ok || now.After(x.Add(ttlGrace)) {
				_ = os.Remove(filepath.Join(dir, n))
			}
		}
		_ = f.dropOwnerIfEmpty(dir)
	}
}
