//go:build !callgrind

package guest

import "github.com/tetratelabs/wazero"

// mark enters phase p (profiling builds only).
func mark(phase) {}

// markReset brackets a reset (profiling builds only).
func markReset(bool) {}

// defineProfileImports adds the imports of a profiling guest (profiling
// builds only).
func defineProfileImports(wazero.HostModuleBuilder) {}
