// Package startgc keeps the garbage collector idle while a process starts.
//
// A process's start allocates what it keeps: the clients, the sources and
// their schemas, the compiled guest. With Go's 4 MiB minimum heap goal the
// collector runs several full cycles during that start, each marking
// everything allocated so far and freeing almost nothing. So main turns
// collection off first thing, with Begin, until the process is ready to
// serve, with a memory limit as the bound meanwhile: past it the collector
// runs all the same.
//
// What it covers: main's own start, from its first statement (the Lambda
// functions' init, the pml command's wiring of its service, and for pml run
// and pml resume their one execution), and, in a main that imports
// startgc/atinit, most of package initialisation before it: the package
// variables of the packages initialised after that one (the JSON Schema
// meta-schemas, the SDKs' clients) with them. Only a main imports atinit,
// so tests and tools that link this package keep their collector.
//
// A process whose main never calls the returned function gets the
// collector back after a few seconds anyway. GOGC=off, or a lower
// GOMEMLIMIT, in the environment are left as they are.
package startgc

import (
	"context"
	"runtime/debug"
	"sync"
	"time"
)

// startLimit bounds the heap while collection is off: above what a start
// allocates (about 30 MiB, the guest compiled included), below the
// smallest Lambda function's memory (128 MB).
const startLimit = 64 << 20

// fallback is when collection comes back without a call of Begin's
// function: a start that never says it is over must not run without a
// collector.
const fallback = 5 * time.Second

// Begin turns the garbage collector off for the process's start and
// returns the function that turns it back on as the environment set it
// (GOGC, GOMEMLIMIT). Only the function's first call does anything.
//
// The collector's settings are the process's: call Begin once, from main,
// before anything else runs. Two starts overlapping would each restore
// what the other set.
//
// After Hold (package initialisation), Begin returns Hold's function: the
// start that began there goes on.
func Begin() (end func()) {
	held.mu.Lock()
	defer held.mu.Unlock()
	if end, held.end = held.end, nil; end != nil {
		return end
	}
	return begin(fallback)
}

// held is the start Hold began, until Begin takes it: like the collector's
// settings it keeps, it is the process's.
var held struct {
	mu  sync.Mutex
	end func()
}

// Hold turns the collector off as Begin does, from an init function
// (startgc/atinit's), and keeps the function that ends it for main's
// Begin. Without a Begin the collector comes back after the fallback's
// few seconds all the same.
func Hold() {
	held.mu.Lock()
	defer held.mu.Unlock()
	if held.end == nil {
		held.end = begin(fallback)
	}
}

func begin(after time.Duration) func() {
	percent := debug.SetGCPercent(-1)
	if percent < 0 {
		// Collection was already off (GOGC=off): nothing to restore.
		return func() {}
	}
	limit := debug.SetMemoryLimit(-1)
	debug.SetMemoryLimit(min(limit, startLimit))
	restore := func() {
		debug.SetMemoryLimit(limit)
		debug.SetGCPercent(percent)
	}
	var once sync.Once
	t := time.AfterFunc(after, func() { once.Do(restore) })
	return func() {
		once.Do(func() {
			t.Stop()
			restore()
		})
	}
}

type endKey struct{}

// NewContext returns ctx carrying end, for a main whose start ends deep in
// what it calls (the pml command: once its service is built, or after its
// one execution).
func NewContext(ctx context.Context, end func()) context.Context {
	return context.WithValue(ctx, endKey{}, end)
}

// End calls the function NewContext put in ctx: the start is over. Without
// one (a test calling the command in process) it does nothing.
func End(ctx context.Context) {
	if end, ok := ctx.Value(endKey{}).(func()); ok {
		end()
	}
}
