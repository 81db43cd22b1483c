package admission

import (
	"runtime"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// fallbackMemory is the budget where the machine's memory cannot be read.
const fallbackMemory = 2 << 30

// DefaultMemory is the default memory budget: three quarters of the
// cgroup's memory limit when one is set (the container is the server's
// own), else half the machine's memory (shared with everything else on
// it).
func DefaultMemory() int64 {
	if n, err := memlimit.FromCgroup(); err == nil && n > 0 {
		return int64(n / 4 * 3)
	}
	if n, err := memlimit.FromSystem(); err == nil && n > 0 {
		return int64(n / 2)
	}
	return fallbackMemory
}

// ProcessRSS is the process's resident size in bytes: what the kernel
// counts where it says (rss_linux.go), else what Go has taken from the
// system.
func ProcessRSS() int64 {
	if n := residentBytes(); n > 0 {
		return n
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.Sys)
}
