package suspend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// NewFile returns a Store keeping each execution in dir (created on first
// save, private to the user):
//
//	<id>.json          the record's metadata, JSON
//	<id>.<key>.body    its suspension (see blob.go), binary
//
// Every file is written to a temporary file and renamed into place, so a
// reader never sees half a file and needs no lock. A change of the
// metadata is conditional on the version it replaces, checked under an
// exclusive flock on dir/.lock: several processes (two pml serve over the
// same directory) can never both claim an execution. The lock is held only
// for that check and the rename, not while bodies are written or read.
func NewFile(dir string, opts Options) Store {
	return newCore(&fileBackend{dir: dir}, opts)
}

type fileBackend struct{ dir string }

func (f *fileBackend) metaPath(id string) string { return filepath.Join(f.dir, id+".json") }

func (f *fileBackend) bodyPath(id, key string) string {
	return filepath.Join(f.dir, id+"."+key+".body")
}

func (f *fileBackend) get(_ context.Context, id string) (*meta, error) {
	data, err := os.ReadFile(f.metaPath(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var m meta
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%s is corrupt: %w", f.metaPath(id), err)
	}
	return &m, nil
}

func (f *fileBackend) put(ctx context.Context, m *meta, prev int) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(f.dir, 0o700); err != nil {
		return err
	}
	lock, err := os.OpenFile(filepath.Join(f.dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	// flock locks the open file description: other processes and other
	// goroutines of this one (each opens the file anew) are excluded alike.
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("locking %s: %w", f.dir, err)
	}
	defer unix.Flock(int(lock.Fd()), unix.LOCK_UN)
	cur, err := f.get(ctx, m.ID)
	if err != nil {
		return err
	}
	curVersion := 0
	if cur != nil {
		curVersion = cur.Version
	}
	if curVersion != prev {
		return errStale
	}
	return f.writeAtomic(m.ID+".json", data)
}

func (f *fileBackend) writeBody(_ context.Context, id string, version int, blob []byte, _ time.Time) (*bodyRef, error) {
	if err := os.MkdirAll(f.dir, 0o700); err != nil {
		return nil, err
	}
	key := bodyKey(version)
	if err := f.writeAtomic(filepath.Base(f.bodyPath(id, key)), blob); err != nil {
		return nil, err
	}
	return &bodyRef{Key: key, Size: len(blob)}, nil
}

func (f *fileBackend) readBody(_ context.Context, id string, ref *bodyRef) ([]byte, error) {
	b, err := os.ReadFile(f.bodyPath(id, ref.Key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errBodyGone
	}
	return b, err
}

func (f *fileBackend) deleteBody(_ context.Context, id string, ref *bodyRef) error {
	return os.Remove(f.bodyPath(id, ref.Key))
}

// writeAtomic writes dir/name through a synced temporary file and a
// rename, then syncs the directory: a claim that was acknowledged must
// survive a crash, or the execution could be claimed again after it.
func (f *fileBackend) writeAtomic(name string, data []byte) error {
	tmp, err := os.CreateTemp(f.dir, ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(f.dir, name)); err != nil {
		return err
	}
	d, err := os.Open(f.dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
