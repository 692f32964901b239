package workflows_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"herald/activities"
	"herald/workflows"
)

// TestBareStart: a run the relay started with no search attributes
// (BareStartVersion, a quiet key's one event) writes none if it delivers
// and ends in its first task. Any run of it that comes to show a status
// (it waits idle for a signal, a retry, an operator's pause, or makes an
// attempt as a regular activity) writes the identity attributes with that
// first status, in one upsert, before it waits: Temporal's list finds
// every key that waits by subscription, app and event type. Later status
// changes upsert the status alone, as any run's do.
func TestBareStart(t *testing.T) {
	t.Parallel()
	identity := map[string]string{
		workflows.SASubscription.GetName(): "billing:contacts.person.updated@1",
		workflows.SAApp.GetName():          "billing",
		workflows.SAEventType.GetName():    "contacts.person.updated",
	}
	for _, tc := range []struct {
		name   string
		quiet  bool
		signal bool // the event also comes as a signal: the run waits idle
		fail   bool // the first attempt fails once: retrying
		pause  bool // an operator pauses the key at 1 minute
		// want is each upsert's status; first, whether the first upsert
		// carries the identity attributes.
		want  []string
		waits bool
	}{
		{name: "quiet, delivered at once", quiet: true},
		{name: "quiet, fails once", quiet: true, fail: true, want: []string{"retrying", "idle"}},
		{name: "quiet, signalled", quiet: true, signal: true, want: []string{"idle"}, waits: true},
		{name: "not quiet", want: []string{"idle"}, waits: true},
		{name: "quiet, signalled, paused", quiet: true, signal: true, pause: true, want: []string{"idle", "paused", "idle"}, waits: true},
	} {
		for _, version := range bareVersions {
			t.Run(fmt.Sprintf("%s/version-%d", tc.name, version), func(t *testing.T) {
				h := quietHarness(t, false, 1)
				h.params.Quiet = tc.quiet
				h.params.Version = version
				if tc.signal {
					h.eventsAt(0, 1)
				}
				if tc.fail {
					h.sub.setRespond(func(_ string, _, nth int) activities.PostResult {
						if nth == 0 {
							return fail(activities.CodeHandlerFailed, 500)
						}
						return activities.PostResult{}
					})
				}
				if tc.pause {
					h.signalAt(time.Minute, workflows.SignalPause, workflows.ControlSignal{})
					h.signalAt(2*time.Minute, workflows.SignalResume, workflows.ControlSignal{})
				}
				var upserts []temporal.SearchAttributes
				var firstAt time.Duration
				h.env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
					if len(upserts) == 0 {
						firstAt = h.env.Now().Sub(h.start)
					}
					upserts = append(upserts, args.Get(0).(temporal.SearchAttributes))
				}).Return(nil)
				h.run()
				// Shown in the first task, before any wait.
				if firstAt != 0 {
					t.Fatalf("the first upsert came %v after the start, want in the first task", firstAt)
				}
				if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1)) {
					t.Fatalf("delivered %v, want %v", got, ids(1))
				}
				var statuses []string
				for i, sa := range upserts {
					s, ok := sa.GetKeyword(workflows.SAStatus)
					if !ok {
						t.Fatalf("upsert %d has no status: %v", i, sa.GetUntypedValues())
					}
					statuses = append(statuses, s)
					for name, want := range identity {
						key := temporal.NewSearchAttributeKeyKeyword(name)
						v, ok := sa.GetKeyword(key)
						switch {
						case i == 0 && (!ok || v != want):
							t.Fatalf("the first upsert's %s is %q (%v), want %q", name, v, ok, want)
						case i > 0 && ok:
							t.Fatalf("upsert %d writes %s again", i, name)
						}
					}
					if _, ok := sa.GetInt64(workflows.SAQueued); !ok {
						t.Fatalf("upsert %d has no %s", i, workflows.SAQueued.GetName())
					}
				}
				if !reflect.DeepEqual(statuses, tc.want) {
					t.Fatalf("status upserts %v, want %v", statuses, tc.want)
				}
				took := h.env.Now().Sub(h.start)
				if tc.waits != (took >= 10*time.Minute) {
					t.Fatalf("completed after %v; want the idle timeout waited: %v", took, tc.waits)
				}
			})
		}
	}
}

// bareVersions are the input versions of a bare start: the relay's before
// DeliverInStartVersion, and with it.
var bareVersions = []int{workflows.BareStartVersion, workflows.DeliverInStartVersion}

