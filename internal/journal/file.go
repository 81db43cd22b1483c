package journal

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/filelock"
)

// File is a Store in a directory: one append-only JSON-lines file per
// execution, <dir>/<execution id>.jsonl, private to the user. Each
// operation is a line (an intent with its entry, an outcome, an attempt, a
// compensation) appended under an exclusive flock on the file after its
// condition was checked against the lines before it, then synced (fsync)
// before the operation returns: an intent the caller was told about is on
// disk before the effect is sent. Readers fold the lines in order under a
// shared flock. A line cut short — its writer died mid-write — is never
// folded: readers stop at the last newline, and the next writer, holding
// the exclusive lock, truncates it away before it appends.
//
// Each process folds each file once, then only what was appended since
// (its offset): an operation costs its own line, not the file. Files a
// TTL past their last write are swept (at most hourly, when a new one is
// made).
type File struct {
	dir  string
	opts Options

	mu        sync.Mutex
	logs      map[string]*fileLog
	lastSweep time.Time
}

// NewFile returns a File store in dir (created on the first intent).
func NewFile(dir string, opts Options) *File {
	return &File{dir: dir, opts: opts.withDefaults(), logs: map[string]*fileLog{}}
}

// maxCachedLogs bounds the folded files a File keeps in memory; past it
// one is dropped (and folded again from the start when next used).
const maxCachedLogs = 1024

// sweepEvery bounds how often a File sweeps its directory.
const sweepEvery = time.Hour

// fileLog is what this process has folded of one execution's file.
type fileLog struct {
	// mu orders this process's operations on the execution; the flock
	// orders processes.
	mu      sync.Mutex
	ino     uint64 // the file folded (a file swept and made anew starts over)
	offset  int64  // the bytes folded: up to and including a newline
	entries map[int]*Entry
}

// record is one line of a file.
type record struct {
	Op           string          `json:"op"` // opIntend, opResend, opSettle, opCompensation
	Entry        *Entry          `json:"entry,omitempty"`
	CallID       int             `json:"call_id,omitempty"`
	Attempts     int             `json:"attempts,omitempty"`
	Status       Status          `json:"status,omitempty"`
	Result       json.RawMessage `json:"result,omitempty"`
	ResultBytes  int             `json:"result_bytes,omitempty"`
	Error        *fault.Error    `json:"error,omitempty"`
	Compensation *Compensation   `json:"compensation,omitempty"`
	At           time.Time       `json:"at,omitzero"`
}

const (
	opIntend       = "intend"
	opResend       = "resend"
	opSettle       = "settle"
	opCompensation = "compensation"
)

// apply folds r into entries. Lines were checked before they were
// written; one that does not fit (a damaged file) is skipped.
func apply(entries map[int]*Entry, r *record) {
	if r.Op == opIntend {
		if r.Entry != nil && entries[r.Entry.CallID] == nil {
			e := *r.Entry
			entries[e.CallID] = &e
		}
		return
	}
	e := entries[r.CallID]
	if e == nil {
		return
	}
	switch r.Op {
	case opResend:
		if e.Status == Pending {
			e.Attempts = r.Attempts
		}
	case opSettle:
		if e.Status == Pending && r.Status.Settled() {
			e.Status, e.Result, e.ResultBytes, e.Error, e.SettledAt = r.Status, r.Result, r.ResultBytes, r.Error, r.At
		}
	case opCompensation:
		// A line without one clears it (a released claim).
		e.Compensation = nil
		if r.Compensation != nil {
			c := *r.Compensation
			e.Compensation = &c
		}
	}
}

func (f *File) path(id string) string { return filepath.Join(f.dir, id+".jsonl") }

