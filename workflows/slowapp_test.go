package workflows_test

import (
	"context"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"

	"herald/activities"
)

// TestLimitedWithRetryAfterWaitsInATimer: a Deliver execution that the
// worker held back (its app's POSTs time out: activities.SlowAppPosts)
// ends limited with RetryAfter. The run does not start the next execution
// at once, as after an app's own limits: the next one carries NotBefore,
// as a regular execution, whose first attempt only waits out the delay in
// Temporal's retry timer; no attempt is spent. (Deliver is the real
// activity, but for the first execution's answer.)
func TestLimitedWithRetryAfterWaitsInATimer(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var mu sync.Mutex
	var ins []activities.DeliverInput
	var at []time.Time
	real := &activities.Activities{Poster: h.sub, Store: h.store, Clock: h.env.Now}
	h.env.OnActivity("Deliver", mock.Anything, mock.Anything).Return(func(ctx context.Context, in activities.DeliverInput) (activities.DeliverResult, error) {
		mu.Lock()
		defer mu.Unlock()
		ins, at = append(ins, in), append(at, h.env.Now())
		if len(ins) == 1 {
			return activities.DeliverResult{Outcome: activities.OutcomeLimited, Attempt: 1, RetryAfter: activities.SlowAppRetry}, nil
		}
		return real.Deliver(ctx, in)
	})
	h.eventsAt(time.Second, 1)
	st := h.queryAt(5 * time.Second)
	h.run()

	mu.Lock()
	defer mu.Unlock()
	// The limited execution; the next one's first attempt, which only
	// waits (not_before); its second, which delivers.
	if len(ins) != 3 {
		t.Fatalf("%d Deliver attempts, want 3: the limited one, the next execution's wait and its delivery", len(ins))
	}
	for i, in := range ins {
		if !in.WaitsOutLimits {
			t.Errorf("attempt %d: WaitsOutLimits false; want the run to say it waits out limits", i+1)
		}
	}
	if ins[1].Local || ins[1].PriorAttempts != 0 || ins[1].NotBefore.Before(at[0].Add(activities.SlowAppRetry)) {
		t.Errorf("the next execution: local %v, prior attempts %d, not before %v (the limited one ran at %v); "+
			"want a regular one, no attempt spent, not before %v later", ins[1].Local, ins[1].PriorAttempts,
			ins[1].NotBefore, at[0], activities.SlowAppRetry)
	}
	if waited := at[2].Sub(at[0]); waited < activities.SlowAppRetry {
		t.Errorf("delivered %v after the limited execution, want at least %v", waited, activities.SlowAppRetry)
	}
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1)) {
		t.Errorf("delivered %v", got)
	}
	if st.Head == nil || st.Head.NextAttemptAt == nil || st.Head.Attempt != 0 {
		t.Errorf("5 s in, the head %+v; want it waiting for its next attempt, none spent", st.Head)
	}
}
