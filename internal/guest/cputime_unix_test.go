//go:build unix

package guest_test

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time the process has used so far (user and system).
// Benchmarks report it per operation beside the wall time: on a machine
// shared with other work, wall time mostly measures the run queue, while
// CPU time still measures what an operation costs.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
