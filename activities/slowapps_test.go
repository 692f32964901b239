package activities

import (
	"slices"
	"testing"
	"time"
)

// TestSlowAppsCapsOnlyAnAppWhoseTimeoutsAreRecent: an app is held to the
// cap once SlowAppTimeouts of its POSTs timed out within SlowAppWindow plus
// the POST timeout, and no longer once the fifth-last of them is that old;
// an app that answers is never capped, however many POSTs it has in
// flight.
func TestSlowAppsCapsOnlyAnAppWhoseTimeoutsAreRecent(t *testing.T) {
	var s slowApps
	t0 := time.Date(2026, 12, 8, 0, 0, 0, 0, time.UTC)
	for i := range 100 {
		if !s.take("fast", 2, t0) {
			t.Fatalf("an app with no timeout refused at %d POSTs in flight", i)
		}
	}
	for range SlowAppTimeouts - 1 {
		s.take("slow", 2, t0)
		s.done("slow", true, 5*time.Second, t0)
	}
	s.take("slow", 2, t0)
	s.take("slow", 2, t0)
	if !s.take("slow", 2, t0) {
		t.Fatalf("refused after %d timeouts, one short of %d", SlowAppTimeouts-1, SlowAppTimeouts)
	}
	s.done("slow", true, 5*time.Second, t0.Add(time.Second)) // the fifth timeout: 2 in flight
	if s.take("slow", 2, t0.Add(2*time.Second)) {
		t.Fatal("a slow app with 2 POSTs in flight took a third under a cap of 2")
	}
	s.done("slow", false, 5*time.Second, t0.Add(3*time.Second)) // one in flight
	if !s.take("slow", 2, t0.Add(3*time.Second)) {
		t.Fatal("a slow app under its cap refused")
	}
	if s.take("slow", 2, t0.Add(4*time.Second)) {
		t.Fatal("a slow app back at its cap took one more")
	}
	// The first of the five timeouts a window ago (a minute and the POST
	// timeout): the app is let go.
	if s.take("slow", 2, t0.Add(SlowAppWindow)) {
		t.Fatal("an app let go a minute after its fifth-last timeout, before the POST timeout more")
	}
	if !s.take("slow", 2, t0.Add(SlowAppWindow+5*time.Second)) {
		t.Fatal("an app whose fifth-last timeout is a window old is still capped")
	}
	// POSTs of two minutes: the capped ones time out together, two minutes
	// after they start; the cap holds between two such rounds.
	for range SlowAppTimeouts {
		s.take("long", 2, t0)
		s.done("long", true, 2*time.Minute, t0)
	}
	s.take("long", 2, t0)
	s.take("long", 2, t0)
	if s.take("long", 2, t0.Add(2*time.Minute+SlowAppRetry)) {
		t.Fatal("the cap of an app whose POSTs time out after two minutes lifted before its next round of timeouts")
	}
}

// TestDeliverHoldsBackASlowApp: with its app slow and at the cap on this
// worker, an execution POSTs nothing: the head's ends limited with
// SlowAppRetry, no attempt spent; a later event is left to the next
// execution. A workflow that does not wait out limits is never held back.
func TestDeliverHoldsBackASlowApp(t *testing.T) {
	t.Parallel()
	slowAt := func(a *Activities, inFlight int) {
		now := time.Now()
		for range SlowAppTimeouts {
			a.slow.take("billing", SlowAppPosts, now)
			a.slow.done("billing", true, 5*time.Second, now)
		}
		for range inFlight {
			a.slow.take("billing", SlowAppPosts, now)
		}
	}
	t.Run("head", func(t *testing.T) {
		st, sender := newDeliverStore(), &scriptedSender{}
		a := &Activities{Store: st, Poster: sender, SlowPosts: 2}
		slowAt(a, 2)
		in := deliverInput(tEvents...)
		in.WaitsOutLimits, in.PriorAttempts = true, 1
		r, err := runDeliverOn(t, a, ownID, in)
		if err != nil {
			t.Fatal(err)
		}
		if r.Outcome != OutcomeLimited || r.RetryAfter != SlowAppRetry || r.Attempt != 2 || len(r.Done) != 0 {
			t.Fatalf("result %+v, want limited for %v at attempt 2, nothing done", r, SlowAppRetry)
		}
		if got := sender.posted(); len(got) != 0 {
			t.Fatalf("posts %q, want none", got)
		}
	})
	t.Run("later event", func(t *testing.T) {
		st, sender := newDeliverStore(), &scriptedSender{}
		a := &Activities{Store: st, Poster: sender, SlowPosts: 2}
		// The head's POST takes the second slot, and gives it back; another
		// key's POST starts meanwhile and keeps one.
		slowAt(a, 1)
		sender.before = func(string) { a.slow.take("billing", SlowAppPosts, time.Now()) }
		in := deliverInput(tEvents...)
		in.WaitsOutLimits = true
		r, err := runDeliverOn(t, a, ownID, in)
		if err != nil {
			t.Fatal(err)
		}
		if got := sender.posted(); !slices.Equal(got, []string{"1#1"}) {
			t.Fatalf("posts %q, want the head's only", got)
		}
		if r.Outcome != OutcomeDelivered || len(r.Done) != 1 {
			t.Fatalf("result %+v, want the head delivered and the rest left", r)
		}
	})
	t.Run("made slow by its own timeouts", func(t *testing.T) {
		st, sender := newDeliverStore(), &scriptedSender{
			script: map[string]PostResult{tEvents[0].ID: {Code: CodeHandlerTimeout, Message: "no response within 5s"}}}
		a := &Activities{Store: st, Poster: sender, SlowPosts: 1}
		in := deliverInput(tEvents...)
		in.WaitsOutLimits = true
		for range SlowAppTimeouts {
			if _, err := runDeliverOn(t, a, ownID, in); err == nil {
				t.Fatal("a timed-out head ended without error")
			}
		}
		a.slow.take("billing", 1, time.Now()) // another key's POST under way
		r, err := runDeliverOn(t, a, ownID, in)
		if err != nil || r.Outcome != OutcomeLimited || r.RetryAfter != SlowAppRetry {
			t.Fatalf("after %d timeouts: %+v, %v; want limited", SlowAppTimeouts, r, err)
		}
		if n := len(sender.posted()); n != SlowAppTimeouts {
			t.Fatalf("%d POSTs, want the %d that timed out", n, SlowAppTimeouts)
		}
	})
	t.Run("a workflow that cannot wait", func(t *testing.T) {
		st, sender := newDeliverStore(), &scriptedSender{}
		a := &Activities{Store: st, Poster: sender, SlowPosts: 2}
		slowAt(a, 2)
		r, err := runDeliverOn(t, a, ownID, deliverInput(tEvents...))
		if err != nil {
			t.Fatal(err)
		}
		if got := sender.posted(); len(got) != 3 || r.Outcome != OutcomeDelivered {
			t.Fatalf("posts %q, result %+v; want all three delivered", got, r)
		}
	})
}
