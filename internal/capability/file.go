package capability

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pml-sandbox/pml/internal/atomicfile"
	"github.com/pml-sandbox/pml/internal/fault"
	"golang.org/x/sys/unix"
)

// FileRegistry keeps every capability version in one JSON file, so separate
// pml commands see each other's capabilities. A write takes an exclusive
// flock on a lock file beside it, re-reads the file and replaces it
// (atomicfile): concurrent processes never lose a version or read half a
// file.
//
// Reads come from the document held in memory, which one stat per read
// checks against the file and which is decoded again only when the file was
// replaced: an execution that resolves a name pays a stat and a map
// look-up, not a decode of every capability saved. Call counts live in a
// second file beside it (path + ".calls"), so counting never replaces the
// definitions every process holds; drafts live in a directory beside it
// (path + ".drafts", one file each: filedraft.go), so a save never rewrites
// them and a draft never rewrites the definitions.
type FileRegistry struct {
	path string

	dmu    sync.Mutex
	drafts map[string]cachedDraft // the drafts directory's files as last read

	mu    sync.Mutex
	defs  heldFile // the definitions file as last loaded
	view  *fileView
	calls heldFile // the call counts file as last loaded
	count map[string]int64
	gen   uint64 // bumped on every reload of either file
}

type fileDoc struct {
	Capabilities map[string][]Capability `json:"capabilities"` // name → versions, oldest first
	// Namespaces are the owners of each namespace published in since
	// owners were recorded.
	Namespaces map[string]fileNamespace `json:"namespaces,omitempty"`
	// Drafts are the drafts of a file written before drafts had a
	// directory of their own: read, and moved there by the next write.
	Drafts map[string]Draft `json:"drafts,omitempty"`
}

type fileNamespace struct {
	Owners []string  `json:"owners"`
	Since  time.Time `json:"since"` // the first publication that recorded them
}

// fileView is a loaded definitions file, indexed.
type fileView struct {
	doc        fileDoc
	namespaces map[string]bool
}

// NewFileRegistry uses path (created on first save).
func NewFileRegistry(path string) *FileRegistry { return &FileRegistry{path: path} }

func (r *FileRegistry) callsPath() string { return r.path + ".calls" }

// heldFile is a file's identity as last read, with the file kept open:
// while it is open its inode cannot be reused, so a path that still names
// the same file (os.SameFile), with the same size and modification time,
// still has the content read from it. Every writer replaces the file
// (atomicfile), never edits it in place.
type heldFile struct {
	loaded bool
	f      *os.File // nil when the file did not exist
	info   os.FileInfo
}

// current reports whether path still names the file last read.
func (h *heldFile) current(path string) (bool, error) {
	if !h.loaded {
		return false, nil
	}
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return h.f == nil, nil
	}
	if err != nil {
		return false, fmt.Errorf("capabilities: %w", err)
	}
	return h.f != nil && os.SameFile(h.info, st) && st.Size() == h.info.Size() && st.ModTime().Equal(h.info.ModTime()), nil
}

// read opens path and reads it through the opened file, which h then
// holds (nil data and no error when the file does not exist).
func (h *heldFile) read(path string) ([]byte, error) {
	h.close()
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		h.loaded = true
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("capabilities: %w", err)
	}
	info, err := f.Stat()
	if err == nil {
		var data []byte
		if data, err = io.ReadAll(f); err == nil {
			h.loaded, h.f, h.info = true, f, info
			return data, nil
		}
	}
	f.Close()
	return nil, fmt.Errorf("capabilities: %w", err)
}

func (h *heldFile) close() {
	if h.f != nil {
		h.f.Close()
	}
	*h = heldFile{}
}

// Close releases the files the registry holds open.
func (r *FileRegistry) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.defs.close()
	r.calls.close()
	r.view, r.count = nil, nil
	return nil
}

func decodeDoc(path string, data []byte) (fileDoc, error) {
	doc := fileDoc{Capabilities: map[string][]Capability{}}
	if data == nil {
		return doc, nil
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return fileDoc{}, fmt.Errorf("capabilities: %s is corrupt: %w", path, err)
	}
	if doc.Capabilities == nil {
		doc.Capabilities = map[string][]Capability{}
	}
	return doc, nil
}

