//go:build !linux

package admission

// residentBytes is 0: ProcessRSS falls back to Go's own count.
func residentBytes() int64 { return 0 }
