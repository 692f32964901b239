package chaos_test

import (
	"fmt"
	"strings"
	"time"
)

// Waits that Herald's settings allow. The suite passes some of them to the
// worker (env_test.go); the others are fixed in the worker's code or are
// Temporal's, and are restated here so that each bound names its source.
const (
	// heartbeatTimeout is the Deliver activity's: the delivery timeout +
	// 30 s (workflows/deliver.go). A delivery whose worker died, or whose
	// task or completion the server lost, is retried only after it.
	heartbeatTimeout = deliveryTimeout + 30*time.Second
	// recheckInterval caps the back-off of a subscription look-up that
	// failed, which starts at lookupBackoff and doubles
	// (workflows/deliver.go; the default RecheckInterval, workflows/api.go).
	recheckInterval = time.Minute
	lookupBackoff   = 5 * time.Second
	// unreachableBackoff is the first wait of a key whose subscriber refused
	// the connection (workflows/deliver.go); a 2xx to the app wakes it.
	unreachableBackoff = 30 * time.Second
	// stickyTimeout is the SDK's sticky schedule-to-start timeout: a
	// workflow task queued for a worker that is gone (or does not poll in
	// time) moves to the shared queue after it.
	stickyTimeout = 5 * time.Second
	// workflowTaskTimeout is Temporal's default workflow task timeout: a
	// workflow task started but not completed is scheduled again after it.
	workflowTaskTimeout = 10 * time.Second
)

// schedule is the retry schedule the suite passes (HERALD_RETRY_SCHEDULE).
func schedule() []time.Duration {
	var out []time.Duration
	for _, s := range strings.Split(retrySchedule, ",") {
		d, err := time.ParseDuration(s)
		if err != nil {
			panic(fmt.Sprintf("retrySchedule %q: %v", retrySchedule, err))
		}
		out = append(out, d)
	}
	return out
}

// retries is the sum of the first n delays of the retry schedule.
func retries(n int) time.Duration {
	var sum time.Duration
	for i, d := range schedule() {
		if i < n {
			sum += d
		}
	}
	return sum
}

// timeoutRetry is Temporal's delay before re-running a Deliver execution
// after a timeout at its attempt k: the activity retry policy's initial
// interval (the schedule's first delay) doubled k-1 times.
func timeoutRetry(k int) time.Duration {
	return schedule()[0] << max(k-1, 0)
}

// lookupWait is how long a key whose subscription look-up failed waits after
// the database comes back from an outage of length down, at worst: the
// back-off step (lookupBackoff doubling, capped at recheckInterval) under
// way when it returns.
func lookupWait(down time.Duration) time.Duration {
	var elapsed time.Duration
	for n := 0; ; n++ {
		w := min(lookupBackoff<<n, recheckInterval)
		if elapsed+w >= down {
			return w
		}
		elapsed += w
	}
}

// baseWait is the wait the settings allow an event with no fault near it:
// one workflow task sent to its worker's sticky queue and not picked up
// (stickyTimeout), one workflow task that times out (workflowTaskTimeout),
// and one POST up to the delivery timeout. On a healthy server neither
// timeout happens and a head waits well under a second.
const baseWait = stickyTimeout + workflowTaskTimeout + deliveryTimeout

// Kinds of fault, for the wait each explains.
const (
	kindWorker     = "worker"     // a worker SIGKILLed or SIGTERMed mid-delivery
	kindTemporal   = "temporal"   // the Temporal server restarted
	kindPostgres   = "postgres"   // PostgreSQL stopped, then started
	kindSubscriber = "subscriber" // the subscriber fails, times out, resets or is slow
	kindRefuse     = "refuse"     // the subscriber refuses connections
	kindTerminate  = "terminate"  // key workflows terminated through Temporal's API
	kindReset      = "reset"      // a key workflow reset to its first workflow task
	kindForged     = "forged"     // event signals of unknown events sent to key workflows
)

// explains is the wait a fault can add after it ends, from the settings, and
// how it is made up. attempt is the highest attempt number seen in the run,
// for the retry policy's back-off after a timeout.
func (f fault) explains(attempt int) (time.Duration, string) {
	hb := func() (time.Duration, string) {
		r := timeoutRetry(attempt + 1)
		return heartbeatTimeout + r + stickyTimeout, fmt.Sprintf("heartbeat timeout %v + retry back-off %v (attempt %d) + sticky timeout %v",
			heartbeatTimeout, r, attempt+1, stickyTimeout)
	}
	switch f.Kind {
	case kindWorker, kindTemporal:
		d, why := hb()
		if f.Rule.UpTo > 0 { // keys the subscriber failed meanwhile
			d += retries(f.Rule.UpTo)
			why += fmt.Sprintf(" + retries %v (attempts 1-%d)", retries(f.Rule.UpTo), f.Rule.UpTo)
		}
		return d, why
	case kindPostgres:
		w := lookupWait(f.End.Sub(f.Start))
		return w + retries(f.Rule.UpTo), fmt.Sprintf("look-up back-off step %v (5 s doubling, ≤ %v) + retries %v", w, recheckInterval, retries(f.Rule.UpTo))
	case kindSubscriber:
		d := retries(f.Rule.UpTo)
		why := fmt.Sprintf("retries %v (attempts 1-%d)", d, f.Rule.UpTo)
		if f.Rule.Mode == modeTimeout {
			d += time.Duration(f.Rule.UpTo) * deliveryTimeout
			why += fmt.Sprintf(" + %d × delivery timeout %v", f.Rule.UpTo, deliveryTimeout)
		}
		if f.Rule.Mode == modeSlow {
			d, why = slowMax, fmt.Sprintf("one slow answer %v", slowMax)
		}
		return d, why
	case kindRefuse:
		return unreachableBackoff, fmt.Sprintf("unreachable back-off %v", unreachableBackoff)
	case kindTerminate:
		// The terminated keys only; the others of its rule had their 500s.
		return redriveWait + retries(f.Rule.UpTo), fmt.Sprintf("terminated keys: the relay's re-drive within %v; the others: retries %v (attempts 1-%d)",
			redriveWait, retries(f.Rule.UpTo), f.Rule.UpTo)
	}
	return 0, "nothing"
}

// matches reports whether the fault can hold up the given key.
func (f fault) matches(sub, key string) bool {
	return f.Rule.Match == nil || f.Rule.Match(sub, key)
}

// derivation describes, for the summary, the base wait and what each fault
// can add after it ends by the settings.
func derivation(faults []fault, attempt int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "wait bounds, from the settings (retry schedule %s, delivery timeout %v, heartbeat timeout %v, look-up back-off 5 s doubling to %v, unreachable back-off %v, sticky timeout %v, workflow task timeout %v):\n",
		retrySchedule, deliveryTimeout, heartbeatTimeout, recheckInterval, unreachableBackoff, stickyTimeout, workflowTaskTimeout)
	fmt.Fprintf(&b, "  base %v = sticky timeout + workflow task timeout + delivery timeout\n", baseWait)
	for i, f := range faults {
		x, why := f.explains(attempt)
		fmt.Fprintf(&b, "  fault %-2d %.1fs + %v = %s\n", i+1, f.End.Sub(f.Start).Seconds(), x, why)
	}
	b.WriteString("  an event's bound: base + the time its key's history shows lost to these mechanisms (timeouts, back-offs, timers, fault durations) during its wait\n")
	return b.String()
}
