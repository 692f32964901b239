package cli

import (
	"slices"
	"strings"
	"testing"
	"time"

	"herald/internal/testkit"
	"herald/store"
	"herald/workflows"
)

// TestOperatorUpdatesAnswer drives one key through every single-key
// operator command: each that changes something exits 0 and says what
// changed; the same with nothing to do exits 2 with the reason; a request
// the workflow's validator rejects exits 2 and changes nothing.
func TestOperatorUpdatesAnswer(t *testing.T) {
	t.Parallel()
	h := startHerald(t)
	h.rejectIf(func(app, subject string, n int) bool { return app == "billing" && subject == "k-u" && n == 1 })
	h.publish([]string{"k-u"}, 1, 2, 3)
	h.waitArrivals("audit-log", "k-u", 1, 2, 3)
	id := workflows.DeliveryID(billingSub, "k-u")
	key := []string{"--subscription", billingSub, "--subject", "k-u"}
	evs := h.keyEvents(billingSub, "k-u")
	testkit.Eventually(t, 30*time.Second, "k-u to fail", func() bool { return h.state(billingSub, "k-u").Status == workflows.StatusFailed })

	// Rejected by the validator: a reason over 1000 bytes. Nothing runs.
	r := run(t, h.env, append([]string{"redeliver", "--reason", strings.Repeat("x", 1001)}, key...)...)
	if r.code != ExitInvalid {
		t.Fatalf("redeliver with a too long reason: exit %d, want 2\nstderr: %s", r.code, r.stderr)
	}
	wantContains(t, "rejected redeliver", r.stderr, "redeliver "+id+": rejected by the workflow, nothing was done:",
		"reason at most 1000")
	rj := decode[opJSON](t, run(t, h.env, append([]string{"pause", "--json", "--actor", strings.Repeat("a", 201)}, key...)...).stdout)
	if rj.Result != nil || !strings.Contains(rj.Rejected, "actor is at most 200 bytes") {
		t.Errorf("pause --json with a too long actor: %+v", rj)
	}
	if rows := h.audit(workflows.AuditDeliveryRedelivered, billingSub, "k-u"); len(rows) != 0 {
		t.Errorf("a rejected redeliver wrote %d audit rows", len(rows))
	}
	if st := h.state(billingSub, "k-u"); st.Status != workflows.StatusFailed || st.KeyPaused {
		t.Fatalf("after the rejected requests: status %s, paused %v; want failed, not paused", st.Status, st.KeyPaused)
	}

	// cancel --event of a queued event behind the failed head: changed.
	r = mustRun(t, h.env, append([]string{"cancel", "--event", evs[2].ID, "--reason", "not needed"}, key...)...)
	wantContains(t, "cancel --event", r.stdout, "cancel "+id+": done", "cancelled: 1 event ("+evs[2].ID+")",
		"key now:   failed, 2 events queued")
	// The same again: the event is no longer queued.
	r = run(t, h.env, append([]string{"cancel", "--event", evs[2].ID}, key...)...)
	if r.code != ExitInvalid || !strings.Contains(r.stderr, "nothing to do: event_not_queued (that event is not queued for this key); the key is failed with 2 events queued") {
		t.Errorf("cancel --event twice: exit %d, stderr %q", r.code, r.stderr)
	}

	// pause and resume, each twice.
	mustRun(t, h.env, append([]string{"pause"}, key...)...)
	r = run(t, h.env, append([]string{"pause", "--json"}, key...)...)
	pj := decode[opJSON](t, r.stdout)
	if r.code != ExitInvalid || pj.Result == nil || pj.Result.Changed || pj.Result.Reason != "already_paused" ||
		pj.Result.Status != workflows.StatusPaused {
		t.Errorf("pause twice --json: exit %d, %+v", r.code, pj.Result)
	}
	mustRun(t, h.env, append([]string{"resume"}, key...)...)
	r = run(t, h.env, append([]string{"resume"}, key...)...)
	if r.code != ExitInvalid || !strings.Contains(r.stderr, "nothing to do: not_paused") {
		t.Errorf("resume twice: exit %d, stderr %q", r.code, r.stderr)
	}

	// redeliver after the fix: the head is requeued and delivered.
	h.rejectIf(nil)
	r = mustRun(t, h.env, append([]string{"redeliver", "--json", "--reason", "fixed"}, key...)...)
	rd := decode[opJSON](t, r.stdout)
	if rd.Result == nil || !rd.Result.Changed || !slices.Equal(rd.Result.Requeued, []string{evs[0].ID}) ||
		rd.Result.Status != workflows.StatusDelivering || rd.Result.Queued != 2 {
		t.Fatalf("redeliver --json: %+v", rd.Result)
	}
	h.waitArrivals("billing", "k-u", 1, 2)
	h.wantAudit(workflows.AuditDeliveryRedelivered, billingSub, "k-u", "tester", "fixed")

	// Nothing stuck any more: redeliver and cancel have nothing to do.
	testkit.Eventually(t, 10*time.Second, "k-u to be idle", func() bool { return h.state(billingSub, "k-u").Status == workflows.StatusIdle })
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"redeliver"}, "nothing to do: nothing_to_redeliver"},
		{[]string{"cancel"}, "nothing to do: no_failed_head"},
		{[]string{"cancel", "--all"}, "nothing to do: nothing_queued"},
	} {
		r := run(t, h.env, append(c.args, key...)...)
		if r.code != ExitInvalid || !strings.Contains(r.stderr, c.want) || !strings.Contains(r.stderr, "the key is idle with 0 events queued") {
			t.Errorf("%v on an idle key: exit %d, stderr %q; want 2 and %q", c.args, r.code, r.stderr, c.want)
		}
	}
	// Each did nothing, and said so in the audit trail too.
	var rows []store.AuditRow
	for _, row := range h.audit(workflows.AuditDeliveryRedelivered, billingSub, "k-u") {
		if row.Outcome == store.OutcomeFailed {
			rows = append(rows, row)
		}
	}
	if len(rows) != 1 || rows[0].ErrorCode != "nothing_to_redeliver" {
		t.Errorf("failed redelivered audit rows: %+v, want one nothing_to_redeliver", rows)
	}
}

