// Package syncbuf is a byte buffer that writers and readers on different
// goroutines can share: a test's log output, a child process's stderr.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer behind a mutex. Its zero value is empty and
// unbounded.
type Buffer struct {
	// Max, when above zero, is how many bytes are kept; later writes are
	// accepted and dropped (enough output to explain a failure).
	Max int

	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Max > 0 && s.b.Len() >= s.Max {
		return len(p), nil
	}
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
