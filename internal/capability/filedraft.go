package capability

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pml-sandbox/pml/internal/atomicfile"
	"github.com/pml-sandbox/pml/internal/fault"
)

// The file registry's drafts: one JSON file each in path + ".drafts"
// (<id>.json), written whole and renamed into place (atomicfile), so a
// draft's write costs its own size whatever else waits, and a save of a
// capability never touches them. Every change takes the registry's flock,
// as a save does: the limits (DraftLimits) count what every process sees.
// Reads take no lock; a file is decoded again only when it was replaced.

// cachedDraft is a draft's file as last decoded.
type cachedDraft struct {
	size  int64
	mtime time.Time
	draft Draft
}

func (r *FileRegistry) draftsDir() string { return r.path + ".drafts" }

func (r *FileRegistry) draftPath(id string) string { return filepath.Join(r.draftsDir(), id+".json") }

// readDrafts returns every draft the directory holds, expired ones too,
// by id, decoding only the files replaced since they were last read.
func (r *FileRegistry) readDrafts() (map[string]Draft, error) {
	entries, err := os.ReadDir(r.draftsDir())
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("capabilities: %w", err)
	}
	r.dmu.Lock()
	defer r.dmu.Unlock()
	next := make(map[string]cachedDraft, len(entries))
	out := make(map[string]Draft, len(entries))
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || CheckDraftID(id) != nil {
			continue // a temporary file, or nothing of ours
		}
		info, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		c, ok := r.drafts[id]
		if !ok || c.size != info.Size() || !c.mtime.Equal(info.ModTime()) {
			d, found, err := readDraftFile(filepath.Join(r.draftsDir(), e.Name()))
			if err != nil {
				return nil, err
			}
			if !found {
				continue
			}
			c = cachedDraft{size: info.Size(), mtime: info.ModTime(), draft: d}
		}
		next[id] = c
		out[id] = c.draft
	}
	r.drafts = next
	return out, nil
}

// readDraftFile decodes one draft's file; found is false when it is gone.
func readDraftFile(path string) (Draft, bool, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Draft{}, false, nil
	}
	if err != nil {
		return Draft{}, false, fmt.Errorf("capabilities: %w", err)
	}
	var d Draft
	if err := json.Unmarshal(data, &d); err != nil {
		return Draft{}, false, fmt.Errorf("capabilities: %s is corrupt: %w", path, err)
	}
	return d, true, nil
}

// writeDraft replaces d's file (the caller holds the flock).
func (r *FileRegistry) writeDraft(d Draft) error {
	data, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(r.draftsDir(), 0o700); err != nil {
		return fmt.Errorf("capabilities: %w", err)
	}
	if err := atomicfile.Write(r.draftPath(d.ID), data); err != nil {
		return fmt.Errorf("capabilities: %w", err)
	}
	return nil
}

// moveLegacyDrafts writes the drafts an older release kept in the
// definitions file to the directory (those it has not got already), so
// that the file can drop them (the caller holds the flock).
func (r *FileRegistry) moveLegacyDrafts(legacy map[string]Draft, now time.Time) error {
	for id, d := range legacy {
		if !now.Before(d.ExpiresAt) || CheckDraftID(id) != nil {
			continue
		}
		if _, err := os.Stat(r.draftPath(id)); err == nil {
			continue
		}
		if err := r.writeDraft(d); err != nil {
			return err
		}
	}
	return nil
}

// draftLocked is draft id as the directory has it, else as the
// definitions file of an older release (legacy) does.
func (r *FileRegistry) draftLocked(id string, legacy map[string]Draft) (Draft, bool, error) {
	if err := CheckDraftID(id); err != nil {
		return Draft{}, false, err
	}
	d, found, err := readDraftFile(r.draftPath(id))
	if err != nil || found {
		return d, found, err
	}
	d, found = legacy[id]
	return d, found, nil
}

// allDrafts are the directory's drafts and those an older release's file
// holds, the directory's winning.
func (r *FileRegistry) allDrafts() (map[string]Draft, error) {
	r.mu.Lock()
	v, _, err := r.fresh()
	var legacy map[string]Draft
	if err == nil {
		legacy = v.doc.Drafts
	}
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	out, err := r.readDrafts()
	if err != nil {
		return nil, err
	}
	for id, d := range legacy {
		if _, ok := out[id]; !ok {
			out[id] = d
		}
	}
	return out, nil
}

// PutDraft implements Registry: under the flock, the drafts kept are
// counted against limits (the expired ones removed on the way), the
// oldest closed ones make room where the total is reached, and the
// draft's own file is written.
func (r *FileRegistry) PutDraft(_ context.Context, d Draft, limits DraftLimits) error {
	if err := CheckDraftID(d.ID); err != nil {
		return err
	}
	unlock, err := r.lock()
	if err != nil {
		return err
	}
	defer unlock()
	all, err := r.allDrafts()
	if err != nil {
		return err
	}
	if _, dup := all[d.ID]; dup {
		return fault.New(fault.Conflict, "draft %s exists", d.ID)
	}
	now := time.Now()
	var kept []keptDraft
	for id, k := range all {
		if !now.Before(k.ExpiresAt) {
			_ = os.Remove(r.draftPath(id)) // expired: nothing reads it again
			continue
		}
		kept = append(kept, keptDraft{ID: id, Author: k.Author, Status: k.Status, CreatedAt: k.CreatedAt})
	}
	evict, err := admit(kept, d, limits)
	if err != nil {
		return err
	}
	if err := r.writeDraft(d); err != nil {
		return err
	}
	for _, id := range evict {
		_ = os.Remove(r.draftPath(id))
	}
	return nil
}

// GetDraft implements Registry.
func (r *FileRegistry) GetDraft(_ context.Context, id string) (Draft, error) {
	if err := CheckDraftID(id); err != nil {
		return Draft{}, err
	}
	r.mu.Lock()
	v, _, err := r.fresh()
	r.mu.Unlock()
	if err != nil {
		return Draft{}, err
	}
	d, ok, err := r.draftLocked(id, v.doc.Drafts)
	if err != nil {
		return Draft{}, err
	}
	if !ok || !time.Now().Before(d.ExpiresAt) {
		return Draft{}, fault.New(fault.NotFound, "no draft %s (it may have expired)", id)
	}
	return d, nil
}

// Drafts implements Registry.
func (r *FileRegistry) Drafts(_ context.Context) ([]Draft, error) {
	all, err := r.allDrafts()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := []Draft{}
	for _, d := range all {
		if now.Before(d.ExpiresAt) {
			out = append(out, d)
		}
	}
	sortDrafts(out)
	return out, nil
}

// CloseDraft implements Registry: under the flock, the draft's file is
// read and replaced closed.
func (r *FileRegistry) CloseDraft(_ context.Context, id, status, principal, reason string) (Draft, error) {
	unlock, err := r.lock()
	if err != nil {
		return Draft{}, err
	}
	defer unlock()
	r.mu.Lock()
	v, _, err := r.fresh()
	r.mu.Unlock()
	if err != nil {
		return Draft{}, err
	}
	d, ok, err := r.draftLocked(id, v.doc.Drafts)
	now := time.Now().UTC()
	switch {
	case err != nil:
		return Draft{}, err
	case !ok || !now.Before(d.ExpiresAt):
		return Draft{}, fault.New(fault.NotFound, "no draft %s (it may have expired)", id)
	case d.Status != DraftPending:
		return Draft{}, fault.New(fault.Conflict, "draft %s is %s already", id, d.Status)
	}
	out := closed(d, status, principal, reason, 0, now)
	return out, r.writeDraft(out)
}