// fresh returns the current view and call counts, reloading whichever file
// was replaced since it was last read. Callers hold r.mu.
func (r *FileRegistry) fresh() (*fileView, map[string]int64, error) {
	ok, err := r.defs.current(r.path)
	if err != nil {
		return nil, nil, err
	}
	if !ok || r.view == nil {
		data, err := r.defs.read(r.path)
		if err != nil {
			return nil, nil, err
		}
		doc, err := decodeDoc(r.path, data)
		if err != nil {
			r.defs.close()
			return nil, nil, err
		}
		v := &fileView{doc: doc, namespaces: map[string]bool{}}
		for name, versions := range doc.Capabilities {
			if len(versions) > 0 {
				v.namespaces[versions[0].Namespace()] = true
			} else {
				delete(doc.Capabilities, name)
			}
		}
		r.view = v
		r.gen++
	}
	if ok, err = r.calls.current(r.callsPath()); err != nil {
		return nil, nil, err
	}
	if !ok || r.count == nil {
		data, err := r.calls.read(r.callsPath())
		if err != nil {
			return nil, nil, err
		}
		count := map[string]int64{}
		if data != nil {
			if err := json.Unmarshal(data, &count); err != nil {
				r.calls.close()
				return nil, nil, fmt.Errorf("capabilities: %s is corrupt: %w", r.callsPath(), err)
			}
		}
		r.count = count
		r.gen++
	}
	return r.view, r.count, nil
}

// latest is name's newest version with its call count.
func latest(v *fileView, count map[string]int64, name string) (Capability, bool) {
	versions := v.doc.Capabilities[name]
	if len(versions) == 0 {
		return Capability{}, false
	}
	c := versions[len(versions)-1]
	// Counts saved in the document itself (before counts had a file of
	// their own) are kept as a base.
	c.Calls += count[name]
	return c, true
}

