//go:build !linux

package openapi

import "io/fs"

// fingerprintOf is Linux's only: elsewhere a file's digest is always
// taken by reading it.
func fingerprintOf(fs.FileInfo) (fingerprint, bool) { return fingerprint{}, false }
