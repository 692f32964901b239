package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"herald/manifest"
	"herald/store"
)

// heraldEvent is one operational event read back from the event log.
type heraldEvent struct {
	Type, Subject string
	Envelope      struct {
		Source string          `json:"source"`
		Type   string          `json:"type"`
		Data   json.RawMessage `json:"data"`
	}
	Data map[string]any
}

// heraldEvents returns the operational events in the log, in order, after
// checking each one's data against its declared schema.
func heraldEvents(t *testing.T, s *store.Store) []heraldEvent {
	t.Helper()
	ctx := context.Background()
	rows, err := s.Pool.Query(ctx, `SELECT type, subject, envelope FROM events
		WHERE source_app = 'herald' AND state <> 'rejected' ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []heraldEvent
	for rows.Next() {
		var ev heraldEvent
		var env []byte
		if err := rows.Scan(&ev.Type, &ev.Subject, &env); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(env, &ev.Envelope); err != nil {
			t.Fatalf("envelope %s: %v", env, err)
		}
		if err := json.Unmarshal(ev.Envelope.Data, &ev.Data); err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	app, err := s.GetApp(ctx, store.HeraldApp)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range out {
		var schema json.RawMessage
		for _, d := range app.Declarations {
			if d.Type == ev.Type && d.Version == 1 {
				schema = d.DataSchema
			}
		}
		compiled, err := manifest.CompileSchema(schema)
		if err != nil {
			t.Fatalf("schema of %s: %v", ev.Type, err)
		}
		if errs := manifest.ValidateData(compiled, ev.Envelope.Data); len(errs) > 0 {
			t.Fatalf("%s data %s does not match its schema: %+v", ev.Type, ev.Envelope.Data, errs)
		}
		if ev.Envelope.Source != "app:herald" || ev.Envelope.Type != ev.Type {
			t.Fatalf("envelope %+v", ev.Envelope)
		}
	}
	return out
}

func heraldStore(t *testing.T) *store.Store {
	t.Helper()
	s := openSyncStore(t)
	res, err := s.EnsureHeraldApp(context.Background())
	if err != nil || res.Unchanged || res.DeclarationsAdded != 5 {
		t.Fatalf("ensure herald app: %+v, %v", res, err)
	}
	return s
}

func TestHeraldAppDeclaredOnce(t *testing.T) {
	t.Parallel()
	s := heraldStore(t)
	ctx := context.Background()
	res, err := s.EnsureHeraldApp(ctx)
	if err != nil || !res.Unchanged {
		t.Fatalf("second ensure: %+v, %v", res, err)
	}
	app, err := s.GetApp(ctx, store.HeraldApp)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, d := range app.Declarations {
		types = append(types, d.Type)
	}
	want := "herald.key.expired herald.key.failed herald.key.recovered herald.key.skipped herald.subscription.state_changed"
	if strings.Join(types, " ") != want {
		t.Fatalf("declarations %v, want %s", types, want)
	}
	// A user's apply of other apps leaves it alone.
	mustApply(t, s, contactsManifest(decl("person.updated", 1)))
	if app, err := s.GetApp(ctx, store.HeraldApp); err != nil || app.RemovedAt != nil || len(app.Declarations) != 5 {
		t.Fatalf("herald app after a user apply: %+v, %v", app, err)
	}
}

func TestReservedAppRefused(t *testing.T) {
	t.Parallel()
	s := heraldStore(t)
	ctx := context.Background()
	m := mkManifest("herald", []manifest.Event{decl("key.failed", 1)})
	if _, err := s.ApplyManifest(ctx, m, "alice"); !errors.Is(err, store.ErrReservedApp) {
		t.Fatalf("apply herald: %v", err)
	}
	if _, err := s.DiffManifests(ctx, []*manifest.Manifest{m}); !errors.Is(err, store.ErrReservedApp) {
		t.Fatalf("diff herald: %v", err)
	}
	if _, err := s.RemoveApp(ctx, "herald", "alice"); !errors.Is(err, store.ErrReservedApp) {
		t.Fatalf("remove herald: %v", err)
	}
	_, err := manifest.Parse("herald.json", []byte(`{"app":"herald","endpoint":"https://x.example","events":[],"subscribes":[]}`))
	if err == nil || !strings.Contains(err.Error(), `"herald" is reserved`) {
		t.Fatalf("parse a manifest named herald: %v", err)
	}
	if app, err := s.GetApp(ctx, store.HeraldApp); err != nil || len(app.Declarations) != 5 || app.RemovedAt != nil {
		t.Fatalf("herald app: %+v, %v", app, err)
	}
}

func TestSubscriptionStateChangeEmitsEvent(t *testing.T) {
	t.Parallel()
	s := heraldStore(t)
	ctx := context.Background()
	mustApply(t, s, billingManifest(subTo("contacts.person.updated", 1)))
	mustApply(t, s, contactsManifest(decl("person.updated", 1)))
	if _, err := s.SetSubscriptionPaused(ctx, billingPersonSub, true, "alice", "maintenance"); err != nil {
		t.Fatal(err)
	}
	var evs []heraldEvent
	for _, ev := range heraldEvents(t, s) {
		if ev.Subject == billingPersonSub {
			evs = append(evs, ev)
		}
	}
	if len(evs) != 2 {
		t.Fatalf("events %+v", evs)
	}
	for _, ev := range evs {
		if ev.Type != store.TypeSubscriptionStateChanged || ev.Subject != billingPersonSub ||
			ev.Data["subscriberApp"] != "billing" || ev.Data["eventType"] != "contacts.person.updated" ||
			ev.Data["eventVersion"] != float64(1) {
			t.Fatalf("event %+v", ev)
		}
	}
	if d := evs[0].Data; d["from"] != "blocked" || d["fromReason"] != "event_not_declared" || d["to"] != "active" ||
		d["toReason"] != nil || d["actor"] != "alice" {
		t.Fatalf("first change %+v", d)
	}
	if d := evs[1].Data; d["from"] != "active" || d["to"] != "paused" || d["toReason"] != "paused_by_operator" ||
		d["reason"] != "maintenance" {
		t.Fatalf("second change %+v", d)
	}
}

// failKey records the head failure of a key as its Delivery workflow does.
func failKey(t *testing.T, s *store.Store, sub, subject, eventID, workflowID string) {
	t.Helper()
	err := s.RecordWithAudit(context.Background(), sub, subject, []store.OutcomeUpdate{
		{EventID: eventID, Status: store.EventFailed, Attempts: 3, Code: "attempts_exhausted",
			LastCode: "handler_failed", LastError: strings.Repeat("é", 700)},
	}, []store.AuditEntry{{
		Action: store.ActionDeliveryFailed, Outcome: store.OutcomeFailed, TargetType: store.TargetDelivery,
		TargetID: workflowID, ErrorCode: "attempts_exhausted",
		Metadata: map[string]any{"seq": float64(1), "attempts": float64(3), "lastCode": "handler_failed",
			"error": strings.Repeat("é", 700), "eventId": eventID, "subscription": sub, "subject": subject},
	}})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRecordRetryWritesOnce: the Record activity run again after a commit
// whose answer was lost (same once keys) appends no second audit row and
// emits no second herald.key.failed; a later record of the key (another
// activity, other keys) does.
func TestRecordRetryWritesOnce(t *testing.T) {
	t.Parallel()
	s := heraldStore(t)
	ctx := context.Background()
	mustApply(t, s, contactsManifest(decl("person.updated", 1)))
	mustApply(t, s, billingManifest(subTo("contacts.person.updated", 1)))
	ev := newEvent("contacts.person.updated", "p1", "a")
	if _, err := s.InsertEvents(ctx, []store.NewEvent{ev}); err != nil {
		t.Fatal(err)
	}
	wf := "deliver:" + billingPersonSub + ":p1"
	record := func(onceKey string) {
		t.Helper()
		if err := s.RecordWithAudit(ctx, billingPersonSub, "p1", []store.OutcomeUpdate{
			{EventID: ev.ID, Status: store.EventFailed, Attempts: 3, Code: "attempts_exhausted", LastCode: "handler_failed"},
		}, []store.AuditEntry{
			{Action: store.ActionDeliveryFailed, Outcome: store.OutcomeFailed, TargetType: store.TargetDelivery,
				TargetID: wf, ErrorCode: "attempts_exhausted", OnceKey: onceKey,
				Metadata: map[string]any{"seq": float64(1), "attempts": float64(3), "eventId": ev.ID}},
			{Action: "delivery.note", TargetType: store.TargetDelivery, TargetID: wf, OnceKey: onceKey + "/1"},
		}); err != nil {
			t.Fatal(err)
		}
	}
	count := func() (failedRows, notes, keyFailed int) {
		t.Helper()
		for _, ev := range heraldEvents(t, s) {
			if ev.Type == store.TypeKeyFailed {
				keyFailed++
			}
		}
		rows, err := s.ListAudit(ctx, store.AuditFilter{TargetID: wf})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			switch r.Action {
			case store.ActionDeliveryFailed:
				failedRows++
			case "delivery.note":
				notes++
			}
		}
		return
	}
	record("record:run-1/5/0")
	record("record:run-1/5/0") // the retry
	if f, n, k := count(); f != 1 || n != 1 || k != 1 {
		t.Fatalf("after a retry: %d delivery.failed rows, %d notes, %d herald.key.failed; want 1, 1, 1", f, n, k)
	}
	record("record:run-1/9/0") // a later activity of the key
	if f, n, k := count(); f != 2 || n != 2 || k != 2 {
		t.Fatalf("after another activity: %d delivery.failed rows, %d notes, %d herald.key.failed; want 2, 2, 2", f, n, k)
	}
	// A different row under a key a workflow will use (planted with the
	// runtime role's INSERT) does not pre-empt the real one: the record is
	// written, with its outcome row and herald.key.failed event, and its
	// retry writes nothing again.
	if err := s.Audit(ctx, store.AuditEntry{Action: "delivery.note", TargetType: store.TargetDelivery,
		TargetID: wf, OnceKey: "record:run-1/12/0"}); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the record, then its retry
		err := s.RecordWithAudit(ctx, billingPersonSub, "p1", []store.OutcomeUpdate{
			{EventID: ev.ID, Status: store.EventFailed, Attempts: 4, Code: "attempts_exhausted", LastCode: "handler_failed"},
		}, []store.AuditEntry{
			{Action: store.ActionDeliveryFailed, Outcome: store.OutcomeFailed, TargetType: store.TargetDelivery,
				TargetID: wf, ErrorCode: "attempts_exhausted", OnceKey: "record:run-1/12/0",
				Metadata: map[string]any{"seq": float64(1), "attempts": float64(4), "eventId": ev.ID}},
		})
		if err != nil {
			t.Fatalf("record under a planted key: %v", err)
		}
	}
	if f, _, k := count(); f != 3 || k != 3 {
		t.Fatalf("after a record under a planted key and its retry: %d delivery.failed rows, %d herald.key.failed; want 3, 3", f, k)
	}
	var attempts int
	if err := s.Pool.QueryRow(ctx, `SELECT attempts FROM outcomes WHERE subscription_id = $1 AND event_id = $2`,
		billingPersonSub, ev.ID).Scan(&attempts); err != nil || attempts != 4 {
		t.Fatalf("outcome of the record under a planted key: attempts %d (%v), want 4", attempts, err)
	}
	// Rows without a key are always appended.
	for range 2 {
		if err := s.Audit(ctx, store.AuditEntry{Action: "delivery.note", TargetType: store.TargetDelivery, TargetID: wf}); err != nil {
			t.Fatal(err)
		}
	}
	if _, n, _ := count(); n != 5 {
		t.Fatalf("%d notes, want 5 (2 recorded, 1 planted, 2 without a key)", n)
	}
}

func TestKeyFailedThenRecovered(t *testing.T) {
	t.Parallel()
	s := heraldStore(t)
	ctx := context.Background()
	mustApply(t, s, contactsManifest(decl("person.updated", 1)))
	mustApply(t, s, billingManifest(subTo("contacts.person.updated", 1)))
	evs := []store.NewEvent{newEvent("contacts.person.updated", "p1", "a"), newEvent("contacts.person.updated", "p1", "b")}
	if _, err := s.InsertEvents(ctx, evs); err != nil {
		t.Fatal(err)
	}
	wf := "deliver:" + billingPersonSub + ":p1"
	// A row by another workflow claiming the key is not the key's transition.
	failKey(t, s, billingPersonSub, "p1", evs[0].ID, "deliver:forged")
	failKey(t, s, billingPersonSub, "p1", evs[0].ID, wf)
	// A failed attempt of the redelivered head is no transition.
	if err := s.RecordOutcomes(ctx, billingPersonSub, "p1", []store.OutcomeUpdate{
		{EventID: evs[0].ID, Status: store.EventQueued, Attempts: 1, LastCode: "handler_failed"},
	}); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second delivery is no recovery
		if err := s.RecordOutcomes(ctx, billingPersonSub, "p1", []store.OutcomeUpdate{
			{EventID: evs[0].ID, Status: store.EventDelivered, Attempts: 2},
			{EventID: evs[1].ID, Status: store.EventDelivered, Attempts: 1},
		}); err != nil {
			t.Fatal(err)
		}
	}
	got := heraldEvents(t, s)
	var keyEvents []heraldEvent
	for _, ev := range got {
		if ev.Type != store.TypeSubscriptionStateChanged {
			keyEvents = append(keyEvents, ev)
		}
	}
	if len(keyEvents) != 2 || keyEvents[0].Type != store.TypeKeyFailed || keyEvents[1].Type != store.TypeKeyRecovered {
		t.Fatalf("key events %+v", keyEvents)
	}
	f, r := keyEvents[0], keyEvents[1]
	if f.Subject != billingPersonSub+"/p1" || r.Subject != f.Subject {
		t.Fatalf("subjects %q %q", f.Subject, r.Subject)
	}
	if d := f.Data; d["subscriptionId"] != billingPersonSub || d["subjectKey"] != "p1" || d["eventId"] != evs[0].ID ||
		d["code"] != "attempts_exhausted" || d["lastCode"] != "handler_failed" || d["attempts"] != float64(3) ||
		d["workflowId"] != wf || len(d["lastError"].(string)) != 1000 {
		t.Fatalf("failed data %+v", d)
	}
	if d := r.Data; d["failedEventId"] != evs[0].ID || d["failedCode"] != "attempts_exhausted" ||
		d["failedSeconds"].(float64) < 0 || d["failedAt"] != f.Data["failedAt"] {
		t.Fatalf("recovered data %+v", d)
	}
	rows, err := s.ListAudit(ctx, store.AuditFilter{Action: store.ActionDeliveryRecovered})
	if err != nil || len(rows) != 1 || rows[0].TargetID != wf {
		t.Fatalf("recovered audit rows %+v, %v", rows, err)
	}
}

func TestLoopGuardNoKeyEventsAboutHeraldSubscriptions(t *testing.T) {
	t.Parallel()
	s := heraldStore(t)
	ctx := context.Background()
	const sub = "alerts:herald.key.failed@1"
	mustApply(t, s, mkManifest("alerts", nil, subTo(store.TypeKeyFailed, 1)))
	mustApply(t, s, contactsManifest(decl("person.updated", 1)))
	mustApply(t, s, billingManifest(subTo("contacts.person.updated", 1)))
	evs := []store.NewEvent{newEvent("contacts.person.updated", "p1", "a")}
	if _, err := s.InsertEvents(ctx, evs); err != nil {
		t.Fatal(err)
	}
	failKey(t, s, billingPersonSub, "p1", evs[0].ID, "deliver:"+billingPersonSub+":p1")
	var failed []heraldEvent
	for _, ev := range heraldEvents(t, s) {
		if ev.Type == store.TypeKeyFailed {
			failed = append(failed, ev)
		}
	}
	if len(failed) != 1 {
		t.Fatalf("herald.key.failed events %+v", failed)
	}
	// The alerting subscription's own key fails on that event: nothing more.
	var id string
	if err := s.Pool.QueryRow(ctx, `SELECT id::text FROM events WHERE type = $1`, store.TypeKeyFailed).Scan(&id); err != nil {
		t.Fatal(err)
	}
	subject := failed[0].Subject
	failKey(t, s, sub, subject, id, "deliver:"+sub+":"+subject)
	if err := s.RecordOutcomes(ctx, sub, subject, []store.OutcomeUpdate{{EventID: id, Status: store.EventDelivered}}); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range heraldEvents(t, s) {
		if ev.Type != store.TypeSubscriptionStateChanged {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d key events, want the first one only", n)
	}
}

func TestRemovedSubscriptionForgetsFailedKey(t *testing.T) {
	t.Parallel()
	s := heraldStore(t)
	ctx := context.Background()
	mustApply(t, s, contactsManifest(decl("person.updated", 1)))
	mustApply(t, s, billingManifest(subTo("contacts.person.updated", 1)))
	evs := []store.NewEvent{newEvent("contacts.person.updated", "p1", "a")}
	if _, err := s.InsertEvents(ctx, evs); err != nil {
		t.Fatal(err)
	}
	wf := "deliver:" + billingPersonSub + ":p1"
	failKey(t, s, billingPersonSub, "p1", evs[0].ID, wf)
	if _, err := s.Pool.Exec(ctx, `UPDATE subscriptions SET state = 'cancelled' WHERE id = $1`, billingPersonSub); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CancelHeld(ctx, billingPersonSub, "p1", "subscription_removed", store.AuditEntry{
		Action: store.ActionDeliveryCancelled, TargetType: store.TargetDelivery, TargetID: wf, ErrorCode: "subscription_removed",
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordOutcomes(ctx, billingPersonSub, "p1", []store.OutcomeUpdate{{EventID: evs[0].ID, Status: store.EventDelivered}}); err != nil {
		t.Fatal(err)
	}
	for _, ev := range heraldEvents(t, s) {
		if ev.Type == store.TypeKeyRecovered {
			t.Fatalf("recovered after the subscription's removal: %+v", ev)
		}
	}
}

// TestUserAppNamedHeraldIsNotTakenOver: an app named herald declared by a
// user before the name was reserved keeps its endpoint; Herald refuses to
// declare over it (the worker then runs without operational events), emits
// nothing, and the user's app may be removed.
func TestUserAppNamedHeraldIsNotTakenOver(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	ctx := context.Background()
	if _, err := s.Pool.Exec(ctx, `INSERT INTO apps (id, endpoint, delivery_path, manifest, content_hash)
		VALUES ('herald', 'https://herald.users.example', '/hooks', '{}', 'x')`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnsureHeraldApp(ctx); !errors.Is(err, store.ErrHeraldAppTaken) {
		t.Fatalf("ensure over a user's app: %v, want ErrHeraldAppTaken", err)
	}
	var endpoint string
	if err := s.Pool.QueryRow(ctx, `SELECT endpoint FROM apps WHERE id = 'herald'`).Scan(&endpoint); err != nil || endpoint != "https://herald.users.example" {
		t.Fatalf("the user's app now has endpoint %q (%v)", endpoint, err)
	}
	// A state change of another subscription emits no operational event.
	mustApply(t, s, contactsManifest(decl("person.updated", 1)))
	mustApply(t, s, mkManifest("billing", nil, subTo("contacts.person.updated", 1)))
	var n int
	if err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE source_app = 'herald'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d operational events emitted under a user's app named herald (%v)", n, err)
	}
	if _, err := s.RemoveApp(ctx, "herald", "alice"); err != nil {
		t.Fatalf("remove the user's app named herald: %v", err)
	}
}

// TestCancelHeldLeavesAnAppliedAgainSubscription: the sweep lists the keys
// of a removed subscription, then cancels the held events of each whose
// workflow no longer runs. The app may apply the subscription again in
// between, and a new event of the key be dispatched to it: CancelHeld
// cancelled that one too (subscription_removed), though it is owed. It
// cancels only while the subscription is still removed.
func TestCancelHeldLeavesAnAppliedAgainSubscription(t *testing.T) {
	t.Parallel()
	s := heraldStore(t)
	ctx := context.Background()
	mustApply(t, s, contactsManifest(decl("person.updated", 1)))
	mustApply(t, s, billingManifest(subTo("contacts.person.updated", 1)))
	evs := []store.NewEvent{newEvent("contacts.person.updated", "p1", "a")}
	if _, err := s.InsertEvents(ctx, evs); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordOutcomes(ctx, billingPersonSub, "p1", []store.OutcomeUpdate{{EventID: evs[0].ID, Status: store.EventQueued}}); err != nil {
		t.Fatal(err)
	}
	cancelHeld := func() (int, error) {
		return s.CancelHeld(ctx, billingPersonSub, "p1", "subscription_removed", store.AuditEntry{
			Action: store.ActionDeliveryCancelled, TargetType: store.TargetDelivery, TargetID: "deliver:" + billingPersonSub + ":p1",
			ErrorCode: "subscription_removed"})
	}
	cancel := func() int {
		n, err := cancelHeld()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	status := func() string {
		var st string
		if err := s.Pool.QueryRow(ctx, `SELECT status FROM outcomes WHERE subscription_id = $1 AND event_id = $2`,
			billingPersonSub, evs[0].ID).Scan(&st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	if n := cancel(); n != 0 || status() != store.EventQueued {
		t.Fatalf("CancelHeld of an active subscription's key: %d cancelled, row %s; want none, queued", n, status())
	}
	if _, err := s.Pool.Exec(ctx, `UPDATE subscriptions SET state = 'cancelled' WHERE id = $1`, billingPersonSub); err != nil {
		t.Fatal(err)
	}
	// Applied again while CancelHeld runs: it waits for the apply and
	// cancels nothing (read without its lock, the row said removed).
	if err := s.RecordOutcomes(ctx, billingPersonSub, "p1", []store.OutcomeUpdate{{EventID: evs[0].ID, Status: store.EventQueued, Restart: true}}); err != nil {
		t.Fatal(err)
	}
	apply, err := s.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer apply.Rollback(ctx) //nolint:errcheck // committed below
	if _, err := apply.Exec(ctx, `UPDATE subscriptions SET state = 'active' WHERE id = $1`, billingPersonSub); err != nil {
		t.Fatal(err)
	}
	done := make(chan int, 1)
	go func() {
		n, err := cancelHeld() // not cancel: t.Fatal only on the test's goroutine
		if err != nil {
			n = -1
		}
		done <- n
	}()
	time.Sleep(300 * time.Millisecond) // CancelHeld is waiting for the row
	if err := apply.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := <-done; n != 0 || status() != store.EventQueued {
		t.Fatalf("CancelHeld during an apply of the subscription: %d cancelled, row %s; want none, queued", n, status())
	}
}
