package e2e_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"herald/internal/testkit"
	"herald/internal/testkit/system"
	"herald/store"
	"herald/workflows"
)

// TestHeldKeyIsNotSignalled (workflows.HeldKeysChange): the events
// published while a key's head fails again and again are not signalled to
// its workflow (its history names none of them), yet they are delivered
// right after the head, in order, each once, when the subscriber recovers:
// long before the key's idle timeout, which is when a run would otherwise
// find them. Another subscription's key of the same events is signalled as
// usual.
//
// HERALD_RECORD_HELD_HISTORY names a file to write the key's history to
// (workflows/testdata/delivery-history-held-keys.json).
func TestHeldKeyIsNotSignalled(t *testing.T) {
	t.Parallel()
	const subject = "person-held"
	id := workflows.DeliveryID(system.BillingSub, subject)
	s := system.Start(t, system.Schedule(slices.Repeat([]time.Duration{2 * time.Second}, 30)...))
	s.Apply()
	c := s.Dial()
	s.Sub.SetReject(func(app, subj string, n int) error {
		if app == "billing" && subj == subject && n == 1 {
			return errors.New("not yet")
		}
		return nil
	})
	ctx := context.Background()
	key := store.KeyRef{SubscriptionID: system.BillingSub, Subject: subject}
	s.Publish(subject, 1)
	testkit.Eventually(t, 60*time.Second, "e1 to have failed twice", func() bool {
		held, err := s.Svc.Store.HeldKeys(ctx, []store.KeyRef{key})
		return err == nil && held[key]
	})
	e2, e3 := s.Publish(subject, 2), s.Publish(subject, 3)
	testkit.Eventually(t, 30*time.Second, "audit-log to receive e1-e3 and e2, e3 to be dispatched", func() bool {
		lag, err := s.Svc.Store.RelayLag(ctx)
		return err == nil && lag.Undispatched == 0 && s.Sub.Count("audit-log", subject) == 3
	})
	noArrivalYet(t, s, subject, "the subscriber refuses e1")
	if h := history(t, s, id); holdsText(t, h, e2.ID) || holdsText(t, h, e3.ID) {
		t.Fatalf("the held key's history names e2 or e3: they were signalled")
	}
	st, ok := keyState(c, id)
	if !ok || st.Status != workflows.StatusRetrying {
		t.Fatalf("key state %s, want retrying", runSummary(st, ok))
	}

	s.Sub.SetReject(nil)
	fixedAt := time.Now()
	waitInOrder(t, s, subject, 30*time.Second, 1, 2, 3)
	if took := time.Since(fixedAt); took > 20*time.Second {
		t.Fatalf("e2, e3 arrived %v after the subscriber recovered", took)
	}
	wantOutcomes(t, s, store.EventDelivered, e2.ID, e3.ID)
	if path := os.Getenv("HERALD_RECORD_HELD_HISTORY"); path != "" {
		if err := os.WriteFile(path, []byte(history(t, s, id)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
