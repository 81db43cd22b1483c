// Package callgrind sends client requests to valgrind's callgrind tool, so
// a profiling build can count the instructions of chosen stretches of a
// run: ToggleCollect turns collection on or off for the calling thread
// (`valgrind --tool=callgrind --collect-atstart=no`), DumpStatsAt ends a
// stretch in a dump of its own. Outside valgrind the
// request is a few register rotations that change nothing. Only profiling
// builds (the callgrind build tag) call it.
package callgrind

import (
	"runtime"
	"unsafe"
)

// Callgrind's client requests (valgrind/callgrind.h): the tool base
// ('C', 'T') and the requests in the order it numbers them.
const (
	requestBase          = 'C'<<24 | 'T'<<16
	requestToggleCollect = requestBase + 2
	requestDumpStatsAt   = requestBase + 3
)

// ToggleCollect flips whether callgrind counts the calling thread's
// instructions. Lock the goroutine to its thread (runtime.LockOSThread)
// across a stretch it brackets.
func ToggleCollect() {
	args := [6]uintptr{requestToggleCollect}
	request(&args)
}

// DumpStatsAt writes callgrind's counts so far to a new dump file named by
// reason (its "Trigger: Client Request: reason" line) and zeroes them, so
// one run under `valgrind --tool=callgrind` can count every stretch of a
// program apart: each dump holds what ran since the one before.
func DumpStatsAt(reason string) {
	b := append([]byte(reason), 0)
	args := [6]uintptr{requestDumpStatsAt, uintptr(unsafe.Pointer(&b[0]))}
	request(&args)
	runtime.KeepAlive(b)
}
