package openapi

import (
	"io/fs"
	"syscall"
)

// fingerprintOf is what says a file is unchanged without reading it: its
// device, inode, size, modification and change times (the change time the
// kernel sets on every write, and no one can set back), as git's index
// does.
func fingerprintOf(fi fs.FileInfo) (fingerprint, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || !fi.Mode().IsRegular() {
		return fingerprint{}, false
	}
	return fingerprint{dev: uint64(st.Dev), ino: st.Ino, size: st.Size,
		mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}, true
}
