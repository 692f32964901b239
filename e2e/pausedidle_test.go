package e2e_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"herald/config"
	"herald/internal/testkit"
	"herald/internal/testkit/system"
	"herald/manifest"
	"herald/store"
	"herald/workflows"
)

// TestPausedKeyRunEndsIdle: a paused key that owes nothing no longer keeps
// a run waiting for an operator (workflows.PausedIdleChange). Its run waits
// its idle period and ends; the pause stays in paused_keys, so the run the
// key's next event starts holds the key, and a resume delivers it. A
// paused key of a subscription removed meanwhile (the removal deletes its
// pause, and the sweep tells only keys holding events) ends too, audited
// as a removed subscription's key.
//
// HERALD_RECORD_PAUSED_IDLE_HISTORY names a file to write the paused run's
// history to, for the replay test:
//
//	HERALD_RECORD_PAUSED_IDLE_HISTORY=$PWD/workflows/testdata/delivery-history-paused-idle.json go test ./e2e -run PausedKeyRunEndsIdle
func TestPausedKeyRunEndsIdle(t *testing.T) {
	t.Parallel()
	const idle = 10 * time.Second
	s := system.Start(t, system.Config(func(c *config.Worker) { c.IdleTimeout = idle }))
	s.Apply()
	c := s.Dial()
	ctx := context.Background()
	pause := workflows.ControlSignal{Actor: "e2e-operator", Reason: "investigating"}

	const subject = "person-paused-idle"
	id := workflows.DeliveryID(system.BillingSub, subject)
	s.Publish(subject, 1)
	waitInOrder(t, s, subject, 60*time.Second, 1)
	if res := keyUpdate(t, c, id, workflows.UpdatePause, pause); !res.Changed {
		t.Fatalf("pause changed nothing: %+v", res)
	}
	var ended string
	testkit.EventuallyValue(t, 60*time.Second, "the paused run to end after its idle period", func() (string, bool) {
		ended = closedRun(c, id)
		st, ok := keyState(c, id)
		return runSummary(st, ok), ended != ""
	})
	if !keyPausedRow(t, s, subject) {
		t.Fatal("the paused run ended without the key's paused_keys row")
	}
	if path := os.Getenv("HERALD_RECORD_PAUSED_IDLE_HISTORY"); path != "" {
		if err := os.WriteFile(path, []byte(history(t, s, id)), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	e2 := s.Publish(subject, 2)
	testkit.EventuallyValue(t, 60*time.Second, "the key's next run to hold e2 paused", func() (string, bool) {
		st, ok := newRunState(c, id, ended)
		return runSummary(st, ok), ok && st.Status == workflows.StatusPaused && st.KeyPaused &&
			st.Head != nil && st.Head.EventID == e2.ID
	})
	time.Sleep(3 * time.Second) // longer than an unpaused key's first attempt takes here
	if got := s.Sub.Ns("billing", subject); !slices.Equal(got, []int{1}) {
		t.Fatalf("billing received %v of %s while the key was paused, want [1]", got, subject)
	}
	if res := keyUpdate(t, c, id, workflows.UpdateResume, workflows.ControlSignal{Actor: "e2e-operator"}); !res.Changed {
		t.Fatalf("resume changed nothing: %+v", res)
	}
	waitInOrder(t, s, subject, 60*time.Second, 1, 2)
	wantOutcomes(t, s, store.EventDelivered, e2.ID)
	if keyPausedRow(t, s, subject) {
		t.Fatal("the resume left the paused_keys row")
	}

	// A paused key with nothing queued, then its subscription removed.
	const removedSubject = "person-paused-removed"
	removedID := workflows.DeliveryID(system.BillingSub, removedSubject)
	s.Publish(removedSubject, 1)
	waitInOrder(t, s, removedSubject, 60*time.Second, 1)
	if res := keyUpdate(t, c, removedID, workflows.UpdatePause, pause); !res.Changed {
		t.Fatalf("pause changed nothing: %+v", res)
	}
	if _, err := s.Svc.Store.ApplyManifest(ctx, &manifest.Manifest{App: "billing", Endpoint: s.SubURL}, "e2e"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 60*time.Second, "the removed subscription's paused run to end", func() bool {
		return closedRun(c, removedID) != ""
	})
	rows := auditOf(t, s, removedID, workflows.AuditDeliveryCancelled)
	if len(rows) != 1 || rows[0].ErrorCode != "subscription_removed" || !strings.Contains(string(rows[0].Metadata), `"count": 0`) {
		t.Fatalf("delivery.cancelled rows of %s: %+v; want one for the removal, of no event", removedID, rows)
	}
}
