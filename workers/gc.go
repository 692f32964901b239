package main

import (
	"runtime/debug"
)

// defaultGCPercent is the worker's garbage collection target when GOGC is
// not set: the heap may grow to 1.5 times what is live, not the Go
// runtime's 2 times. Most of a worker's live heap is its cached key
// workflows; with 2,000 live keys the default let the process peak at 218
// MB against 179 MB with 50, for the same throughput and 0.1 ms more worker
// CPU per delivery (docs/performance.md, "Memory and many keys").
const defaultGCPercent = 50

// setGCPercent applies defaultGCPercent unless the operator set GOGC, which
// the Go runtime has applied already.
func setGCPercent(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
}