// lock takes the flock beside the file (exclusive), for a read-modify-write.
func (r *FileRegistry) lock() (unlock func(), err error) {
	if err := os.MkdirAll(filepath.Dir(r.path), 0o700); err != nil {
		return nil, fmt.Errorf("capabilities: %w", err)
	}
	f, err := os.OpenFile(r.path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("capabilities: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("capabilities: lock: %w", err)
	}
	return func() {
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
	}, nil
}

// errNoWrite ends an update that found nothing to change.
var errNoWrite = errors.New("nothing to write")

// update changes the definitions file: under the flock, f changes a copy
// of the document as it is in the file (the maps copied, their values
// shared: f replaces what it changes, never edits it in place), which
// then replaces the file; then, when set, runs still under the flock (a
// draft's closing, after the version it became). f's errNoWrite leaves
// the file alone. Drafts a file of an older release holds move to the
// drafts directory on the way.
func (r *FileRegistry) update(f func(doc *fileDoc, now time.Time) error, then func(now time.Time) error) error {
	unlock, err := r.lock()
	if err != nil {
		return err
	}
	defer unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	// Under the lock the file cannot change: the view fresh returns is
	// the file's content.
	v, _, err := r.fresh()
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	doc := fileDoc{Capabilities: maps.Clone(v.doc.Capabilities), Namespaces: maps.Clone(v.doc.Namespaces), Drafts: v.doc.Drafts}
	if doc.Namespaces == nil {
		doc.Namespaces = map[string]fileNamespace{}
	}
	if err := f(&doc, now); err != nil {
		if errors.Is(err, errNoWrite) {
			return nil
		}
		return err
	}
	if err := r.moveLegacyDrafts(doc.Drafts, now); err != nil {
		return err
	}
	doc.Drafts = nil
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(r.path, out); err != nil {
		return fmt.Errorf("capabilities: %w", err)
	}
	if then != nil {
		return then(now)
	}
	return nil
}

// Save implements Registry: the owners are read, checked, and the version
// appended under the flock, in one replacement of the file.
func (r *FileRegistry) Save(_ context.Context, c Capability, allow Allow) (Saved, error) {
	if err := Validate(c); err != nil {
		return Saved{}, err
	}
	stamp(&c)
	var out Saved
	var draft Draft
	err := r.update(func(doc *fileDoc, now time.Time) error {
		if c.Draft != "" {
			d, ok, err := r.draftLocked(c.Draft, doc.Drafts)
			if err != nil {
				return err
			}
			if err := publishable(c, d, ok, now); err != nil {
				return err
			}
			draft = d
		}
		versions := doc.Capabilities[c.Name]
		prev, existing := equivalentOf(c, versions)
		if existing && c.Draft == "" {
			// Nothing is published: no decision to check.
			out = Saved{Capability: prev, Existing: true}
			return errNoWrite
		}
		ns := c.Namespace()
		owners := doc.Namespaces[ns].Owners
		if allow != nil {
			if err := allow(slices.Clone(owners)); err != nil {
				return err
			}
		}
		if existing {
			out = Saved{Capability: prev, Existing: true}
		} else {
			c.Version = len(versions) + 1
			c.ID = ID(c.Name, c.Version)
			c.CreatedAt, c.UpdatedAt, c.Calls = now, now, 0
			if len(versions) > 0 {
				c.CreatedAt = versions[0].CreatedAt
				c.Calls = versions[len(versions)-1].Calls
			}
			doc.Capabilities[c.Name] = append(slices.Clip(versions), c)
			if len(owners) == 0 && c.Publisher != "" {
				// An anonymous publisher (auth off) owns nothing.
				doc.Namespaces[ns] = fileNamespace{Owners: []string{c.Publisher}, Since: now}
			}
			out = Saved{Capability: c}
		}
		return nil
	}, func(now time.Time) error {
		if c.Draft == "" {
			return nil
		}
		// The version is written: the draft's closing follows under the
		// same lock. A crash between leaves the draft pending beside its
		// version; publishing it again finds the version equivalent and
		// closes it as that version, never a second one.
		return r.writeDraft(closed(draft, DraftPublished, c.Publisher, "", out.Version, now))
	})
	if err != nil {
		return Saved{}, err
	}
	return out, nil
}

// publishable checks that the draft c is published from (d, found when
// ok) is pending at now and proposes what c is.
func publishable(c Capability, d Draft, ok bool, now time.Time) error {
	switch {
	case !ok || !now.Before(d.ExpiresAt):
		return fault.New(fault.NotFound, "no draft %s (it may have expired)", c.Draft)
	case d.Status != DraftPending:
		return fault.New(fault.Conflict, "draft %s is %s already", c.Draft, d.Status)
	case d.Name != c.Name || d.CodeHash != c.CodeHash:
		return fault.New(fault.Conflict, "draft %s proposes another capability or code than the one being published", c.Draft)
	}
	return nil
}

// closed is d closed with status by principal at now.
func closed(d Draft, status, principal, reason string, version int, now time.Time) Draft {
	d.Status, d.ClosedBy, d.Reason, d.Version = status, principal, reason, version
	d.ClosedAt = &now
	return d
}

// Owners implements Registry.
func (r *FileRegistry) Owners(_ context.Context, ns string) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, _, err := r.fresh()
	if err != nil {
		return nil, err
	}
	return slices.Clone(v.doc.Namespaces[ns].Owners), nil
}

