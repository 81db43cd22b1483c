package capability

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/pml-sandbox/pml/internal/atomicfile"
	"golang.org/x/sys/unix"
)

// FileRegistry keeps every capability version in one JSON file, so separate
// pml commands see each other's capabilities. Each operation takes an
// exclusive flock on a lock file beside it and re-reads the file, and
// writes go to a temporary file renamed into place: concurrent processes
// never lose a version or read half a file.
type FileRegistry struct {
	path string
}

type fileDoc struct {
	Capabilities map[string][]Capability `json:"capabilities"` // name → versions, oldest first
}

// NewFileRegistry uses path (created on first save).
func NewFileRegistry(path string) *FileRegistry { return &FileRegistry{path: path} }

// locked runs f with the lock held and the current document loaded; when
// write is true the (possibly changed) document is saved afterwards.
func (r *FileRegistry) locked(write bool, f func(doc *fileDoc) error) error {
	if err := os.MkdirAll(filepath.Dir(r.path), 0o700); err != nil {
		return fmt.Errorf("capabilities: %w", err)
	}
	lock, err := os.OpenFile(r.path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("capabilities: %w", err)
	}
	defer lock.Close()
	how := unix.LOCK_SH
	if write {
		how = unix.LOCK_EX
	}
	if err := unix.Flock(int(lock.Fd()), how); err != nil {
		return fmt.Errorf("capabilities: lock: %w", err)
	}
	defer unix.Flock(int(lock.Fd()), unix.LOCK_UN)

	doc := &fileDoc{Capabilities: map[string][]Capability{}}
	data, err := os.ReadFile(r.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("capabilities: %w", err)
	default:
		if err := json.Unmarshal(data, doc); err != nil {
			return fmt.Errorf("capabilities: %s is corrupt: %w", r.path, err)
		}
		if doc.Capabilities == nil {
			doc.Capabilities = map[string][]Capability{}
		}
	}
	if err := f(doc); err != nil {
		return err
	}
	if !write {
		return nil
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(r.path, out); err != nil {
		return fmt.Errorf("capabilities: %w", err)
	}
	return nil
}

// Save implements Registry.
func (r *FileRegistry) Save(_ context.Context, c Capability) (Capability, error) {
	if err := Validate(c); err != nil {
		return Capability{}, err
	}
	err := r.locked(true, func(doc *fileDoc) error {
		versions := doc.Capabilities[c.Name]
		now := time.Now().UTC()
		c.Version = len(versions) + 1
		c.ID = ID(c.Name, c.Version)
		c.CreatedAt, c.UpdatedAt, c.Calls = now, now, 0
		if len(versions) > 0 {
			c.CreatedAt = versions[0].CreatedAt
			c.Calls = versions[len(versions)-1].Calls
		}
		doc.Capabilities[c.Name] = append(versions, c)
		return nil
	})
	return c, err
}

// Get implements Registry.
func (r *FileRegistry) Get(_ context.Context, name string, version int) (Capability, error) {
	var out Capability
	err := r.locked(false, func(doc *fileDoc) error {
		versions := doc.Capabilities[name]
		switch {
		case len(versions) == 0:
			return notFound(name, version)
		case version == 0:
			out = versions[len(versions)-1]
		case version > len(versions):
			return notFound(name, version)
		default:
			out = versions[version-1]
		}
		out.Calls = versions[len(versions)-1].Calls
		return nil
	})
	return out, err
}

// List implements Registry.
func (r *FileRegistry) List(_ context.Context) ([]Capability, error) {
	out := []Capability{}
	err := r.locked(false, func(doc *fileDoc) error {
		for _, versions := range doc.Capabilities {
			if len(versions) > 0 {
				out = append(out, versions[len(versions)-1])
			}
		}
		return nil
	})
	slices.SortFunc(out, func(a, b Capability) int { return strings.Compare(a.Name, b.Name) })
	return out, err
}

// IncrementCalls implements Registry.
func (r *FileRegistry) IncrementCalls(_ context.Context, name string) error {
	return r.locked(true, func(doc *fileDoc) error {
		versions := doc.Capabilities[name]
		if len(versions) == 0 {
			return notFound(name, 0)
		}
		versions[len(versions)-1].Calls++
		return nil
	})
}