// TestRedeliverEventRunningKey redelivers an event of the log to a running,
// paused key with Update-With-Start: the key answers that it requeued it
// in front of the queue; an event still queued is refused as already
// queued; resume delivers both in order.
func TestRedeliverEventRunningKey(t *testing.T) {
	t.Parallel()
	h := startHerald(t)
	h.publish([]string{"k-e"}, 1)
	h.waitArrivals("billing", "k-e", 1)
	key := []string{"--subscription", billingSub, "--subject", "k-e"}
	mustRun(t, h.env, append([]string{"pause"}, key...)...)
	h.publish([]string{"k-e"}, 2)
	evs := h.keyEvents(billingSub, "k-e")
	testkit.Eventually(t, 10*time.Second, "event 2 to queue behind the pause", func() bool {
		st := h.state(billingSub, "k-e")
		return st.Head != nil && st.Head.EventID == evs[1].ID
	})

	r := mustRun(t, h.env, append([]string{"redeliver", "--event", evs[0].ID, "--reason", "lost"}, key...)...)
	wantContains(t, "redeliver --event", r.stdout, "event "+evs[0].ID+" (seq ", "requeued:  1 event ("+evs[0].ID+")",
		"key now:   paused, 2 events queued", "temporal workflow execute-update-with-start")
	r = run(t, h.env, append([]string{"redeliver", "--event", evs[1].ID, "--json"}, key...)...)
	again := decode[redeliverEventJSON](t, r.stdout)
	if r.code != ExitInvalid || again.Result == nil || again.Result.Changed || again.Result.Reason != "already_queued" ||
		again.Result.Refused[evs[1].ID] != "already_queued" || again.SignalledAfterStart {
		t.Errorf("redeliver --event of a queued event: exit %d, %+v", r.code, again)
	}
	mustRun(t, h.env, append([]string{"resume"}, key...)...)
	h.waitArrivals("billing", "k-e", 1, 1, 2)
}

// TestAllFailedNothingToDo recovers the only failed key by hand, then runs
// redeliver --all-failed: whether Temporal's list still shows the key as
// failed (it then answers that there is nothing to redeliver) or not any
// more, no key changes and the command exits 2.
func TestAllFailedNothingToDo(t *testing.T) {
	t.Parallel()
	h := startHerald(t)
	h.rejectIf(func(app, subject string, n int) bool { return app == "billing" && subject == "k-n" })
	h.publish([]string{"k-n"}, 1)
	h.waitListed([]string{"k-n"}, "--status", "failed", "--subscription", billingSub)
	h.rejectIf(nil)
	mustRun(t, h.env, "redeliver", "--subscription", billingSub, "--subject", "k-n")
	h.waitArrivals("billing", "k-n", 1)

	r := run(t, h.env, "redeliver", "--subscription", billingSub, "--all-failed", "--json")
	bulk := decode[bulkJSON](t, r.stdout)
	if r.code != ExitInvalid || bulk.Changed != 0 || bulk.Errors != 0 || bulk.Nothing+bulk.Gone != len(bulk.Keys) {
		t.Fatalf("--all-failed with nothing to do: exit %d, %+v", r.code, bulk)
	}
	for _, k := range bulk.Keys {
		if k.Result == bulkNothing && (k.Reason != "nothing_to_redeliver" || k.Answer == nil) {
			t.Errorf("key %s: %+v", k.Subject, k)
		}
	}
	if rows := h.audit(workflows.AuditDeliveryRedelivered, billingSub, "k-n"); len(rows) != 1+bulk.Nothing {
		t.Errorf("%d redelivered audit rows, want the manual one and one per key with nothing to do (%d)", len(rows), bulk.Nothing)
	}
}
