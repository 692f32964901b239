//go:build !chaos

package chaos_test

import (
	"slices"
	"testing"
	"time"

	"herald/workflows"
)

// TestChaosShort is the suite's short version for make test: one worker
// killed mid-delivery and restarted, a subscriber that fails, resets
// connections and answers too late, and one key workflow reset to its first
// workflow task, over a 15 s stream on 10 keys. The full suite (make chaos)
// adds database, Temporal and relay faults, terminates and forged signals.
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
	r.at(9 * time.Second)
	r.resetKey("reset a busy key workflow to its first workflow task")

	settled := r.settle(90 * time.Second)
	r.verify("chaos (short)", settled)
	r.checkEndedRunsRead()
}

// checkEndedRunsRead checks that the waits' explanations read the runs a
// fault ended, not only a key's current run: a wait spanning a reset or a
// terminate is explained from the run it started in, and a suite reading
// only the current run failed liveness bounds it would have met.
func (r *run) checkEndedRunsRead() {
	c := r.temporal()
	defer c.Close()
	checked := 0
	for _, f := range r.faults {
		for _, t := range f.Targets {
			if f.Kind != kindReset && f.Kind != kindTerminate {
				continue
			}
			runs, err := r.env.histories(c, workflows.DeliveryID(t.Sub, t.Key))
			if err != nil {
				r.t.Errorf("histories of %s: %v", t.name(), err)
				continue
			}
			i := slices.IndexFunc(runs, func(h runHistory) bool { return h.RunID == t.RunID })
			switch {
			case i < 0:
				r.t.Errorf("histories of %s: %d runs, none of them %s, the run %q ended", t.name(), len(runs), t.RunID, f.Name)
			case len(runs[i].Events) == 0:
				r.t.Errorf("histories of %s: the ended run %s has no events", t.name(), t.RunID)
			case i == len(runs)-1:
				r.t.Errorf("histories of %s: the ended run %s is the last of %d, want a later run", t.name(), t.RunID, len(runs))
			}
			checked++
		}
	}
	if checked == 0 {
		r.t.Error("no key workflow was reset or terminated: nothing showed that ended runs are read")
	}
}