// log is this process's fold of id's file.
func (f *File) log(id string) *fileLog {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.logs[id]
	if l == nil {
		if len(f.logs) >= maxCachedLogs {
			for k := range f.logs {
				// Dropped, not closed: an operation holding it finishes
				// on it, and the flock keeps the file right.
				delete(f.logs, k)
				break
			}
		}
		l = &fileLog{entries: map[int]*Entry{}}
		f.logs[id] = l
	}
	return l
}

// Intend implements Store.
func (f *File) Intend(ctx context.Context, e *Entry) (*Entry, error) {
	if err := checkIntent(e); err != nil {
		return nil, err
	}
	var existing *Entry
	err := f.write(ctx, e.ExecutionID, true, func(entries map[int]*Entry) (*record, error) {
		if old := entries[e.CallID]; old != nil {
			c := clone(*old)
			existing = &c
			return nil, nil
		}
		stored := pendingIntent(e, f.opts.Now())
		return &record{Op: opIntend, Entry: &stored}, nil
	})
	return existing, err
}

// Resend implements Store.
func (f *File) Resend(ctx context.Context, executionID string, callID, attempts int) error {
	return f.write(ctx, executionID, false, func(entries map[int]*Entry) (*record, error) {
		e := entries[callID]
		switch {
		case e == nil:
			return nil, ErrNotFound
		case e.Status != Pending || e.Attempts != attempts:
			return nil, ErrConflict
		}
		return &record{Op: opResend, CallID: callID, Attempts: attempts + 1}, nil
	})
}

// Settle implements Store.
func (f *File) Settle(ctx context.Context, executionID string, callID int, o Outcome) error {
	if err := checkOutcome(o); err != nil {
		return err
	}
	return f.write(ctx, executionID, false, func(entries map[int]*Entry) (*record, error) {
		e := entries[callID]
		switch {
		case e == nil:
			return nil, ErrNotFound
		case e.Status != Pending:
			return nil, ErrConflict
		}
		result, size, ferr := capOutcome(o)
		return &record{Op: opSettle, CallID: callID, Status: o.Status, Result: result, ResultBytes: size, Error: ferr, At: f.opts.Now().UTC()}, nil
	})
}

// SetCompensation implements Store.
func (f *File) SetCompensation(ctx context.Context, executionID string, callID int, from, to *Compensation) error {
	return f.write(ctx, executionID, false, func(entries map[int]*Entry) (*record, error) {
		e := entries[callID]
		switch {
		case e == nil:
			return nil, ErrNotFound
		case !Claims(e.Compensation, from):
			return nil, ErrConflict
		}
		return &record{Op: opCompensation, CallID: callID, Compensation: to}, nil
	})
}

// List implements Store.
func (f *File) List(ctx context.Context, executionID string) ([]Entry, error) {
	if !validID(executionID) {
		return nil, nil
	}
	l := f.log(executionID)
	l.mu.Lock()
	defer l.mu.Unlock()
	fd, err := os.Open(f.path(executionID))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	defer fd.Close()
	if err := filelock.Lock(ctx, fd, unix.LOCK_SH); err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	defer func() { _ = unix.Flock(int(fd.Fd()), unix.LOCK_UN) }()
	if err := l.catchUp(fd, false); err != nil {
		return nil, err
	}
	out := make([]Entry, 0, len(l.entries))
	for _, e := range l.entries {
		out = append(out, clone(*e))
	}
	slices.SortFunc(out, func(a, b Entry) int { return a.CallID - b.CallID })
	return out, nil
}

