// Package callgrind sends client requests to valgrind's callgrind tool, so
// a profiling build can count the instructions of chosen stretches of a
// run (`valgrind --tool=callgrind --collect-atstart=no`): ToggleCollect
// turns collection on or off for the calling thread. Outside valgrind the
// request is a few register rotations that change nothing. Only profiling
// builds (the callgrind build tag) call it.
package callgrind

// Callgrind's client requests (valgrind/callgrind.h): the tool base
// ('C', 'T') and the requests in the order it numbers them.
const (
	requestBase          = 'C'<<24 | 'T'<<16
	requestToggleCollect = requestBase + 2
)

// ToggleCollect flips whether callgrind counts the calling thread's
// instructions. Lock the goroutine to its thread (runtime.LockOSThread)
// across a stretch it brackets.
func ToggleCollect() {
	args := [6]uintptr{requestToggleCollect}
	request(&args)
}
