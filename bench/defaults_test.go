package main

import (
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
