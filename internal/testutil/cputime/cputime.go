// Package cputime reads the CPU time the process has used, for benchmarks
// that report it per operation beside the wall time: on a machine shared
// with other work, wall time mostly measures the run queue, while CPU
// time still measures what an operation costs.
package cputime
