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
