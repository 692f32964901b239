package main

import (
	"runtime/debug"
	"testing"
)

func TestGCPercent(t *testing.T) {
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })

	if got := setGCPercent(func(string) string { return "" }); got != defaultGCPercent {
		t.Fatalf("without GOGC: %d, want %d", got, defaultGCPercent)
	}
	if got := debug.SetGCPercent(defaultGCPercent); got != defaultGCPercent {
		t.Fatalf("without GOGC the runtime runs at %d, want %d", got, defaultGCPercent)
	}

	// An operator's GOGC (read by the runtime at start) is left alone.
	debug.SetGCPercent(300)
	env := func(k string) string {
		if k == "GOGC" {
			return "300"
		}
		return ""
	}
	if got := setGCPercent(env); got != 300 {
		t.Fatalf("with GOGC=300: %d, want 300", got)
	}
	if got := debug.SetGCPercent(300); got != 300 {
		t.Fatalf("with GOGC=300 the runtime runs at %d, want 300", got)
	}
}
