// Package userdata locates the files pml keeps between commands (traces,
// capabilities) in the user's data directory.
package userdata

import (
	"os"
	"path/filepath"
)

// Path returns $env when set, else $XDG_DATA_HOME/pml/name (by default
// ~/.local/share/pml/name).
func Path(env, name string) string {
	if p := os.Getenv(env); p != "" {
		return p
	}
	dir := os.Getenv("XDG_DATA_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = os.TempDir()
		}
		dir = filepath.Join(home, ".local", "share")
	}
	return filepath.Join(dir, "pml", name)
}
