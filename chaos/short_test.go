//go:build !chaos

package chaos_test

import (
	"testing"
	"time"
)

// TestChaosShort is the suite's short version for make test: one worker
// killed mid-delivery and restarted, and a subscriber that fails, resets
// connections and answers too late, over a 15 s stream on 10 keys. The full
// suite (make chaos) adds database, Temporal and relay faults.
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts its own PostgreSQL and Temporal; skipped with -short")
	}
	r := newRun(t, 10, 10)
	w := r.env.startWorker("w1")
	r.startStream(15 * time.Second)

	r.at(2 * time.Second)
	r.killAndRestart(w, "SIGKILL worker w1 mid-delivery, restart")
	r.at(5 * time.Second)
	r.subscriberFault("subscriber: 500 on attempts 1-2 (every 3rd key)", rule{Mode: modeFail, Match: keysOf(3, 0), UpTo: 2}, 3*time.Second)
	r.subscriberFault("subscriber: reset mid-response on attempt 1 (every 3rd key)", rule{Mode: modeReset, Match: keysOf(3, 1), UpTo: 1}, 2*time.Second)
	r.subscriberFault("subscriber: answer after the timeout on attempt 1 (every 3rd key)", rule{Mode: modeTimeout, Match: keysOf(3, 2), UpTo: 1}, 2*time.Second)

	settled := r.settle(90 * time.Second)
	r.verify("chaos (short)", settled)
}