// sortDrafts sorts drafts oldest first (then by id).
func sortDrafts(ds []Draft) {
	slices.SortFunc(ds, func(a, b Draft) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}

// Get implements Registry.
func (r *FileRegistry) Get(_ context.Context, name string, version int) (Capability, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, count, err := r.fresh()
	if err != nil {
		return Capability{}, err
	}
	last, ok := latest(v, count, name)
	versions := v.doc.Capabilities[name]
	switch {
	case !ok:
		return Capability{}, notFound(name, version)
	case version == 0:
		return last, nil
	case version > len(versions):
		return Capability{}, notFound(name, version)
	}
	out := versions[version-1]
	out.Calls = last.Calls
	return out, nil
}

// Lookup implements Registry: from the document in memory.
func (r *FileRegistry) Lookup(_ context.Context, names []string) (map[string]Capability, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, count, err := r.fresh()
	if err != nil {
		return nil, err
	}
	out := make(map[string]Capability, len(names))
	for _, name := range names {
		if c, ok := latest(v, count, name); ok {
			out[name] = c
		}
	}
	return out, nil
}

// List implements Registry.
func (r *FileRegistry) List(_ context.Context) ([]Capability, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, count, err := r.fresh()
	if err != nil {
		return nil, err
	}
	return listView(v, count), nil
}

func listView(v *fileView, count map[string]int64) []Capability {
	out := make([]Capability, 0, len(v.doc.Capabilities))
	for name := range v.doc.Capabilities {
		c, _ := latest(v, count, name)
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Capability) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Changes implements Registry: everything when either file was replaced
// since mark (a stat of each tells), nothing otherwise. The mark is this
// registry value's own: another FileRegistry's marks mean nothing here.
func (r *FileRegistry) Changes(_ context.Context, mark string) (Changes, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, count, err := r.fresh()
	if err != nil {
		return Changes{}, err
	}
	next := strconv.FormatUint(r.gen, 10)
	if mark == next {
		return Changes{Next: next}, nil
	}
	return Changes{Full: true, Caps: listView(v, count), Next: next}, nil
}

// HasNamespace implements Registry.
func (r *FileRegistry) HasNamespace(_ context.Context, ns string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, _, err := r.fresh()
	if err != nil {
		return false, err
	}
	return v.namespaces[ns], nil
}

// AddCalls implements Registry: one replacement of the counts file for the
// whole batch.
func (r *FileRegistry) AddCalls(_ context.Context, counts map[string]int64) error {
	if len(counts) == 0 {
		return nil
	}
	unlock, err := r.lock()
	if err != nil {
		return err
	}
	defer unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	v, old, err := r.fresh()
	if err != nil {
		return err
	}
	next := make(map[string]int64, len(old)+len(counts))
	for name, n := range old {
		next[name] = n
	}
	for name, n := range counts {
		if _, ok := v.doc.Capabilities[name]; ok {
			next[name] += n
		}
	}
	out, err := json.Marshal(next)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(r.callsPath(), out); err != nil {
		return fmt.Errorf("capabilities: %w", err)
	}
	return nil
}

// SeedFile writes a new registry file at path holding caps, each as its
// version 1 published by its Publisher: a registry of any size made at
// once, for benchmarks and bulk imports (Save would rewrite the file once
// per capability). Every capability is validated as Save validates it. A
// file already at path is refused, never replaced: versions are not
// rewritten.
func SeedFile(path string, caps []Capability) error {
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		return fault.New(fault.Conflict, "capabilities: %s exists; seeding makes a new registry only", path)
	}
	now := time.Now().UTC()
	doc := fileDoc{Capabilities: make(map[string][]Capability, len(caps)), Namespaces: map[string]fileNamespace{}}
	for _, c := range caps {
		if err := Validate(c); err != nil {
			return err
		}
		if _, dup := doc.Capabilities[c.Name]; dup {
			return fault.New(fault.InvalidRequest, "capability %s given twice", c.Name)
		}
		// The equivalence is left to a later save to compute (it costs
		// a parse): a seed of thousands stays quick.
		c.Version, c.ID, c.CreatedAt, c.UpdatedAt, c.Calls, c.CodeHash = 1, ID(c.Name, 1), now, now, 0, CodeHash(c.Code)
		doc.Capabilities[c.Name] = []Capability{c}
		if _, owned := doc.Namespaces[c.Namespace()]; !owned && c.Publisher != "" {
			doc.Namespaces[c.Namespace()] = fileNamespace{Owners: []string{c.Publisher}, Since: now}
		}
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("capabilities: %w", err)
	}
	if err := atomicfile.Write(path, out); err != nil {
		return fmt.Errorf("capabilities: %w", err)
	}
	return nil
}
