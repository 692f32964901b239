package chaos_test

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// fault is one injected fault: from Start until End, when everything it broke
// was restored.
type fault struct {
	Name       string
	Start, End time.Time
	// LosesAnswers marks faults that can make Herald miss an answer the
	// subscriber gave (a worker or the Temporal server dies or stops with a
	// delivery in flight, or the subscriber's connections are cut), so that
	// the delivery's events may be sent again.
	LosesAnswers bool
	// Note is shown in the summary (e.g. how long a SIGTERM exit took).
	Note string
	// Kind (kindWorker, …) and Rule (the subscriber's misbehaviour during
	// the fault, if any; a nil Match means every key) give the wait the
	// fault explains (bounds_test.go).
	Kind string
	Rule rule `json:"-"`
	// Targets are the key workflows a terminate, reset or forged signal
	// acted on (keyfaults_test.go), with what each held just before.
	Targets []target `json:",omitempty"`
}

// A re-sent event is attributed to a fault that loses answers when its first
// 2xx happened from replayLookback before the fault started until
// replayGrace after it ended: the delivery that carried it was in flight
// while the fault struck. A terminate or reset explains, in the same window,
// only the events its key's workflow held when it struck (attributeKey).
const (
	replayLookback = 30 * time.Second
	replayGrace    = 15 * time.Second
)

// Each event's wait at the head of its key's queue (from when it was
// accepted, or when the event before it had its first 2xx, whichever is
// later, until its own first 2xx) is bounded by waitBound: what the settings
// allow for the faults near it (bounds_test.go).

// maxProblemsPerCheck caps the messages of one check; the count is exact.
const maxProblemsPerCheck = 8

// recovery is how quickly deliveries came back after one fault.
type recovery struct {
	Fault fault
	// FirstAck is the time from the fault's end to the first 2xx after it;
	// negative when there was none.
	FirstAck time.Duration
	// Stalled counts the (subscription, key) pairs with an accepted,
	// unacknowledged event at the fault's end; Resumed is the longest time
	// one of them waited for its next 2xx.
	Stalled int
	Resumed time.Duration
	// Slowest names the (subscription, key) that waited longest.
	Slowest string
	// Replays counts re-sent events attributed to this fault.
	Replays int
}

// analysis is the verdict on one run's arrivals.
type analysis struct {
	Events, Keys int
	Expected     int // events × subscriptions
	Delivered    int // distinct (subscription, event) pairs acknowledged
	Arrivals     int
	ByOutcome    map[outcome]int
	// DupAfterLost counts re-deliveries of an event whose earlier arrival was
	// processed but whose answer was lost (a timeout or a reset).
	DupAfterLost int
	// Replays counts re-deliveries of an event already acknowledged.
	Replays int
	// HeadWait is the longest wait of an event at the head of its key's
	// queue; HeadWaitOf names it.
	HeadWait   time.Duration
	HeadWaitOf string
	// Waits lists every head wait longer than baseWait, for explainWaits.
	Waits          []headWait
	MaxAttempt     int
	AttemptRepeats int // an attempt number seen again for the same event before its first 2xx
	// Exhausted counts (subscription, event) pairs that had maxAttempts
	// counted failures before any 2xx: Herald should have failed them.
	Exhausted int
	Recovery  []recovery
	// Problems describes the violations (at most maxProblemsPerCheck per
	// check, then a count); Violations counts them all.
	Problems   []string
	Violations int
}

type subKey struct{ Sub, Key string }

// problems collects messages per check, keeping counts exact.
type problems struct {
	counts map[string]int
	list   []string
}

func (p *problems) add(check, format string, args ...any) {
	if p.counts == nil {
		p.counts = map[string]int{}
	}
	p.counts[check]++
	if p.counts[check] <= maxProblemsPerCheck {
		p.list = append(p.list, check+": "+fmt.Sprintf(format, args...))
	}
}

