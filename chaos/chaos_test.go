//go:build chaos

package chaos_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"herald/store"
)

// gracefulLimit bounds a worker's exit after SIGTERM.
const gracefulLimit = 30 * time.Second

// TestChaos is the full fault-injection run (make chaos): 50 keys, 25 events
// a second for 150 s, to two subscriptions, while the suite
//
//   - SIGKILLs the worker mid-delivery and restarts it, twice;
//   - restarts PostgreSQL (fast shutdown, then start);
//   - restarts the Temporal dev server while a third of the keys are
//     retrying (the subscriber answers 500 to their first attempts);
//   - runs a second worker, limited to 2 database connections (pool
//     exhaustion), then SIGTERMs the relay leader so the other takes over;
//   - makes the subscriber answer 500, answer after the delivery timeout,
//     reset connections mid-response, answer slowly, and refuse connections;
//   - SIGTERMs the remaining worker mid-delivery and restarts it;
//   - unless HERALD_CHAOS_WORKFLOW_FAULTS=0, acts on the key workflows
//     through Temporal's API (keyfaults_test.go): terminates held and busy
//     ones, three times; resets one to its first workflow task; and sends
//     event signals of unknown events, three times.
//
// Then it waits until everything arrived and checks the guarantees.
func TestChaos(t *testing.T) {
	r := newRun(t, 50, 25)
	w1 := r.env.startWorker("w1")
	keyFaults := workflowFaults()
	if !keyFaults {
		r.note("key-workflow faults off (%s=0)", workflowFaultsEnv)
	}
	r.startStream(150 * time.Second)

	r.at(5 * time.Second)
	r.killAndRestart(w1, "SIGKILL worker w1 mid-delivery, restart (1)")

	if keyFaults {
		r.at(10 * time.Second)
		r.forgeSignals("forged event signals, 300 unknown events each, to 4 key workflows (1)", 4)
	}

	r.at(18 * time.Second)
	r.inject(fault{Name: "restart PostgreSQL (fast shutdown, start)", Kind: kindPostgres}, func() string {
		start := time.Now()
		if err := r.env.stopPostgres(); err != nil {
			t.Fatalf("stop PostgreSQL: %v", err)
		}
		if err := r.env.startPostgres(); err != nil {
			t.Fatalf("start PostgreSQL: %v", err)
		}
		return fmt.Sprintf("down %.1fs", time.Since(start).Seconds())
	})

	if keyFaults {
		r.at(20 * time.Second)
		r.terminateKeys("terminate 2 held and 2 busy key workflows (1)", 2, 2)
	}

	r.at(30 * time.Second)
	// The Temporal restart holds up every key; the 500s add their retries.
	r.inject(fault{Name: "restart Temporal while a third of the keys retry (500 on attempts 1-4)", LosesAnswers: true,
		Kind: kindTemporal, Rule: rule{Mode: modeFail, UpTo: 4}}, func() string {
		r.rec.setRule("temporal", rule{Mode: modeFail, Match: keysOf(3, 0), UpTo: 4})
		defer r.rec.clearRule("temporal")
		time.Sleep(1500 * time.Millisecond)
		start := time.Now()
		if err := r.env.stopTemporal(); err != nil {
			t.Fatalf("stop Temporal: %v", err)
		}
		time.Sleep(2 * time.Second)
		if err := r.env.startTemporal(); err != nil {
			t.Fatalf("start Temporal: %v", err)
		}
		down := time.Since(start)
		time.Sleep(2 * time.Second)
		return fmt.Sprintf("down %.1fs", down.Seconds())
	})

	if keyFaults {
		r.at(42 * time.Second)
		r.resetKey("reset a busy key workflow to its first workflow task")
	}

	r.at(50 * time.Second)
	r.killAndRestart(w1, "SIGKILL worker w1 mid-delivery, restart (2)")

	if keyFaults {
		r.at(56 * time.Second)
		r.terminateKeys("terminate 2 held and 2 busy key workflows (2)", 2, 2)
	}

	r.at(65 * time.Second)
	w2Start := time.Since(r.t0)
	w2 := r.env.startWorker("w2", "HERALD_DB_MAX_CONNS=2")
	if keyFaults {
		r.at(70 * time.Second)
		r.forgeSignals("forged event signals, 300 unknown events each, to 4 key workflows (2)", 4)
	}
	r.at(75 * time.Second)
	r.inject(fault{Name: "two workers, then SIGTERM the relay leader w1 mid-delivery", LosesAnswers: true, Kind: kindWorker}, func() string {
		// Both relays lead partitions of the log (docs/design.md#relay-partitions).
		if p1, p2 := w1.partitions(), w2.partitions(); p1 <= 0 || p2 <= 0 || p1+p2 != store.RelayPartitions {
			t.Errorf("before the hand-over: w1 leads %d partitions, w2 %d; want both some, %d in all", p1, p2, store.RelayPartitions)
		}
		var exit string
		n := r.midDelivery("handover", func() { exit = r.stopGracefully(w1, gracefulLimit) })
		start := time.Now()
		for w2.partitions() != store.RelayPartitions {
			if time.Since(start) > 15*time.Second {
				t.Errorf("w2 did not take all of the relay over within 15 s of w1's exit")
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		return fmt.Sprintf("%d deliveries in flight; %s; w2 led every partition %.1fs later", n, exit, time.Since(start).Seconds())
	})
	r.note("pool exhaustion: w2 runs with HERALD_DB_MAX_CONNS=2 from %.0fs to the end, alone from %.0fs",
		w2Start.Seconds(), time.Since(r.t0).Seconds())

	if keyFaults {
		r.at(84 * time.Second)
		r.terminateKeys("terminate 2 held and 2 busy key workflows (3)", 2, 2)
	}

	r.at(90 * time.Second)
	r.subscriberFault("subscriber: 500 on attempts 1-3 (every 2nd key)", rule{Mode: modeFail, Match: keysOf(2, 0), UpTo: 3}, 8*time.Second)
	r.at(100 * time.Second)
	r.subscriberFault("subscriber: answer after the 2s timeout on attempts 1-2 (every 4th key)", rule{Mode: modeTimeout, Match: keysOf(4, 1), UpTo: 2}, 8*time.Second)
	r.at(110 * time.Second)
	r.subscriberFault("subscriber: reset mid-response on attempts 1-2 (every 4th key)", rule{Mode: modeReset, Match: keysOf(4, 3), UpTo: 2}, 8*time.Second)
	r.at(120 * time.Second)
	r.subscriberFault("subscriber: slow answers, 0.3-0.9s (every key)", rule{Mode: modeSlow, Match: allKeys, UpTo: maxAttempts}, 8*time.Second)
	r.at(130 * time.Second)
	r.inject(fault{Name: "subscriber: refuse connections for 6s (listener closed, same port re-opened)", LosesAnswers: true, Kind: kindRefuse}, func() string {
		r.rec.refuse()
		time.Sleep(6 * time.Second)
		if err := r.rec.listen(); err != nil {
			t.Fatalf("re-open the subscriber: %v", err)
		}
		return ""
	})

	if keyFaults {
		r.at(137 * time.Second)
		r.forgeSignals("forged event signals, 300 unknown events each, to 4 key workflows (3)", 4)
	}

	r.at(140 * time.Second)
	r.inject(fault{Name: "SIGTERM worker w2 mid-delivery, restart", LosesAnswers: true, Kind: kindWorker}, func() string {
		var exit string
		n := r.midDelivery("graceful", func() { exit = r.stopGracefully(w2, gracefulLimit) })
		r.env.restart(w2)
		return fmt.Sprintf("%d deliveries in flight; %s", n, exit)
	})

	settled := r.settle(4 * time.Minute)
	if !w2.running() {
		t.Errorf("worker w2 (HERALD_DB_MAX_CONNS=2) is not running at the end of the run")
	} else if rz := w2.readyz(); rz.Status != http.StatusOK {
		t.Errorf("worker w2 /readyz at the end: %d %v %v", rz.Status, rz.Body, rz.Err)
	}
	r.verify("chaos (full)", settled)
}

// TestDatabaseOutage stops PostgreSQL for 30 s while deliveries are retrying
// (the subscriber answers 500 to every event's first three attempts from 2 s
// before the stop): the worker keeps running, /readyz answers 503 throughout
// the outage and 200 again by itself once the database is back, deliveries
// resume, and every event is delivered.
func TestDatabaseOutage(t *testing.T) {
	r := newRun(t, 10, 10)
	w := r.env.startWorker("w1")
	r.startStream(60 * time.Second)

	r.at(8 * time.Second)
	r.rec.setRule("retrying", rule{Mode: modeFail, Match: allKeys, UpTo: 3})
	r.at(10 * time.Second)
	var back time.Time
	r.inject(fault{Name: "PostgreSQL stopped for 30s while keys retry (500 on attempts 1-3 from 2s before)", Kind: kindPostgres,
		Rule: rule{Mode: modeFail, UpTo: 3}}, func() string {
		if err := r.env.stopPostgres(); err != nil {
			t.Fatalf("stop PostgreSQL: %v", err)
		}
		stopped := time.Now()
		time.AfterFunc(2*time.Second, func() { r.rec.clearRule("retrying") })
		polls, unready := 0, 0
		for time.Since(stopped) < 30*time.Second {
			time.Sleep(500 * time.Millisecond)
			if !w.running() {
				t.Fatalf("the worker exited during the database outage; log tail:\n%s", tail(w.logPath, 20))
			}
			rz := w.readyz()
			polls++
			if rz.Status == http.StatusServiceUnavailable {
				unready++
			} else if time.Since(stopped) > 3*time.Second {
				t.Errorf("/readyz %.1fs into the outage: %d %v %v, want 503", time.Since(stopped).Seconds(), rz.Status, rz.Body, rz.Err)
			}
		}
		if unready == 0 {
			t.Errorf("/readyz never answered 503 during the outage")
		}
		if err := r.env.startPostgres(); err != nil {
			t.Fatalf("start PostgreSQL: %v", err)
		}
		back = time.Now()
		for w.readyz().Status != http.StatusOK {
			if time.Since(back) > 30*time.Second {
				t.Fatalf("/readyz not 200 within 30 s of the database's return")
			}
			time.Sleep(100 * time.Millisecond)
		}
		return fmt.Sprintf("/readyz 503 in %d of %d polls; 200 again %.1fs after the restart", unready, polls, time.Since(back).Seconds())
	})

	settled := r.settle(3 * time.Minute)
	resumed := false
	for _, a := range r.rec.snapshot() {
		if a.Outcome == outcomeAck && a.Start.After(back) {
			resumed = true
			break
		}
	}
	if !resumed {
		t.Errorf("no delivery after the database came back")
	}
	if !w.running() {
		t.Errorf("the worker is not running at the end")
	}
	r.verify("database outage", settled)
}
