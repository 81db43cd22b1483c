package oauthclient

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"

	"github.com/pml-sandbox/pml/internal/atomicfile"
)

// ErrNoCredentials is returned by Load when the store holds none.
var ErrNoCredentials = errors.New("no stored credentials")

// ErrConflict is returned by Save when the stored version is no longer
// the one the caller read: someone else replaced it first.
var ErrConflict = errors.New("the stored credentials changed since they were read")

// Store keeps one server's credentials. Save is a compare-and-swap on the
// version Load returned, so that two processes refreshing at once cannot
// lose a rotated refresh token: the loser is told and reads again.
type Store interface {
	// Load returns the credentials and their version, or
	// ErrNoCredentials.
	Load(ctx context.Context) (*Credentials, string, error)
	// Save replaces version prev ("" when Load found none) with c and
	// returns the new version, or fails with ErrConflict.
	Save(ctx context.Context, c *Credentials, prev string) (string, error)
	// Where names the store for people: a path or an ARN.
	Where() string
}

// FileStore keeps credentials in one JSON file, mode 0600, in a directory
// of mode 0700. Writes are atomic, and serialised between processes by an
// advisory lock on a file beside it.
type FileStore struct{ Path string }

// FilePath is where a FileStore in dir keeps server's credentials: the
// name escaped so that no server name leaves dir.
func FilePath(dir, server string) string {
	return filepath.Join(dir, url.PathEscape(server)+".json")
}

// Where returns the path.
func (s FileStore) Where() string { return s.Path }

// Load reads the file; its version is a hash of its content.
func (s FileStore) Load(ctx context.Context) (*Credentials, string, error) {
	data, err := os.ReadFile(s.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", ErrNoCredentials
	}
	if err != nil {
		return nil, "", err
	}
	var c Credentials
	if err := json.Unmarshal(data, &c); err != nil {
		// The decoder's error may quote the file; say where instead.
		return nil, "", fmt.Errorf("%s is not a credentials document", s.Path)
	}
	return &c, fileVersion(data), nil
}

func fileVersion(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:12])
}

// Save writes c if the file still has version prev.
func (s FileStore) Save(ctx context.Context, c *Credentials, prev string) (string, error) {
	if err := os.MkdirAll(filepath.Dir(s.Path), 0o700); err != nil {
		return "", err
	}
	unlock, err := lockFile(s.Path + ".lock")
	if err != nil {
		return "", err
	}
	defer unlock()
	cur, err := os.ReadFile(s.Path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if prev != "" {
			return "", ErrConflict
		}
	case err != nil:
		return "", err
	case fileVersion(cur) != prev:
		return "", ErrConflict
	}
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return "", err
	}
	data = append(data, '\n')
	if bytes.Equal(data, cur) {
		return prev, nil
	}
	if err := atomicfile.Write(s.Path, data); err != nil {
		return "", err
	}
	return fileVersion(data), nil
}