// total counts every violation added.
func (p *problems) total() int {
	n := 0
	for _, c := range p.counts {
		n += c
	}
	return n
}

func (p *problems) done() []string {
	out := p.list
	checks := make([]string, 0, len(p.counts))
	for c := range p.counts {
		checks = append(checks, c)
	}
	sort.Strings(checks)
	for _, c := range checks {
		if n := p.counts[c]; n > maxProblemsPerCheck {
			out = append(out, fmt.Sprintf("%s: %d more", c, n-maxProblemsPerCheck))
		}
	}
	return out
}

// analyze checks the arrivals of a run against what was published (see
// docs/reliability.md for the definitions):
//
//   - no loss: every accepted event has a 2xx arrival at every subscription;
//   - order: every arrival of event n of a key, whatever its answer, starts
//     after every earlier event of that key had a 2xx at that subscription;
//   - duplicates: an arrival of an event already processed is a re-delivery;
//     it is allowed after a lost answer, and after a 2xx only when a fault that
//     loses answers struck while that 2xx's delivery was in flight, or a
//     terminate or reset struck the key's workflow while it held the event;
//   - attempts: never above maxAttempts, never going down before the first 2xx;
//   - every arrival passed signature verification and names a published event.
func analyze(subs []string, pubs []published, arrivals []arrival, faults []fault, t0 time.Time) analysis {
	var p problems
	an := analysis{Events: len(pubs), Expected: len(pubs) * len(subs), Arrivals: len(arrivals), ByOutcome: map[outcome]int{}}

	byID := map[string]published{}
	perKey := map[string][]published{}
	for _, e := range pubs {
		byID[e.ID] = e
		perKey[e.Key] = append(perKey[e.Key], e)
	}
	an.Keys = len(perKey)
	for key, evs := range perKey {
		slices.SortFunc(evs, func(a, b published) int { return a.N - b.N })
		for i, e := range evs {
			if e.N != i+1 {
				p.add("stream", "key %s: event #%d at position %d", key, e.N, i+1)
			}
			if i > 0 && e.Seq <= evs[i-1].Seq {
				p.add("stream", "key %s: event #%d has seq %d, not after #%d's %d", key, e.N, e.Seq, evs[i-1].N, evs[i-1].Seq)
			}
		}
	}

	// Arrivals per (subscription, key) and per (subscription, event), by start.
	sorted := append([]arrival(nil), arrivals...)
	slices.SortStableFunc(sorted, func(a, b arrival) int { return a.Start.Compare(b.Start) })
	perSubKey := map[subKey][]arrival{}
	perSubEvent := map[subKey][]arrival{} // Key holds the event id here
	for _, a := range sorted {
		an.ByOutcome[a.Outcome]++
		an.MaxAttempt = max(an.MaxAttempt, a.Attempt)
		if a.Outcome == outcomeInvalid {
			p.add("verification", "%s event %s attempt %d at %s was refused by the subscriber's verification", a.Sub, a.EventID, a.Attempt, rel(a.Start, t0))
			continue
		}
		e, ok := byID[a.EventID]
		if !ok {
			p.add("unknown event", "%s received event %s, which was never accepted", a.Sub, a.EventID)
			continue
		}
		if a.Key != e.Key || a.N != e.N {
			p.add("content", "event %s arrived as %s #%d, published as %s #%d", a.EventID, a.Key, a.N, e.Key, e.N)
		}
		if !slices.Contains(subs, a.Sub) {
			p.add("unknown subscription", "event %s arrived for %q", a.EventID, a.Sub)
			continue
		}
		perSubKey[subKey{a.Sub, e.Key}] = append(perSubKey[subKey{a.Sub, e.Key}], a)
		perSubEvent[subKey{a.Sub, a.EventID}] = append(perSubEvent[subKey{a.Sub, a.EventID}], a)
		if a.Attempt > maxAttempts {
			p.add("attempts", "%s event %s arrived with attempt %d of %d", a.Sub, a.EventID, a.Attempt, maxAttempts)
		}
	}

	// firstAck is the end of each (subscription, event)'s first 2xx.
	firstAck := map[subKey]time.Time{}
	for k, as := range perSubEvent {
		for _, a := range as {
			if a.Outcome == outcomeAck && (firstAck[k].IsZero() || a.End.Before(firstAck[k])) {
				firstAck[k] = a.End
			}
		}
	}

	// No loss.
	for _, s := range subs {
		for _, e := range pubs {
			if _, ok := firstAck[subKey{s, e.ID}]; ok {
				an.Delivered++
			} else {
				p.add("loss", "%s never acknowledged %s #%d (event %s, accepted at %s)", s, e.Key, e.N, e.ID, rel(e.At, t0))
			}
		}
	}

	// Liveness: collect the head waits longer than the base wait; verify
	// checks each against its key's history (explainWaits).
	for _, s := range subs {
		for key, evs := range perKey {
			var prevAck time.Time
			for _, e := range evs {
				ack, ok := firstAck[subKey{s, e.ID}]
				if !ok {
					break // reported as loss
				}
				start := e.At
				if prevAck.After(start) {
					start = prevAck
				}
				w := ack.Sub(start)
				if w > an.HeadWait {
					an.HeadWait, an.HeadWaitOf = w, fmt.Sprintf("%s/%s #%d", s, key, e.N)
				}
				if w > baseWait {
					an.Waits = append(an.Waits, headWait{Sub: s, Key: key, N: e.N, Start: start, Ack: ack})
				}
				prevAck = ack
			}
		}
	}

	// Order: arrivals of event n start after every earlier event's first 2xx.
	for sk, as := range perSubKey {
		evs := perKey[sk.Key]
		// before[n] is the latest first 2xx among events 1..n-1 of the key
		// (zero with ok false when one of them has none).
		type bound struct {
			at      time.Time
			missing int // an earlier event without a 2xx, 0 if none
		}
		before := make([]bound, len(evs)+2)
		for i, e := range evs {
			b := before[i+1]
			ack, ok := firstAck[subKey{sk.Sub, e.ID}]
			switch {
			case b.missing != 0:
			case !ok:
				b.missing = e.N
			case ack.After(b.at):
				b.at = ack
			}
			before[i+2] = b
		}
		for _, a := range as {
			if a.N < 1 || a.N > len(evs) {
				continue // reported as a content problem
			}
			b := before[a.N]
			switch {
			case b.missing != 0:
				p.add("order", "%s/%s: #%d arrived at %s but #%d was never acknowledged", sk.Sub, sk.Key, a.N, rel(a.Start, t0), b.missing)
			case !a.Start.After(b.at):
				p.add("order", "%s/%s: #%d arrived at %s (attempt %d) before an earlier event's first 2xx ended at %s",
					sk.Sub, sk.Key, a.N, rel(a.Start, t0), a.Attempt, rel(b.at, t0))
			}
		}
	}

	// Duplicates and attempts, per (subscription, event).
	replaysBy := map[int]int{}
	for k, as := range perSubEvent {
		ack, acked := firstAck[k]
		last, failures := 0, 0
		for i, a := range as {
			processedBefore := false
			for _, b := range as[:i] {
				if !b.Processed.IsZero() && b.Processed.Before(a.Start) {
					processedBefore = true
					break
				}
			}
			preAck := !acked || !a.Start.After(ack)
			if preAck {
				if a.Attempt < last {
					p.add("attempts", "%s event %s: attempt %d arrived after attempt %d, before any 2xx", k.Sub, k.Key, a.Attempt, last)
				} else if a.Attempt == last {
					an.AttemptRepeats++
				}
				last = max(last, a.Attempt)
				if a.Outcome == outcomeNack || a.Outcome == outcomeLost {
					failures++
				}
			}
			switch {
			case !processedBefore:
			case acked && ack.Before(a.Start):
				an.Replays++
				f := attributeKey(faults, k.Sub, byID[k.Key].Key, k.Key, ack)
				if f < 0 {
					f = attribute(faults, ack)
				}
				if f >= 0 {
					replaysBy[f]++
				} else {
					p.add("duplicate", "%s event %s was sent again at %s (attempt %d) after its 2xx at %s, with no fault to explain it",
						k.Sub, k.Key, rel(a.Start, t0), a.Attempt, rel(ack, t0))
				}
			default:
				an.DupAfterLost++
			}
		}
		if failures >= maxAttempts {
			an.Exhausted++
		}
	}

	an.Recovery = recoveries(subs, pubs, perSubKey, faults, replaysBy)
	an.Problems, an.Violations = p.done(), p.total()
	return an
}

