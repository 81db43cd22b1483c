package suspend

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/pml-sandbox/pml/internal/atomicfile"
	"golang.org/x/sys/unix"
)

// NewFile returns a Store keeping each execution in dir (created on first
// save, private to the user):
//
//	<id>.json          the record's metadata, JSON
//	<id>.<key>.body    its suspension (see blob.go), binary
//	waiting/<o>/owner  a principal whose records wait (<o>: a hash of it)
//	waiting/<o>/<expiry>#<id>  an empty file: a hint that <id> waits
//
// Every file is written to a temporary file and renamed into place, so a
// reader never sees half a file and needs no lock. A change of the
// metadata is conditional on the version it replaces, checked under an
// exclusive flock on dir/.lock: several processes (two pml serve over the
// same directory) can never both claim an execution. The lock is held only
// for that check and the rename, not while bodies are written or read.
//
// Nothing else deletes files here, so creating a record also sweeps the
// directory (at most hourly): a record an hour past its expiry goes with
// its image, as does an image no record points at an hour after it was
// written.
func NewFile(dir string, opts Options) Store {
	return newCore(&fileBackend{dir: dir}, opts)
}

type fileBackend struct {
	dir string

	mu        sync.Mutex
	lastSweep time.Time
}

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
	lock, err := f.lock()
	if err != nil {
		return err
	}
	defer unlock(lock)
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

// lock takes the directory's exclusive lock. flock locks the open file
// description: other processes and other goroutines of this one (each
// opens the file anew) are excluded alike.
func (f *fileBackend) lock() (*os.File, error) {
	lock, err := os.OpenFile(filepath.Join(f.dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		lock.Close()
		return nil, fmt.Errorf("locking %s: %w", f.dir, err)
	}
	return lock, nil
}

// unlock releases lock (closing the file would too; this says so).
func unlock(lock *os.File) {
	_ = unix.Flock(int(lock.Fd()), unix.LOCK_UN)
	lock.Close()
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

func (f *fileBackend) deleteMeta(_ context.Context, id string) error {
	lock, err := f.lock()
	if err != nil {
		return err
	}
	defer unlock(lock)
	return os.Remove(f.metaPath(id))
}

// list reads every record of the directory (none when it does not exist
// yet).
func (f *fileBackend) list(ctx context.Context) ([]*meta, error) {
	entries, err := os.ReadDir(f.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*meta
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !validID(id) {
			continue
		}
		if m, err := f.get(ctx, id); err == nil && m != nil {
			out = append(out, m)
		}
	}
	return out, nil
}

// writeAtomic replaces dir/name durably: a claim that was acknowledged
// must survive a crash, or the execution could be claimed again after it.
func (f *fileBackend) writeAtomic(name string, data []byte) error {
	return atomicfile.Write(filepath.Join(f.dir, name), data)
}

// sweepEvery bounds how often one store sweeps its directory.
const sweepEvery = time.Hour

// sweep removes the records that expired more than ttlGrace ago (as
// DynamoDB's TTL would) and the bodies and temporary files nothing points
// at that are older than ttlGrace: left by a crash, or by a write that
// lost to another. Younger ones may be a write in progress. Errors are
// ignored: the next sweep tries again.
func (f *fileBackend) sweep(ctx context.Context, now time.Time) {
	f.mu.Lock()
	due := f.lastSweep.IsZero() || now.Sub(f.lastSweep) >= sweepEvery
	if due {
		f.lastSweep = now
	}
	f.mu.Unlock()
	if !due {
		return
	}
	entries, err := os.ReadDir(f.dir)
	if err != nil {
		return
	}
	live := map[string]bool{} // body file names records point at
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !validID(id) {
			continue
		}
		m, err := f.get(ctx, id)
		if err != nil || m == nil {
			continue
		}
		if now.After(m.ExpiresAt.Add(ttlGrace)) {
			_ = f.remove(ctx, m)
			continue
		}
		for _, b := range []*bodyRef{m.Body, m.Checkpoint} {
			if b != nil {
				live[filepath.Base(f.bodyPath(id, b.Key))] = true
			}
		}
	}
	f.sweepLedgers(now)
	for _, e := range entries {
		name := e.Name()
		if live[name] || !(strings.HasSuffix(name, ".body") || atomicfile.IsTemp(name)) {
			continue
		}
		// Real time, not now: the file system's clock wrote ModTime.
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > ttlGrace {
			_ = os.Remove(filepath.Join(f.dir, name))
		}
	}
	f.sweepHints(now)
}

// remove deletes m's record if it is still at m's version, then its body.
func (f *fileBackend) remove(ctx context.Context, m *meta) error {
	lock, err := f.lock()
	if err != nil {
		return err
	}
	cur, err := f.get(ctx, m.ID)
	if err == nil && cur != nil && cur.Version == m.Version {
		err = os.Remove(f.metaPath(m.ID))
	}
	unlock(lock)
	for _, b := range []*bodyRef{m.Body, m.Checkpoint} {
		if err == nil && b != nil {
			err = f.deleteBody(ctx, m.ID, b)
		}
	}
	return err
}

// ledgerPath is principal's ledger (quota.go): a file in .quota named by
// a hash of the principal, which may hold any character.
func (f *fileBackend) ledgerPath(principal string) string {
	sum := sha256.Sum256([]byte(principal))
	return filepath.Join(f.dir, ".quota", hex.EncodeToString(sum[:16])+".json")
}

func (f *fileBackend) getLedger(_ context.Context, principal string) (*ledger, error) {
	data, err := os.ReadFile(f.ledgerPath(principal))
	if errors.Is(err, fs.ErrNotExist) {
		return &ledger{Held: map[string]holding{}}, nil
	}
	if err != nil {
		return nil, err
	}
	var l ledger
	if err := json.Unmarshal(data, &l); err != nil {
		return nil, fmt.Errorf("%s is corrupt: %w", f.ledgerPath(principal), err)
	}
	if l.Held == nil {
		l.Held = map[string]holding{}
	}
	return &l, nil
}

// putLedger writes l under the directory's lock if the ledger is still
// at prev, as put does a record.
func (f *fileBackend) putLedger(ctx context.Context, principal string, l *ledger, prev int, _ time.Time) error {
	data, err := json.Marshal(l)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(f.dir, ".quota"), 0o700); err != nil {
		return err
	}
	lock, err := f.lock()
	if err != nil {
		return err
	}
	defer unlock(lock)
	cur, err := f.getLedger(ctx, principal)
	if err != nil {
		return err
	}
	if cur.Version != prev {
		return errStale
	}
	return atomicfile.Write(f.ledgerPath(principal), data)
}

// sweepLedgers removes the ledgers in which nothing counts any more (a
// principal not seen since), as DynamoDB's TTL removes their items, and
// the temporary files a crash left there.
func (f *fileBackend) sweepLedgers(now time.Time) {
	dir := filepath.Join(f.dir, ".quota")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	lock, err := f.lock()
	if err != nil {
		return
	}
	defer unlock(lock)
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if atomicfile.IsTemp(e.Name()) {
			if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > ttlGrace {
				_ = os.Remove(p)
			}
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		var l ledger
		if json.Unmarshal(data, &l) != nil {
			continue
		}
		if prune(&l, now); len(l.Held) == 0 {
			_ = os.Remove(p)
		}
	}
}
