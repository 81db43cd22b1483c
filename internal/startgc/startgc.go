// Package startgc keeps the garbage collector idle while a process starts.
//
// A process's start allocates what it keeps: the package variables of
// ~750 linked packages (the AWS SDKs' endpoint tables and schemas, the
// JSON Schema meta-schemas), then the compiled guest. With Go's 4 MiB
// minimum heap goal the collector runs several full cycles during that
// start, each marking everything allocated so far and freeing almost
// nothing: measured, a third of `pml version`'s instructions. So collection
// is off from this package's initialisation until Done, with a memory
// limit as the bound meanwhile: past it the collector runs all the same.
//
// Import it from main packages only, and call Done once the process is
// ready to serve (the Lambda functions after their init, the pml command
// once its service is built, or after its one execution for pml run and
// pml resume). A process that never calls Done gets the
// collector back after a few seconds anyway. GOGC=off, or a lower
// GOMEMLIMIT, in the environment are left as they are.
package startgc

import (
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// startLimit bounds the heap while collection is off: above what a start
// allocates (about 30 MiB, the guest compiled included), below the
// smallest Lambda function's memory (128 MB).
const startLimit = 64 << 20

// fallback is when collection comes back without a Done.
const fallback = 5 * time.Second

var (
	once    sync.Once
	restore func()
	// done is set once the collector is back (for the tests: the fallback
	// may fire before a slow test looks).
	done atomic.Bool
)

func init() {
	percent := debug.SetGCPercent(-1)
	if percent < 0 {
		// Collection was already off (GOGC=off): nothing to restore.
		return
	}
	limit := debug.SetMemoryLimit(-1)
	debug.SetMemoryLimit(min(limit, startLimit))
	t := time.AfterFunc(fallback, Done)
	restore = func() {
		t.Stop()
		debug.SetMemoryLimit(limit)
		debug.SetGCPercent(percent)
	}
}

// Done turns the garbage collector back on as the environment set it
// (GOGC, GOMEMLIMIT). Only the first call does anything.
func Done() {
	once.Do(func() {
		if restore != nil {
			restore()
		}
		done.Store(true)
	})
}
