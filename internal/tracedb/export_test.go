package tracedb

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