// TestBareStartShowsBeforeARegularAttempt: a bare run whose first attempt
// runs as a regular activity (the app has limits), which may wait for
// seconds, shows delivering with its identity before it.
func TestBareStartShowsBeforeARegularAttempt(t *testing.T) {
	t.Parallel()
	for _, version := range bareVersions {
		t.Run(fmt.Sprintf("version-%d", version), func(t *testing.T) { bareStartShowsBeforeARegularAttempt(t, version) })
	}
}

func bareStartShowsBeforeARegularAttempt(t *testing.T, version int) {
	h := quietHarness(t, true, 1)
	h.params.Version = version
	h.store.limits.MaxPerSecond = 100
	var upserts []temporal.SearchAttributes
	h.env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
		upserts = append(upserts, args.Get(0).(temporal.SearchAttributes))
	}).Return(nil)
	h.run()
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1)) {
		t.Fatalf("delivered %v", got)
	}
	if len(upserts) == 0 {
		t.Fatal("no upsert before the regular attempt")
	}
	if s, _ := upserts[0].GetKeyword(workflows.SAStatus); s != workflows.StatusDelivering {
		t.Fatalf("the first upsert's status %q, want delivering", s)
	}
	checkIdentity(t, upserts[0], h.params)
}

// TestBareStartShowsBeforeItHolds: a bare run whose first attempt fails
// for good holds the key on a failed head; it shows itself before the
// Record of that outcome (retried through a database outage), and a bare
// run whose reads of the rows before ending fail shows itself before it
// waits to read again.
func TestBareStartShowsBeforeItHolds(t *testing.T) {
	t.Parallel()
	for _, version := range bareVersions {
		t.Run(fmt.Sprintf("version-%d", version), func(t *testing.T) { bareStartShowsBeforeItHolds(t, version) })
	}
}

func bareStartShowsBeforeItHolds(t *testing.T, version int) {
	t.Run("failed head", func(t *testing.T) {
		h := quietHarness(t, true, 1)
		h.params.Version = version
		h.sub.setRespond(func(_ string, _, nth int) activities.PostResult {
			if nth == 0 {
				return fail(activities.CodeSchemaMismatch, 422)
			}
			return activities.PostResult{}
		})
		upserts, recordsBefore := 0, -1
		h.env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
			if info.ActivityType.Name == "Record" && recordsBefore < 0 {
				recordsBefore = upserts
			}
		})
		var first temporal.SearchAttributes
		h.env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
			if upserts == 0 {
				first = args.Get(0).(temporal.SearchAttributes)
			}
			upserts++
		}).Return(nil)
		h.run() // re-armed after the cooldown, then delivered
		if recordsBefore < 1 {
			t.Fatalf("%d upserts before the first Record, want the bare run shown first", recordsBefore)
		}
		checkIdentity(t, first, h.params)
	})
	t.Run("reads fail before the end", func(t *testing.T) {
		h := quietHarness(t, true, 1)
		h.params.Version = version
		// Reads: 1 the start's, 2 the delivery's after it (in the start's
		// local activity at DeliverInStartVersion), then the run's own and
		// its local retry 500 ms later, all failing: the run waits 5 s and
		// reads again.
		h.store.failQueueRead = func(n int) bool { return n >= 2 && h.env.Now().Sub(h.start) < 2*time.Second }
		var at []time.Duration
		var first temporal.SearchAttributes
		h.env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
			if len(at) == 0 {
				first = args.Get(0).(temporal.SearchAttributes)
			}
			at = append(at, h.env.Now().Sub(h.start))
		}).Return(nil)
		h.run()
		if len(at) == 0 || at[0] >= 2*time.Second {
			t.Fatalf("upserts at %v, want the first before the 5 s wait", at)
		}
		// No longer quiet once a read failed: it waits idle, then ends.
		if took := h.env.Now().Sub(h.start); took < 10*time.Minute {
			t.Fatalf("completed after %v, want the idle timeout waited", took)
		}
		checkIdentity(t, first, h.params)
	})
}

// checkIdentity fails the test unless sa holds the run's identity.
func checkIdentity(t *testing.T, sa temporal.SearchAttributes, p workflows.Params) {
	t.Helper()
	for key, want := range map[temporal.SearchAttributeKeyKeyword]string{
		workflows.SASubscription: p.SubscriptionID, workflows.SAApp: p.SubscriberApp, workflows.SAEventType: p.EventType,
	} {
		if v, _ := sa.GetKeyword(key); v != want {
			t.Fatalf("%s is %q, want %q", key.GetName(), v, want)
		}
	}
}
