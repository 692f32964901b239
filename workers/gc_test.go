package main

import (
	"runtime/debug"
	"testing"
)

func TestGCPercent(t *testing.T) {
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })

	setGCPercent(func(string) string { return "" })
	if got := debug.SetGCPercent(defaultGCPercent); got != defaultGCPercent {
		t.Fatalf("without GOGC the runtime runs at %d, want %d", got, defaultGCPercent)
	}

	// An operator's GOGC (applied by the runtime at start) is left alone.
	debug.SetGCPercent(300)
	setGCPercent(func(k string) string {
		if k == "GOGC" {
			return "300"
		}
		return ""
	})
	if got := debug.SetGCPercent(300); got != 300 {
		t.Fatalf("with GOGC=300 the runtime runs at %d, want 300", got)
	}
}
