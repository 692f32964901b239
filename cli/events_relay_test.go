package cli

import (
	"context"
	"strings"
	"testing"

	"herald/store"
)

// TestEventsShowAndRetryRelay: events show gives the relay's back-off of an
// event (attempts, last error, next try; relay_failed once dead), and
// events retry-relay gives a dead event back to the relay, audited, and
// exits 2 with one line when there is nothing to retry.
func TestEventsShowAndRetryRelay(t *testing.T) {
	t.Parallel()
	e := appliedEnv(t)
	ctx := context.Background()
	publishOne := func(subject string) string {
		t.Helper()
		out := decode[acceptedJSON](t, mustRun(t, e, "publish", "--app", "contacts", "--type", "contacts.person.deleted",
			"--version", "1", "--subject", subject, "--data", `{"id":"p1"}`, "--json").stdout)
		return out.ID
	}
	first, second := publishOne("person-1"), publishOne("person-1")
	st, err := store.Open(ctx, e.getenv("HERALD_DATABASE_URL"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	seqs := map[string]int64{}
	for _, id := range []string{first, second} {
		ev, err := st.GetEvent(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		seqs[id] = ev.Seq
	}
	fail := func(maxAttempts int) {
		t.Helper()
		if _, err := st.RecordRelayFailures(ctx, []store.RelayFailure{
			{Seq: seqs[first], Error: "signal deliver:x: refused", Counted: true},
			{Seq: seqs[second], Error: "signal deliver:x: refused", Counted: true},
		}, maxAttempts); err != nil {
			t.Fatal(err)
		}
	}

	// Backing off.
	fail(3)
	r := mustRun(t, e, "events", "show", first)
	wantContains(t, "events show", r.stdout, "not yet handed", "relay        1 failed signal, next try ",
		"relay error  signal deliver:x: refused")
	shown := decode[eventShowJSON](t, mustRun(t, e, "events", "show", first, "--json").stdout)
	if rel := shown.Event.Relay; rel == nil || rel.Attempts != 1 || rel.LastError != "signal deliver:x: refused" ||
		rel.NextTry == nil || rel.Code != "" || rel.DeadAt != nil {
		t.Fatalf("events show --json relay %+v", rel)
	}
	r = run(t, e, "events", "retry-relay", first)
	if r.code != ExitInvalid || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
		t.Fatalf("retry-relay of an event that is not dead: exit %d, stderr %q", r.code, r.stderr)
	}
	wantContains(t, "stderr", r.stderr, "is not dead", "nothing to do")

	// Dead.
	fail(2)
	r = mustRun(t, e, "events", "show", first)
	wantContains(t, "events show", r.stdout, "accepted (relay_failed: the relay gave up ", "starter events retry-relay "+first,
		"relay        2 failed signals\n")
	shown = decode[eventShowJSON](t, mustRun(t, e, "events", "show", first, "--json").stdout)
	if rel := shown.Event.Relay; rel == nil || rel.Attempts != 2 || rel.Code != "relay_failed" || rel.DeadAt == nil || rel.NextTry != nil {
		t.Fatalf("events show --json of a dead event: relay %+v", rel)
	}
	st2 := decode[statusJSON](t, mustRun(t, e.with("HERALD_WORKER_URL", "http://127.0.0.1:1"), "status", "--json").stdout)
	if st2.Relay.Dead != 2 || st2.Relay.Undispatched != 0 {
		t.Fatalf("status relay %+v", st2.Relay)
	}

	r = mustRun(t, e, "events", "retry-relay", first, "--reason", "temporal fixed", "--actor", "ops")
	wantContains(t, "retry-relay", r.stdout, "event "+first+": given back to the relay after 2 failed signals",
		"with 1 later dead event of contacts.person.deleted, subject person-1")
	rows, err := st.ListAudit(ctx, store.AuditFilter{TargetID: first})
	if err != nil || len(rows) != 1 || rows[0].Action != store.ActionEventRelayRetried || rows[0].Actor != "ops" ||
		rows[0].ErrorCode != "relay_failed" || !strings.Contains(string(rows[0].Metadata), `"reason": "temporal fixed"`) {
		t.Fatalf("audit %+v %v", rows, err)
	}
	for _, id := range []string{first, second} {
		ev, err := st.GetEvent(ctx, id)
		if err != nil || ev.RelayDeadAt != nil || ev.RelayAttempts != 0 || ev.RelayError != "" {
			t.Fatalf("event after retry-relay %+v %v", ev, err)
		}
	}
	if shown := decode[eventShowJSON](t, mustRun(t, e, "events", "show", first, "--json").stdout); shown.Event.Relay != nil {
		t.Fatalf("a retried event shows relay %+v", shown.Event.Relay)
	}

	for _, id := range []string{first, "9b2f1c55-0000-4000-8000-000000000000", "nope"} {
		r = run(t, e, "events", "retry-relay", id)
		if r.code != ExitInvalid || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Fatalf("retry-relay %s: exit %d, stderr %q", id, r.code, r.stderr)
		}
	}
}

// TestEventsShowSharedID: event ids are unique per source app, so two apps'
// events may share one; events show names both apps and asks for --app,
// and shows either with it.
func TestEventsShowSharedID(t *testing.T) {
	t.Parallel()
	e := appliedEnv(t)
	ctx := context.Background()
	out := decode[acceptedJSON](t, mustRun(t, e, "publish", "--app", "contacts", "--type", "contacts.person.deleted",
		"--version", "1", "--subject", "person-1", "--data", `{"id":"p1"}`, "--json").stdout)
	st, err := store.Open(ctx, e.getenv("HERALD_DATABASE_URL"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ev := store.NewEvent{ID: out.ID, SourceApp: "billing", Type: "billing.thing.happened", Version: 1, Subject: "x",
		Envelope: []byte(`{}`), ContentHash: "h"}
	if ins, err := st.InsertEvents(ctx, []store.NewEvent{ev}); err != nil || ins[0].Conflict {
		t.Fatalf("billing's event under contacts' id: %+v, %v", ins, err)
	}
	r := run(t, e, "events", "show", out.ID)
	if r.code != ExitInvalid {
		t.Fatalf("events show of a shared id: exit %d, want %d\n%s", r.code, ExitInvalid, r.stderr)
	}
	wantContains(t, "stderr", r.stderr, "billing, contacts", "--app")
	for _, app := range []string{"contacts", "billing"} {
		shown := decode[eventShowJSON](t, mustRun(t, e, "events", "show", out.ID, "--app", app, "--json").stdout)
		if shown.Event.SourceApp != app || shown.Event.ID != out.ID {
			t.Errorf("events show --app %s: %+v", app, shown.Event)
		}
	}
}
