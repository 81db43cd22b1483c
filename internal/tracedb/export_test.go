package tracedb

import "time"

// SetMaxLineBytes sets the bound on one line of the file store for a test
// and returns a func that restores it. Tests using it must not run in
// parallel.
func SetMaxLineBytes(n int) (restore func()) {
	old := maxLineBytes
	maxLineBytes = n
	return func() { maxLineBytes = old }
}

// MaxLineBytes is the bound in force.
func MaxLineBytes() int { return maxLineBytes }

// MaxWriteTries is the most attempts at one write.
const MaxWriteTries = maxWriteTries

// SetRetryBackoff sets the waits between write attempts for a test and
// returns a func that restores them. Tests using it must not run in
// parallel.
func SetRetryBackoff(initial, max time.Duration) (restore func()) {
	oldInitial, oldMax := retryInitial, retryMax
	retryInitial, retryMax = initial, max
	return func() { retryInitial, retryMax = oldInitial, oldMax }
}
