//go:build race

package httpapi_test

// raceEnabled: the race detector makes sync.Pool drop what is put in it and
// allocates shadow state per allocation, so transient peaks of the heap
// say nothing about the code under test; what is held still does.
const raceEnabled = true
