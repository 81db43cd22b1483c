//go:build !unix

package guest

import "context"

// withMemoryAllocator keeps wazero's default Go-slice memory where mmap is
// not available.
func withMemoryAllocator(ctx context.Context) context.Context { return ctx }
