package main

import (
	"os"
	"regexp"
	"strconv"
	"testing"
)

// TestExitCodesAreDocumented holds the worker's exit codes to the sentence
// of docs/design.md#command-line that lists them.
func TestExitCodesAreDocumented(t *testing.T) {
	src, err := os.ReadFile("../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`The worker \(` + "`workers`" + `\) exits (\d+) after a graceful stop, (\d+) when its\s+configuration is invalid[^;]*?, and (\d+) when it cannot start`).FindSubmatch(src)
	if m == nil {
		t.Fatal("docs/design.md#command-line does not list the worker's exit codes")
	}
	for i, want := range []int{exitStopped, exitConfig, exitFailed} {
		if got, _ := strconv.Atoi(string(m[i+1])); got != want {
			t.Errorf("docs/design.md: the worker's exit code %d of the sentence is %d; the code says %d", i+1, got, want)
		}
	}
}

// TestInvalidConfigurationExits2: an environment the worker cannot use ends
// it with exitConfig before it connects to anything.
func TestInvalidConfigurationExits2(t *testing.T) {
	t.Setenv("HERALD_DATABASE_URL", "")
	if got := run(); got != exitConfig {
		t.Errorf("without HERALD_DATABASE_URL the worker exited %d, want %d", got, exitConfig)
	}
}
