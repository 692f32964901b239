package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"herald/internal/testkit"
	"herald/internal/testkit/system"
	"herald/store"
	"herald/workflows"
)

// TestRedeliveredSkippedEventLetsHeldEventsGo: under onFailure skip with
// maxAttempts 3, an event that fails for good is skipped; an operator
// redelivers it, and while its attempts fail again (one regular execution:
// the run spent its local attempt on it the first time) the relay sees the
// head's row at two attempts and does not signal the key's next event.
// Once the redelivered event is skipped again, that event arrives at once,
// not after the key's 10-minute idle timeout.
func TestRedeliveredSkippedEventLetsHeldEventsGo(t *testing.T) {
	t.Parallel()
	const subject = "person-skip-held"
	id := workflows.DeliveryID(system.BillingSub, subject)
	s := system.Start(t, system.Schedule(slices.Repeat([]time.Duration{2 * time.Second}, 30)...))
	s.Apply()
	c := s.Dial()
	ctx := context.Background()
	if _, err := s.Svc.Store.Pool.Exec(ctx, `UPDATE subscriptions SET on_failure = 'skip', max_attempts = 3 WHERE id = $1`,
		system.BillingSub); err != nil {
		t.Fatal(err)
	}
	s.Sub.SetReject(func(app, subj string, n int) error {
		if app == "billing" && subj == subject && n == 1 {
			return errors.New("never")
		}
		return nil
	})
	e1 := s.Publish(subject, 1)
	skipped := func() bool {
		var code string
		err := s.Svc.Store.Pool.QueryRow(ctx, `SELECT COALESCE(code, '') FROM outcomes WHERE subscription_id = $1 AND event_id = $2`,
			system.BillingSub, e1.ID).Scan(&code)
		return err == nil && code == "skipped_after_failure"
	}
	testkit.Eventually(t, 60*time.Second, "e1 to be skipped", skipped)

	uctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	h, err := c.UpdateWorkflow(uctx, client.UpdateWorkflowOptions{
		WorkflowID: id, UpdateName: workflows.UpdateRedeliver,
		Args:         []any{workflows.RedeliverSignal{EventID: e1.ID, Actor: "ann"}},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		t.Fatalf("redeliver e1: %v", err)
	}
	var res workflows.OpResult
	if err := h.Get(uctx, &res); err != nil || !res.Changed {
		t.Fatalf("redeliver e1: %+v, %v", res, err)
	}
	key := store.KeyRef{SubscriptionID: system.BillingSub, Subject: subject}
	testkit.Eventually(t, 60*time.Second, "the redelivered e1 to have failed twice", func() bool {
		// The redelivery queued e1 anew; its 3 attempts 2 s apart end before
		// store.HeldAfter: as if it had been queued earlier, so the key holds.
		if _, err := s.Svc.Store.Pool.Exec(ctx, `UPDATE outcomes SET queued_at = now() - interval '1 minute'
			WHERE subscription_id = $1 AND event_id = $2`, system.BillingSub, e1.ID); err != nil {
			t.Fatal(err)
		}
		held, err := s.Svc.Store.HeldKeys(ctx, []store.KeyRef{key})
		return err == nil && held[key]
	})
	e2 := s.Publish(subject, 2)
	testkit.Eventually(t, 60*time.Second, "e1 to be skipped again", skipped)
	skippedAt := time.Now()
	testkit.Eventually(t, 90*time.Second, "e2 to arrive", func() bool {
		return slices.Contains(s.Sub.Ns("billing", subject), 2)
	})
	if took := time.Since(skippedAt); took > 30*time.Second {
		t.Fatalf("e2 arrived %v after e1 was skipped again", took)
	}
	doc := history(t, s, id)
	if !signalled(t, doc, e1.ID) {
		t.Fatalf("no signal of the history names e1: the check below would see none")
	}
	if signalled(t, doc, e2.ID) {
		t.Fatalf("e2 was signalled: the relay did not see the key held, so the test did not reach the held path")
	}
	wantOutcomes(t, s, store.EventDelivered, e2.ID)
}

// signalled reports whether a signal event of the history doc names text
// (a local activity's read of the rows may name it too).
func signalled(t *testing.T, doc, text string) bool {
	t.Helper()
	var h struct {
		Events []json.RawMessage `json:"events"`
	}
	if err := json.Unmarshal([]byte(doc), &h); err != nil {
		t.Fatalf("history is not JSON: %v", err)
	}
	for _, raw := range h.Events {
		var ev struct {
			EventType string `json:"eventType"`
		}
		if err := json.Unmarshal(raw, &ev); err != nil {
			t.Fatalf("history event is not JSON: %v", err)
		}
		if strings.Contains(strings.ToLower(ev.EventType), "signaled") && holdsText(t, string(raw), text) {
			return true
		}
	}
	return false
}
