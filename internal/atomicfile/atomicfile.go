// Package atomicfile replaces a file so that a reader sees the old content
// or the new, never a part, and a write that returned survives a crash.
package atomicfile

import (
	"os"
	"path/filepath"
	"strings"
)

// Write replaces path with data (mode 0600): through a synced temporary
// file beside it and a rename, then a sync of the directory, which makes
// the rename itself durable.
func Write(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+tempMark+"*")
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
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// tempMark is in the name of every temporary file Write makes.
const tempMark = ".tmp-"

// IsTemp reports whether a directory entry's name is one of Write's
// temporary files: one a crash between create and rename left behind, for
// a sweeper to remove.
func IsTemp(name string) bool {
	return strings.HasPrefix(name, ".") && strings.Contains(name, tempMark)
}
