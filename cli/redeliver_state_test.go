package cli

import (
	"slices"
	"strings"
	"testing"

	"herald/workflows"
)

// TestRedeliverRefusesPausedAndBlocked runs every form of redeliver against
// a paused and then a blocked subscription: each exits 2 with the
// subscription's state in one line, before Temporal is asked
// (TEMPORAL_ADDRESS points nowhere, so asking it would exit 1).
func TestRedeliverRefusesPausedAndBlocked(t *testing.T) {
	t.Parallel()
	e := appliedEnv(t).with("TEMPORAL_ADDRESS", "127.0.0.1:1")
	const billing, auditLog = "billing:contacts.person.updated@1", "audit-log:contacts.person.updated@1"
	ev := decode[acceptedJSON](t, mustRun(t, e, "publish", "--json", "--app", "contacts", "--type", "contacts.person.updated",
		"--version", "1", "--subject", "person-42", "--data", `{"id":"42","name":"Ada"}`).stdout)

	forms := [][]string{
		{"redeliver", "--subscription", billing, "--subject", "person-42"},
		{"redeliver", "--subscription", billing, "--all-failed"},
		{"redeliver", "--subscription", billing, "--subject", "person-42", "--event", ev.ID},
		{"redeliver", "--subscription", billing, "--since", "1h"},
	}
	check := func(state string) {
		t.Helper()
		want := "subscription " + billing + " is " + state + ": nothing was sent"
		for _, args := range forms {
			r := run(t, e, args...)
			if r.code != ExitInvalid || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, want) {
				t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line with %q", args, r.code, r.stderr, want)
			}
		}
		// The event alone goes to every subscription of its type: each
		// is refused and listed.
		r := run(t, e, "redeliver", "--event", ev.ID)
		if r.code != ExitInvalid {
			t.Errorf("redeliver --event alone: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, ExitInvalid, r.stdout, r.stderr)
		}
		wantContains(t, "redeliver --event alone", r.stdout, "refused: subscription "+billing+" is "+state,
			"refused: subscription "+auditLog+" is "+state)
		out := decode[redeliverEveryJSON](t, run(t, e, "redeliver", "--json", "--event", ev.ID).stdout)
		if out.EventID != ev.ID || out.Subject != "person-42" || len(out.Results) != 2 ||
			out.Results[0].Result != everyRefused || out.Results[1].Result != everyRefused {
			t.Errorf("redeliver --event alone --json: %+v, want both subscriptions refused", out)
		}
	}

	mustRun(t, e, "subscriptions", "pause", billing)
	mustRun(t, e, "subscriptions", "pause", auditLog)
	check("paused (paused_by_operator)")

	mustRun(t, e, "subscriptions", "resume", billing)
	mustRun(t, e, "subscriptions", "resume", auditLog)
	mustRun(t, e, "apps", "remove", "contacts")
	check("blocked (event_not_declared)")
}

// TestRedeliverEventToEverySubscription delivers an event of the log again
// with redeliver --event ID alone: every subscription of its type gets it
// again on the event's subject key; a paused subscription is refused and
// the others still get it.
func TestRedeliverEventToEverySubscription(t *testing.T) {
	t.Parallel()
	h := startHerald(t)
	h.publish([]string{"k-every"}, 1)
	h.waitArrivals("billing", "k-every", 1)
	h.waitArrivals("audit-log", "k-every", 1)
	evs := h.keyEvents(billingSub, "k-every")

	out := decode[redeliverEveryJSON](t, mustRun(t, h.env, "redeliver", "--json", "--event", evs[0].ID,
		"--reason", "both lost it", "--actor", "alice").stdout)
	if out.EventID != evs[0].ID || out.EventSeq != evs[0].Seq || out.Type != "contacts.person.updated" ||
		out.SourceApp != "contacts" || len(out.Results) != 2 {
		t.Fatalf("redeliver --event alone --json: %+v", out)
	}
	for i, sub := range []string{auditLogSub, billingSub} {
		r := out.Results[i]
		if r.Subscription != sub || r.WorkflowID != workflows.DeliveryID(sub, "k-every") ||
			(r.Result != everyRequeued && r.Result != everySignalled) {
			t.Errorf("result %d: %+v, want %s requeued", i, r, sub)
		}
	}
	h.waitArrivals("billing", "k-every", 1, 1)
	h.waitArrivals("audit-log", "k-every", 1, 1)
	h.wantAudit(workflows.AuditDeliveryRedelivered, billingSub, "k-every", "alice", "both lost it")

	// Paused: billing is refused, audit-log gets it again; exit 0 since a
	// key took it.
	mustRun(t, h.env, "subscriptions", "pause", billingSub)
	r := mustRun(t, h.env, "redeliver", "--event", evs[0].ID)
	wantContains(t, "redeliver --event alone", r.stdout, "redeliver event "+evs[0].ID, auditLogSub, "requeued",
		"refused: subscription "+billingSub+" is paused (paused_by_operator)")
	h.waitArrivals("audit-log", "k-every", 1, 1, 1)
	if got := h.Sub.Ns("billing", "k-every"); !slices.Equal(got, []int{1, 1}) {
		t.Errorf("billing received %v, want [1 1]: its paused subscription was refused, nothing sent", got)
	}

	// An unknown id exits 2.
	if r := run(t, h.env, "redeliver", "--event", "00000000-0000-4000-8000-000000000000"); r.code != ExitInvalid ||
		!strings.Contains(r.stderr, "is not in the event log") {
		t.Errorf("redeliver --event of an unknown id: exit %d, stderr %q", r.code, r.stderr)
	}
}