// attribute returns the index of the fault that loses answers whose window
// holds t and which lies closest to t (the later one on a tie), or -1.
func attribute(faults []fault, t time.Time) int {
	found, best := -1, time.Duration(0)
	for i, f := range faults {
		if !f.LosesAnswers || t.Before(f.Start.Add(-replayLookback)) || t.After(f.End.Add(replayGrace)) {
			continue
		}
		var d time.Duration
		switch {
		case t.Before(f.Start):
			d = f.Start.Sub(t)
		case t.After(f.End):
			d = t.Sub(f.End)
		}
		if found < 0 || d <= best {
			found, best = i, d
		}
	}
	return found
}

// recoveries measures, for each fault, the time from its end to the first 2xx
// after it, and to the next 2xx of every (subscription, key) that had an
// accepted, unacknowledged event when it ended.
func recoveries(subs []string, pubs []published, perSubKey map[subKey][]arrival, faults []fault, replaysBy map[int]int) []recovery {
	acks := map[subKey][]time.Time{}
	var all []time.Time
	for sk, as := range perSubKey {
		for _, a := range as {
			if a.Outcome == outcomeAck {
				acks[sk] = append(acks[sk], a.End)
				all = append(all, a.End)
			}
		}
		slices.SortFunc(acks[sk], time.Time.Compare)
	}
	slices.SortFunc(all, time.Time.Compare)
	firstAck := map[subKey]time.Time{} // Key holds the event id
	for sk, as := range perSubKey {
		for _, a := range as {
			k := subKey{sk.Sub, a.EventID}
			if a.Outcome == outcomeAck && (firstAck[k].IsZero() || a.End.Before(firstAck[k])) {
				firstAck[k] = a.End
			}
		}
	}
	next := func(ts []time.Time, t time.Time) (time.Time, bool) {
		i, _ := slices.BinarySearchFunc(ts, t, time.Time.Compare)
		if i == len(ts) {
			return time.Time{}, false
		}
		return ts[i], true
	}

	var out []recovery
	for i, f := range faults {
		r := recovery{Fault: f, FirstAck: -1, Replays: replaysBy[i]}
		if t, ok := next(all, f.End); ok {
			r.FirstAck = t.Sub(f.End)
		}
		for _, s := range subs {
			stalled := map[string]bool{}
			for _, e := range pubs {
				if !e.At.Before(f.End) || stalled[e.Key] {
					continue
				}
				if a, ok := firstAck[subKey{s, e.ID}]; !ok || !a.Before(f.End) {
					stalled[e.Key] = true
				}
			}
			for key := range stalled {
				r.Stalled++
				if t, ok := next(acks[subKey{s, key}], f.End); ok && t.Sub(f.End) > r.Resumed {
					r.Resumed, r.Slowest = t.Sub(f.End), s+"/"+key
				}
			}
		}
		out = append(out, r)
	}
	return out
}

// rel formats t as seconds since t0.
func rel(t, t0 time.Time) string {
	return fmt.Sprintf("%.2fs", t.Sub(t0).Seconds())
}
