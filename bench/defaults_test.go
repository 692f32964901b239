package main

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"herald/relay"
)

// TestCeilingParallelIsTheRelays checks that the ceiling sends as many
// signals at once as Herald's relay does by default, flag and config alike:
// the comparison is only fair at the same parallelism, and the number is
// written once, in relay.
func TestCeilingParallelIsTheRelays(t *testing.T) {
	o, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.parallel != relay.DefaultParallel {
		t.Errorf("-parallel defaults to %d, the relay's default is %d", o.parallel, relay.DefaultParallel)
	}
	var c Config
	c.defaults()
	if c.Parallel != relay.DefaultParallel {
		t.Errorf("Config.Parallel defaults to %d, the relay's default is %d", c.Parallel, relay.DefaultParallel)
	}
}

func TestParseWorkerEnv(t *testing.T) {
	got, err := parseWorkerEnv(" HERALD_IDLE_TIMEOUT=1s, TEMPORAL_NAMESPACE=x ")
	if err != nil || len(got) != 2 || got[0] != "HERALD_IDLE_TIMEOUT=1s" || got[1] != "TEMPORAL_NAMESPACE=x" {
		t.Fatalf("parseWorkerEnv = %q, %v", got, err)
	}
	if got, err := parseWorkerEnv(""); err != nil || got != nil {
		t.Fatalf("parseWorkerEnv(\"\") = %q, %v; want nothing", got, err)
	}
	for _, bad := range []string{"HERALD_IDLE_TIMEOUT", "PATH=/bin", "HERALD_X=1,,"} {
		if _, err := parseWorkerEnv(bad); err == nil {
			t.Errorf("parseWorkerEnv(%q) accepted", bad)
		}
	}
}

// The shaped floor copies the history of Herald's default settings, so it
// refuses a worker setting that changes that history, and nothing else.
func TestShapedFloorFits(t *testing.T) {
	env := []string{"HERALD_LOG_LEVEL=debug", "TEMPORAL_NAMESPACE=x"}
	if err := shapedFloorFits(true, env); err != nil {
		t.Errorf("settings that leave the history alone: %v", err)
	}
	for _, k := range shapedHistorySettings {
		if err := shapedFloorFits(true, append(env, k+"=1")); err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("%s: %v, want an error naming it", k, err)
		}
		if err := shapedFloorFits(false, []string{k + "=1"}); err != nil {
			t.Errorf("%s without the shaped floor: %v", k, err)
		}
	}
}

// The sampled keys run from the first to the last, evenly.
func TestSpread(t *testing.T) {
	keys := make([]string, 100)
	for i := range keys {
		keys[i] = strconv.Itoa(i)
	}
	if got := fmt.Sprint(spread(keys, 4)); got != "[0 25 50 75]" {
		t.Errorf("spread(100 keys, 4) = %s", got)
	}
	if got := spread(keys[:3], 10); len(got) != 3 {
		t.Errorf("spread(3 keys, 10) = %v, want all 3", got)
	}
}
