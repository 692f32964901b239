package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"herald/internal/testkit"
	"herald/manifest"
	"herald/store"
)

// TestKeyQueueReadsWhatAKeyOwes: the held rows of one key after the
// cursor, in sequence order with their state; claims that name no row of
// the key (another key's event, a wrong seq, no id) are unknown, a settled
// one is not, and a held one the cursor has passed is read too.
func TestKeyQueueReadsWhatAKeyOwes(t *testing.T) {
	t.Parallel()
	s, evs := outcomeFixture(t)
	ctx := context.Background()
	if _, err := s.RecordDispatch(ctx, []store.Dispatch{
		{SubscriptionID: billingPersonSub, EventID: evs[0].ID, Seq: 1, Subject: "p1"},
		{SubscriptionID: billingPersonSub, EventID: evs[1].ID, Seq: 2, Subject: "p1"},
		{SubscriptionID: billingPersonSub, EventID: evs[2].ID, Seq: 3, Subject: "p1"},
		{SubscriptionID: billingPersonSub, EventID: evs[3].ID, Seq: 4, Subject: "p2"},
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordOutcomes(ctx, billingPersonSub, "p1", []store.OutcomeUpdate{
		{EventID: evs[0].ID, Seq: 1, Status: store.EventDelivered, Attempts: 1, DeliveredBy: "run-1/head"},
		{EventID: evs[1].ID, Seq: 2, Status: store.EventFailed, Attempts: 8, Code: "attempts_exhausted",
			LastCode: "handler_failed", LastError: "HTTP 500"},
	}); err != nil {
		t.Fatal(err)
	}
	q, err := s.KeyQueue(ctx, billingPersonSub, "p1", 0, 10, nil, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(q.Rows) != 2 || q.More || q.Rows[0].ID != evs[1].ID || q.Rows[0].Status != store.EventFailed ||
		q.Rows[0].Attempts != 8 || q.Rows[0].Code != "attempts_exhausted" || q.Rows[0].LastError != "HTTP 500" ||
		q.Rows[1].ID != evs[2].ID || q.Rows[1].Status != store.EventQueued || q.Rows[1].QueuedAt.IsZero() {
		t.Fatalf("rows %+v more %v", q.Rows, q.More)
	}
	q, err = s.KeyQueue(ctx, billingPersonSub, "p1", 0, 1, nil, "", false)
	if err != nil || len(q.Rows) != 1 || !q.More || q.Rows[0].Seq != 2 {
		t.Fatalf("limit 1: %+v, %v", q, err)
	}
	claims := []store.ClaimedEvent{
		{ID: evs[0].ID, Seq: 1},  // delivered: a re-send, known
		{ID: evs[1].ID, Seq: 2},  // held, the cursor passed it: read again
		{ID: evs[2].ID, Seq: 99}, // wrong seq
		{ID: evs[3].ID, Seq: 4},  // another key's
		{ID: "not-an-id", Seq: 5},
		{ID: "00000000-0000-4000-8000-000000000001", Seq: 1 << 50},
	}
	q, err = s.KeyQueue(ctx, billingPersonSub, "p1", 2, 0, claims, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(q.Rows) != 1 || q.Rows[0].ID != evs[1].ID {
		t.Fatalf("with limit 0 only the held claim the cursor passed: %+v", q.Rows)
	}
	if len(q.Unknown) != 4 {
		t.Fatalf("unknown %+v, want the wrong seq, the other key's, the non-id and the made-up one", q.Unknown)
	}
	if len(q.DeliveredBy) != 1 || q.DeliveredBy[evs[0].ID] != "run-1/head" {
		t.Fatalf("delivered by %v, want the local execution that delivered event 1", q.DeliveredBy)
	}
}

// TestKeyQueueReadsLocalDeliveriesAboveTheCursor: given a run id, the
// rows above the cursor that a local execution of that run delivered, in
// sequence order: not another run's (whose id it only begins), not a row
// redelivered since, not another key's, none below the cursor.
func TestKeyQueueReadsLocalDeliveriesAboveTheCursor(t *testing.T) {
	t.Parallel()
	s, evs := outcomeFixture(t)
	ctx := context.Background()
	if _, err := s.RecordDispatch(ctx, []store.Dispatch{
		{SubscriptionID: billingPersonSub, EventID: evs[0].ID, Seq: 1, Subject: "p1"},
		{SubscriptionID: billingPersonSub, EventID: evs[1].ID, Seq: 2, Subject: "p1"},
		{SubscriptionID: billingPersonSub, EventID: evs[2].ID, Seq: 3, Subject: "p1"},
		{SubscriptionID: billingPersonSub, EventID: evs[3].ID, Seq: 4, Subject: "p2"},
	}); err != nil {
		t.Fatal(err)
	}
	for _, u := range []struct {
		subject string
		u       store.OutcomeUpdate
	}{
		{"p1", store.OutcomeUpdate{EventID: evs[0].ID, Seq: 1, Status: store.EventDelivered, Attempts: 1, DeliveredBy: "run-10/" + evs[0].ID}},
		{"p1", store.OutcomeUpdate{EventID: evs[1].ID, Seq: 2, Status: store.EventDelivered, Attempts: 1, DeliveredBy: "run-1/" + evs[1].ID}},
		{"p1", store.OutcomeUpdate{EventID: evs[2].ID, Seq: 3, Status: store.EventDelivered, Attempts: 1, DeliveredBy: "run-1/" + evs[1].ID}},
		{"p2", store.OutcomeUpdate{EventID: evs[3].ID, Seq: 4, Status: store.EventDelivered, Attempts: 1, DeliveredBy: "run-1/" + evs[3].ID}},
	} {
		if err := s.RecordOutcomes(ctx, billingPersonSub, u.subject, []store.OutcomeUpdate{u.u}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.MarkDispatched(ctx, []int64{1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	if _, refused, err := s.Requeue(ctx, billingPersonSub, "p1", []string{evs[2].ID}); err != nil || len(refused) > 0 {
		t.Fatalf("redeliver event 3: refused %v, %v", refused, err)
	}
	for _, c := range []struct {
		after int64
		run   string
		want  []int64
	}{
		{0, "run-1", []int64{2}},
		{1, "run-1", []int64{2}},
		{2, "run-1", nil},
		{0, "run-10", []int64{1}},
		{1, "run-10", nil},
		{0, "run", nil},
		{0, "", nil},
	} {
		q, err := s.KeyQueue(ctx, billingPersonSub, "p1", c.after, 10, nil, c.run, false)
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		for _, e := range q.LocalAbove {
			got = append(got, e.Seq)
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Fatalf("after %d, run %q: local deliveries above the cursor %v, want %v", c.after, c.run, got, c.want)
		}
		if len(q.Rows) != 1 || q.Rows[0].ID != evs[2].ID {
			t.Fatalf("after %d: rows %+v, want the redelivered event 3", c.after, q.Rows)
		}
	}
}

// TestKeyStartReadsInOneRoundTrip: what a key's run reads before it
// delivers (the rows it owes, those a local execution of the run
// delivered, the pause and the subscription's error policy) is one batch,
// one round trip on a connection that has prepared its statements (a
// worker's pooled one; the tracer sees batches, not the first one's
// prepare); a subscription that is gone answers ErrNotFound for the
// policy, beside its rows.
func TestKeyStartReadsInOneRoundTrip(t *testing.T) {
	t.Parallel()
	s, evs := outcomeFixture(t)
	ctx := context.Background()
	mustApply(t, s, mkManifest("billing", nil, manifest.Subscription{Type: "contacts.person.updated", Version: 1,
		OnFailure: manifest.OnFailureSkip, MaxAttempts: 3}))
	if _, err := s.RecordDispatch(ctx, []store.Dispatch{
		{SubscriptionID: billingPersonSub, EventID: evs[0].ID, Seq: 1, Subject: "p1"},
		{SubscriptionID: billingPersonSub, EventID: evs[1].ID, Seq: 2, Subject: "p1"},
		{SubscriptionID: billingPersonSub, EventID: evs[2].ID, Seq: 3, Subject: "p1"},
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordOutcomes(ctx, billingPersonSub, "p1", []store.OutcomeUpdate{
		{EventID: evs[0].ID, Seq: 1, Status: store.EventDelivered, Attempts: 1, DeliveredBy: "run-1/" + evs[0].ID},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool.Exec(ctx, `INSERT INTO paused_keys (subscription_id, subject) VALUES ($1, 'p1')`, billingPersonSub); err != nil {
		t.Fatal(err)
	}
	cfg := s.Pool.Config()
	counter := &testkit.Sent{}
	cfg.ConnConfig.Tracer = counter
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	traced := &store.Store{Pool: pool}
	if _, _, err := traced.KeyStart(ctx, billingPersonSub, "p1", 1, "run-1"); err != nil {
		t.Fatal(err)
	}
	counter.Reset()
	q, p, err := traced.KeyStart(ctx, billingPersonSub, "p1", 1, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	if statements, batches := counter.Reset(); len(statements) != 0 || batches != 1 {
		t.Errorf("KeyStart sent %q one by one and %d batches; want one batch", statements, batches)
	}
	if len(q.Rows) != 1 || q.Rows[0].Seq != 2 || !q.More || !q.Paused ||
		len(q.LocalAbove) != 1 || q.LocalAbove[0].Seq != 1 {
		t.Fatalf("rows %+v more %v paused %v local above %+v", q.Rows, q.More, q.Paused, q.LocalAbove)
	}
	if p.OnFailure != manifest.OnFailureSkip || p.MaxAttempts != 3 {
		t.Fatalf("policy %+v, want skip after 3 attempts", p)
	}
	if q, _, err := traced.KeyStart(ctx, billingPersonSub, "p2", 10, "run-1"); err != nil || len(q.Rows) != 0 || q.Paused {
		t.Fatalf("a key with nothing owed: %+v, %v", q, err)
	}
	gone := "gone:contacts.person.updated@1"
	if _, err := s.Pool.Exec(ctx, `INSERT INTO paused_keys (subscription_id, subject) VALUES ($1, 'p1')`, gone); err != nil {
		t.Fatal(err)
	}
	if q, _, err := traced.KeyStart(ctx, gone, "p1", 10, ""); !errors.Is(err, store.ErrNotFound) || !q.Paused {
		t.Fatalf("a subscription that is gone: paused %v, %v; want its rows and ErrNotFound", q.Paused, err)
	}
}

// TestRestartAndRequeueRestartTheHoldClock: an operator's redelivery, of
// the head or by id, sets the row queued with no attempts and a new
// queued_at.
func TestRestartAndRequeueRestartTheHoldClock(t *testing.T) {
	t.Parallel()
	s, evs := outcomeFixture(t)
	ctx := context.Background()
	if _, err := s.RecordDispatch(ctx, []store.Dispatch{
		{SubscriptionID: billingPersonSub, EventID: evs[0].ID, Seq: 1, Subject: "p1"},
		{SubscriptionID: billingPersonSub, EventID: evs[1].ID, Seq: 2, Subject: "p1"},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool.Exec(ctx, `UPDATE outcomes SET queued_at = now() - interval '10 days'`); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkDispatched(ctx, []int64{1, 2}); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordOutcomes(ctx, billingPersonSub, "p1", []store.OutcomeUpdate{
		{EventID: evs[0].ID, Seq: 1, Status: store.EventFailed, Attempts: 8, Code: "attempts_exhausted"},
		{EventID: evs[1].ID, Seq: 2, Status: store.EventCancelled},
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordOutcomes(ctx, billingPersonSub, "p1", []store.OutcomeUpdate{
		{EventID: evs[0].ID, Seq: 1, Status: store.EventQueued, Restart: true},
	}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Requeue(ctx, billingPersonSub, "p1", []string{evs[1].ID}); err != nil {
		t.Fatal(err)
	}
	q, err := s.KeyQueue(ctx, billingPersonSub, "p1", 0, 10, nil, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(q.Rows) != 2 {
		t.Fatalf("rows %+v", q.Rows)
	}
	for _, r := range q.Rows {
		if r.Status != store.EventQueued || r.Attempts != 0 || r.Code != "" || time.Since(r.QueuedAt) > time.Hour {
			t.Fatalf("after a redelivery: %+v", r)
		}
	}
}

// TestQuietOwingKeys: keys of subscriptions not removed whose held rows
// have not moved for the quiet period, in key order after the cursor.
func TestQuietOwingKeys(t *testing.T) {
	t.Parallel()
	s, evs := outcomeFixture(t)
	ctx := context.Background()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := s.Pool.Exec(ctx, q, args...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.RecordDispatch(ctx, []store.Dispatch{
		{SubscriptionID: billingPersonSub, EventID: evs[0].ID, Seq: 1, Subject: "p1"},
		{SubscriptionID: billingPersonSub, EventID: evs[3].ID, Seq: 4, Subject: "p2"},
	}); err != nil {
		t.Fatal(err)
	}
	round, err := s.QuietOwingKeys(ctx, "", "", time.Minute, 10)
	if err != nil || len(round.Quiet) != 0 || round.LastSub != "" {
		t.Fatalf("rows that just moved: %+v, %v", round, err)
	}
	exec(`UPDATE outcomes SET updated_at = now() - interval '2 minutes'`)
	// Rows written by a relay round that has not yet signalled their keys
	// (a burst's round can take minutes) are the relay's, however old.
	round, err = s.QuietOwingKeys(ctx, "", "", time.Minute, 10)
	if err != nil || len(round.Quiet) != 0 {
		t.Fatalf("keys whose events the relay has not dispatched: %+v, %v", round, err)
	}
	if err := s.MarkDispatched(ctx, []int64{1, 4}); err != nil {
		t.Fatal(err)
	}
	round, err = s.QuietOwingKeys(ctx, "", "", time.Minute, 10)
	if err != nil || len(round.Quiet) != 2 || round.Quiet[0].Subject != "p1" || round.Quiet[1].Subject != "p2" ||
		round.Quiet[0].App != "billing" || round.Quiet[0].Type != "contacts.person.updated" || round.LastSub != "" {
		t.Fatalf("quiet keys %+v, %v", round, err)
	}
	// A row written behind a quiet head (the relay does not signal a held
	// key) leaves the key quiet; a head that moves does not.
	if _, err := s.RecordDispatch(ctx, []store.Dispatch{
		{SubscriptionID: billingPersonSub, EventID: evs[1].ID, Seq: 2, Subject: "p1"},
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordOutcomes(ctx, billingPersonSub, "p2", []store.OutcomeUpdate{
		{EventID: evs[3].ID, Seq: 4, Status: store.EventQueued, Attempts: 1, LastCode: "handler_failed"}}); err != nil {
		t.Fatal(err)
	}
	round, err = s.QuietOwingKeys(ctx, "", "", time.Minute, 10)
	if err != nil || len(round.Quiet) != 1 || round.Quiet[0].Subject != "p1" {
		t.Fatalf("quiet keys %+v, %v; want p1 (a new row behind its quiet head), not p2 (its head just moved)", round, err)
	}
	exec(`UPDATE outcomes SET updated_at = now() - interval '2 minutes'`)
	// One key a round: the cursor goes on after it.
	round, err = s.QuietOwingKeys(ctx, "", "", time.Minute, 1)
	if err != nil || len(round.Quiet) != 1 || round.Quiet[0].Subject != "p1" || round.LastSubject != "p1" {
		t.Fatalf("first round of one: %+v, %v", round, err)
	}
	round, err = s.QuietOwingKeys(ctx, round.LastSub, round.LastSubject, time.Minute, 1)
	if err != nil || len(round.Quiet) != 1 || round.Quiet[0].Subject != "p2" {
		t.Fatalf("after the cursor: %+v, %v", round, err)
	}
	// A head whose relay signal failed (backing off or dead) is the sweep's
	// again: while the relay backs off it signals nothing to a held key of
	// the same event, and once dead it tries no more.
	exec(`UPDATE events SET state = 'accepted', relay_attempts = 1,
		relay_error = 'signal failed', relay_next_try = now() + interval '1 minute' WHERE seq = 4`)
	round, err = s.QuietOwingKeys(ctx, "", "", time.Minute, 10)
	if err != nil || len(round.Quiet) != 2 || round.Quiet[1].Subject != "p2" {
		t.Fatalf("a key whose head's signal failed: %+v, %v; want p1 and p2", round, err)
	}
	// p1's head moves on to seq 2, which the relay has not dispatched.
	if err := s.RecordOutcomes(ctx, billingPersonSub, "p1", []store.OutcomeUpdate{
		{EventID: evs[0].ID, Seq: 1, Status: store.EventDelivered, Attempts: 1}}); err != nil {
		t.Fatal(err)
	}
	exec(`UPDATE outcomes SET updated_at = now() - interval '2 minutes'`)
	round, err = s.QuietOwingKeys(ctx, "", "", time.Minute, 10)
	if err != nil || len(round.Quiet) != 1 || round.Quiet[0].Subject != "p2" {
		t.Fatalf("p1's head is now seq 2, undispatched: %+v, %v; want p2 alone", round, err)
	}
	// Failures that do not hold seq 2 back leave it the relay's: a later
	// event of its key, an event dispatched since its signal failed.
	exec(`UPDATE events SET relay_attempts = 1, relay_error = 'signal failed',
		relay_next_try = now() + interval '1 minute' WHERE seq IN (1, 3)`)
	round, err = s.QuietOwingKeys(ctx, "", "", time.Minute, 10)
	if err != nil || len(round.Quiet) != 1 || round.Quiet[0].Subject != "p2" {
		t.Fatalf("failures after seq 2 or of a dispatched event: %+v, %v; want p2 alone", round, err)
	}
	// A round that has not handed its key out within RelayRoundBound is
	// stuck: the key is the sweep's.
	exec(`UPDATE outcomes SET updated_at = now() - $1::interval - interval '1 minute'`, store.RelayRoundBound.String())
	round, err = s.QuietOwingKeys(ctx, "", "", time.Minute, 10)
	if err != nil || len(round.Quiet) != 2 {
		t.Fatalf("a head its round has held for longer than %v: %+v, %v; want p1 and p2", store.RelayRoundBound, round, err)
	}
	exec(`UPDATE outcomes SET updated_at = now() - interval '2 minutes'`)
	// A head behind an event of its type and subject that the relay gave
	// up on is never read again by the relay (Undispatched): the sweep's.
	exec(`UPDATE events SET state = 'accepted', relay_attempts = 8,
		relay_error = 'signal failed', relay_dead_at = now() WHERE seq = 1`)
	round, err = s.QuietOwingKeys(ctx, "", "", time.Minute, 10)
	if err != nil || len(round.Quiet) != 2 || round.Quiet[0].Subject != "p1" {
		t.Fatalf("a head behind a dead event: %+v, %v; want p1 and p2", round, err)
	}
	// A dead event of another subject holds nothing back.
	exec(`UPDATE events SET relay_attempts = 0, relay_error = NULL, relay_next_try = NULL WHERE seq = 4`)
	round, err = s.QuietOwingKeys(ctx, "", "", time.Minute, 10)
	if err != nil || len(round.Quiet) != 1 || round.Quiet[0].Subject != "p1" {
		t.Fatalf("p2's head is the relay's again, p1's behind a dead event: %+v, %v; want p1 alone", round, err)
	}
	// A removed subscription's keys are the removal sweep's.
	exec(`UPDATE subscriptions SET state = 'cancelled' WHERE id = $1`, billingPersonSub)
	round, err = s.QuietOwingKeys(ctx, "", "", time.Minute, 10)
	if err != nil || len(round.Quiet) != 0 {
		t.Fatalf("keys of a removed subscription: %+v, %v", round, err)
	}
}

// TestKeyPauseIsARow: the key's pause and resume audit rows, written by its
// workflow through RecordWithAudit, keep its row in paused_keys, which
// KeyQueue reports when asked (and only then); another key's or another
// workflow's rows change nothing, a pause written twice is one row, and
// the key's removal with its subscription forgets it.
func TestKeyPauseIsARow(t *testing.T) {
	t.Parallel()
	s, _ := outcomeFixture(t)
	ctx := context.Background()
	id := store.DeliveryWorkflowID(billingPersonSub, "p1")
	paused := func(subject string, withPause bool) bool {
		t.Helper()
		q, err := s.KeyQueue(ctx, billingPersonSub, subject, 0, 10, nil, "", withPause)
		if err != nil {
			t.Fatal(err)
		}
		if withPause {
			// A delivery's read of its batch finds the same pause.
			b, err := s.DeliveryBatch(ctx, billingPersonSub, subject, nil)
			if err != nil {
				t.Fatal(err)
			}
			if b.KeyPaused != q.Paused {
				t.Fatalf("DeliveryBatch says %s is paused: %v; KeyQueue: %v", subject, b.KeyPaused, q.Paused)
			}
		}
		return q.Paused
	}
	rows := func() int {
		t.Helper()
		var n int
		if err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM paused_keys`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	record := func(subject, target, action, code string) {
		t.Helper()
		e := store.AuditEntry{Action: action, Outcome: store.OutcomeAllowed, Actor: "ann",
			TargetType: store.TargetDelivery, TargetID: target, ErrorCode: code}
		if err := s.RecordWithAudit(ctx, billingPersonSub, subject, nil, []store.AuditEntry{e}); err != nil {
			t.Fatal(err)
		}
	}

	record("p1", id, store.ActionDeliveryPaused, "")
	record("p1", id, store.ActionDeliveryPaused, "")
	if !paused("p1", true) || paused("p1", false) || paused("p2", true) || rows() != 1 {
		t.Fatalf("after two pauses of p1: p1 %v (unasked %v), p2 %v, %d rows; want p1 alone paused, one row",
			paused("p1", true), paused("p1", false), paused("p2", true), rows())
	}
	var actor string
	if err := s.Pool.QueryRow(ctx, `SELECT actor FROM paused_keys`).Scan(&actor); err != nil || actor != "ann" {
		t.Fatalf("the row's actor %q, %v; want ann", actor, err)
	}
	// Another workflow's audit row, written with this key's outcomes, is
	// not this key's pause.
	record("p1", store.DeliveryWorkflowID(billingPersonSub, "p2"), store.ActionDeliveryResumed, "")
	record("p2", store.DeliveryWorkflowID(billingPersonSub, "p1"), store.ActionDeliveryPaused, "")
	if !paused("p1", true) || paused("p2", true) {
		t.Fatalf("another workflow's rows changed the pauses: p1 %v, p2 %v", paused("p1", true), paused("p2", true))
	}
	record("p1", id, store.ActionDeliveryResumed, "")
	if paused("p1", true) || rows() != 0 {
		t.Fatalf("after the resume: paused %v, %d rows", paused("p1", true), rows())
	}
	record("p1", id, store.ActionDeliveryPaused, "")
	record("p1", id, store.ActionDeliveryCancelled, store.CodeSubscriptionRemoved)
	if paused("p1", true) {
		t.Fatal("a key removed with its subscription is still paused")
	}
	// A pause applied after the removal (it waited for the delivery in
	// flight) writes no row for the cancelled subscription.
	if _, err := s.Pool.Exec(ctx, `UPDATE subscriptions SET state = 'cancelled' WHERE id = $1`, billingPersonSub); err != nil {
		t.Fatal(err)
	}
	record("p1", id, store.ActionDeliveryPaused, "")
	if paused("p1", true) {
		t.Fatal("a pause after the subscription's removal wrote a row")
	}
}

// TestKeyHasEvents: a key is of the log once the relay wrote an outcome
// row of it, whatever became of the row, and only for a subscription that
// is not cancelled; a subject with no row, or another subscription's key of
// the same subject, is not.
func TestKeyHasEvents(t *testing.T) {
	t.Parallel()
	s, evs := outcomeFixture(t)
	ctx := context.Background()
	const crmSub = "crm:contacts.person.updated@1"
	mustApply(t, s, mkManifest("crm", nil, subTo("contacts.person.updated", 1)))
	has := func(sub, subject string) bool {
		t.Helper()
		ok, err := s.KeyHasEvents(ctx, sub, subject)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if has(billingPersonSub, "p1") {
		t.Fatal("a key with no outcome row is of the log")
	}
	if _, err := s.RecordDispatch(ctx, []store.Dispatch{
		{SubscriptionID: billingPersonSub, EventID: evs[0].ID, Seq: 1, Subject: "p1"},
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordOutcomes(ctx, billingPersonSub, "p1", []store.OutcomeUpdate{
		{EventID: evs[0].ID, Seq: 1, Status: store.EventDelivered, Attempts: 1, DeliveredBy: "run-1/head"},
	}); err != nil {
		t.Fatal(err)
	}
	if !has(billingPersonSub, "p1") || has(billingPersonSub, "p2") || has(crmSub, "p1") {
		t.Fatalf("after p1's delivered row: p1 %v, p2 %v, crm's p1 %v; want billing's p1 alone",
			has(billingPersonSub, "p1"), has(billingPersonSub, "p2"), has(crmSub, "p1"))
	}
	if _, err := s.Pool.Exec(ctx, `UPDATE subscriptions SET state = 'cancelled' WHERE id = $1`, billingPersonSub); err != nil {
		t.Fatal(err)
	}
	if has(billingPersonSub, "p1") {
		t.Fatal("a key of a cancelled subscription is of the log")
	}
}

// TestForgetKeyPause: a resume of a key its run does not hold paused
// deletes the key's row and writes its audit row only when there was a
// row; a retry after a commit whose answer was lost reports the pause it
// forgot again, without a second audit row.
func TestForgetKeyPause(t *testing.T) {
	t.Parallel()
	s, _ := outcomeFixture(t)
	ctx := context.Background()
	id := store.DeliveryWorkflowID(billingPersonSub, "p1")
	audit := func(once string) store.AuditEntry {
		return store.AuditEntry{Action: store.ActionDeliveryResumed, Outcome: store.OutcomeAllowed, Actor: "ann",
			TargetType: store.TargetDelivery, TargetID: id, OnceKey: once}
	}
	resumed := func() int {
		t.Helper()
		rows, err := s.ListAudit(ctx, store.AuditFilter{TargetID: id, Action: store.ActionDeliveryResumed, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		return len(rows)
	}
	if forgot, err := s.ForgetKeyPause(ctx, billingPersonSub, "p1", audit("run/1")); err != nil || forgot || resumed() != 0 {
		t.Fatalf("no row: forgot %v, %v, %d audit rows; want false and none", forgot, err, resumed())
	}
	if _, err := s.Pool.Exec(ctx, `INSERT INTO paused_keys (subscription_id, subject) VALUES ($1, 'p1'), ($1, 'p2')`,
		billingPersonSub); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second: a retry of the same activity
		if forgot, err := s.ForgetKeyPause(ctx, billingPersonSub, "p1", audit("run/2")); err != nil || !forgot {
			t.Fatalf("a row: forgot %v, %v; want true", forgot, err)
		}
	}
	var left []string
	rows, err := s.Pool.Query(ctx, `SELECT subject FROM paused_keys`)
	if err == nil {
		for rows.Next() {
			var subj string
			if err = rows.Scan(&subj); err != nil {
				break
			}
			left = append(left, subj)
		}
		rows.Close()
	}
	if err != nil || len(left) != 1 || left[0] != "p2" || resumed() != 1 {
		t.Fatalf("rows left %v (%v), %d audit rows; want p2's alone and one delivery.resumed", left, err, resumed())
	}
}

// TestAuditRowWithNUL: an operator's reason holding a NUL (valid UTF-8,
// which jsonb refuses) does not make the key's pause unwritable, which its
// workflow would retry for good: the NUL is stored as U+FFFD.
func TestAuditRowWithNUL(t *testing.T) {
	t.Parallel()
	s, _ := outcomeFixture(t)
	ctx := context.Background()
	id := store.DeliveryWorkflowID(billingPersonSub, "p1")
	e := store.AuditEntry{Action: store.ActionDeliveryPaused, Outcome: store.OutcomeAllowed, Actor: "ann",
		TargetType: store.TargetDelivery, TargetID: id,
		Metadata: map[string]any{"reason": "oops\x00", "eventIds": []string{"a\x00"}, "nested": map[string]any{"k\x00": "v\x00"}}}
	if err := s.RecordWithAudit(ctx, billingPersonSub, "p1", nil, []store.AuditEntry{e}); err != nil {
		t.Fatalf("a reason with a NUL: %v", err)
	}
	rows, err := s.ListAudit(ctx, store.AuditFilter{TargetID: id, Action: store.ActionDeliveryPaused, Limit: 10})
	if err != nil || len(rows) != 1 {
		t.Fatalf("audit rows %+v, %v; want one", rows, err)
	}
	var meta map[string]any
	if err := json.Unmarshal(rows[0].Metadata, &meta); err != nil || meta["reason"] != "oops\uFFFD" {
		t.Fatalf("metadata %s (%v); want the reason \"oops\\uFFFD\"", rows[0].Metadata, err)
	}
	if q, err := s.KeyQueue(ctx, billingPersonSub, "p1", 0, 10, nil, "", true); err != nil || !q.Paused {
		t.Fatalf("paused %v, %v; want the pause written", q.Paused, err)
	}
}

// TestPauseWaitsForARemovalInFlight: a key's pause written while its
// subscription's removal is in flight (the removal has locked and
// cancelled the subscription and deleted its keys' pauses, not yet
// committed) waits for it and writes no row, so no pause outlives the key.
// Without the pause's lock it saw the subscription still active and its row
// stayed.
func TestPauseWaitsForARemovalInFlight(t *testing.T) {
	t.Parallel()
	s, _ := outcomeFixture(t)
	ctx := context.Background()
	removal, err := s.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = removal.Rollback(ctx) }()
	if _, err := removal.Exec(ctx, `SELECT 1 FROM subscriptions WHERE id = $1 FOR UPDATE`, billingPersonSub); err != nil {
		t.Fatal(err)
	}
	if _, err := removal.Exec(ctx, `UPDATE subscriptions SET state = 'cancelled' WHERE id = $1`, billingPersonSub); err != nil {
		t.Fatal(err)
	}
	if _, err := removal.Exec(ctx, `DELETE FROM paused_keys WHERE subscription_id = $1`, billingPersonSub); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		e := store.AuditEntry{Action: store.ActionDeliveryPaused, Outcome: store.OutcomeAllowed, Actor: "ann",
			TargetType: store.TargetDelivery, TargetID: store.DeliveryWorkflowID(billingPersonSub, "p1")}
		done <- s.RecordWithAudit(ctx, billingPersonSub, "p1", nil, []store.AuditEntry{e})
	}()
	select {
	case err := <-done:
		t.Fatalf("the pause was written during the removal (%v), want it to wait", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := removal.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	paused, err := s.KeyPaused(ctx, billingPersonSub, "p1")
	if err != nil || paused {
		t.Fatalf("paused %v (%v) after the removal committed: the pause outlived the key", paused, err)
	}
}