// write folds id's file under an exclusive lock, runs op on its entries,
// and appends and syncs the record op returns (none: nothing to write).
// create makes the file when there is none; otherwise a missing file has
// no entries (ErrNotFound, for op to say).
func (f *File) write(ctx context.Context, id string, create bool, op func(map[int]*Entry) (*record, error)) error {
	if !validID(id) {
		return ErrNotFound
	}
	l := f.log(id)
	l.mu.Lock()
	defer l.mu.Unlock()
	fd, err := f.open(id, create)
	if errors.Is(err, fs.ErrNotExist) {
		_, err = op(map[int]*Entry{})
		return err
	}
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	defer fd.Close()
	if err := filelock.Lock(ctx, fd, unix.LOCK_EX); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	defer func() { _ = unix.Flock(int(fd.Fd()), unix.LOCK_UN) }()
	if err := l.catchUp(fd, true); err != nil {
		return err
	}
	rec, err := op(l.entries)
	if err != nil || rec == nil {
		return err
	}
	line, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("journal: encoding: %w", err)
	}
	line = append(line, '\n')
	if _, err := fd.Write(line); err != nil {
		// Cut back what may have been written: the next fold must not
		// find half a line followed by another's.
		_ = fd.Truncate(l.offset)
		return fmt.Errorf("journal: writing %s: %w", fd.Name(), err)
	}
	if err := fd.Sync(); err != nil {
		// The line may or may not be on disk: the next fold reads what
		// is there.
		return fmt.Errorf("journal: syncing %s: %w", fd.Name(), err)
	}
	l.offset += int64(len(line))
	apply(l.entries, rec)
	return nil
}

// open opens id's file for appending, making it (and syncing its
// directory, so the new name is as durable as its first line) when create
// asks and there is none.
func (f *File) open(id string, create bool) (*os.File, error) {
	p := f.path(id)
	fd, err := os.OpenFile(p, os.O_RDWR|os.O_APPEND, 0)
	if err == nil || !create || !errors.Is(err, fs.ErrNotExist) {
		return fd, err
	}
	if err := os.MkdirAll(f.dir, 0o700); err != nil {
		return nil, err
	}
	fd, err = os.OpenFile(p, os.O_RDWR|os.O_APPEND|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return os.OpenFile(p, os.O_RDWR|os.O_APPEND, 0)
	}
	if err != nil {
		return nil, err
	}
	if d, err := os.Open(f.dir); err == nil {
		err = d.Sync()
		_ = d.Close()
		if err != nil {
			_ = fd.Close()
			return nil, err
		}
	}
	f.sweep(id)
	return fd, nil
}

// catchUp folds what was appended to fd since l was last folded. A last
// line without its newline is a write in progress (shared) or one whose
// writer died (exclusive: cut away, under the lock no writer holds).
func (l *fileLog) catchUp(fd *os.File, exclusive bool) error {
	info, err := fd.Stat()
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	var ino uint64
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		ino = st.Ino
	}
	size := info.Size()
	if ino != l.ino || size < l.offset {
		l.ino, l.offset, l.entries = ino, 0, map[int]*Entry{}
	}
	if size == l.offset {
		return nil
	}
	buf := make([]byte, size-l.offset)
	if _, err := fd.ReadAt(buf, l.offset); err != nil {
		return fmt.Errorf("journal: reading %s: %w", fd.Name(), err)
	}
	end := bytes.LastIndexByte(buf, '\n') + 1
	for line := range bytes.SplitSeq(buf[:end], []byte{'\n'}) {
		var r record
		if len(line) == 0 || json.Unmarshal(line, &r) != nil {
			continue
		}
		apply(l.entries, &r)
	}
	l.offset += int64(end)
	if end < len(buf) && exclusive {
		if err := fd.Truncate(l.offset); err != nil {
			return fmt.Errorf("journal: cutting a torn line from %s: %w", fd.Name(), err)
		}
	}
	return nil
}

// sweep removes the files written last a TTL ago, at most every
// sweepEvery (keep is the file just made).
func (f *File) sweep(keep string) {
	now := f.opts.Now()
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
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".jsonl")
		if !ok || id == keep {
			continue
		}
		if info, err := e.Info(); err == nil && now.Sub(info.ModTime()) > f.opts.TTL {
			_ = os.Remove(filepath.Join(f.dir, e.Name()))
			f.mu.Lock()
			delete(f.logs, id)
			f.mu.Unlock()
		}
	}
}
