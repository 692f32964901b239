package store_test

import (
	"context"
	"errors"
	"testing"

	"herald/manifest"
	"herald/store"
)

// TestSubscriptionPolicyApplied: apps apply writes a subscription's
// onFailure and maxAttempts to its row (hold and the worker's schedule by
// default) and audits each change once; an unchanged manifest writes none.
func TestSubscriptionPolicyApplied(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	ctx := context.Background()
	mustApply(t, s, contactsManifest(decl("person.updated", 1)))
	sub := subTo("contacts.person.updated", 1)
	mustApply(t, s, billingManifest(sub))
	if p, err := s.SubscriptionPolicy(ctx, billingPersonSub); err != nil || p != (store.Policy{OnFailure: "hold"}) {
		t.Fatalf("default policy %+v, %v; want hold and no attempt count", p, err)
	}
	if n := len(auditRows(t, s, store.ActionSubscriptionPolicyChanged, billingPersonSub)); n != 0 {
		t.Fatalf("%d policy_changed rows for a subscription with the default policy", n)
	}
	sub.OnFailure, sub.MaxAttempts = manifest.OnFailureSkip, 5
	mustApply(t, s, billingManifest(sub))
	mustApply(t, s, billingManifest(sub))
	if p, err := s.SubscriptionPolicy(ctx, billingPersonSub); err != nil || p != (store.Policy{OnFailure: "skip", MaxAttempts: 5}) {
		t.Fatalf("policy %+v, %v; want skip, 5", p, err)
	}
	sub.OnFailure, sub.MaxAttempts = "", 0
	mustApply(t, s, billingManifest(sub))
	if p, err := s.SubscriptionPolicy(ctx, billingPersonSub); err != nil || p != (store.Policy{OnFailure: "hold"}) {
		t.Fatalf("policy back to the default: %+v, %v", p, err)
	}
	rows := auditRows(t, s, store.ActionSubscriptionPolicyChanged, billingPersonSub)
	if len(rows) != 2 {
		t.Fatalf("%d policy_changed rows, want 2 (to skip, back to hold)", len(rows))
	}
	if _, err := s.SubscriptionPolicy(ctx, "billing:nosuch.type@1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("policy of a missing subscription: %v", err)
	}
	if _, err := s.Pool.Exec(ctx, `UPDATE subscriptions SET max_attempts = 21 WHERE id = $1`, billingPersonSub); err == nil {
		t.Fatal("the table took maxAttempts 21")
	}
}

// TestKeySkipped: a key's record of a skipped event settles its row
// (cancelled, skipped_after_failure), writes herald.key.skipped in the same
// transaction, marks no failed key, and the event can be redelivered.
func TestKeySkipped(t *testing.T) {
	t.Parallel()
	s := heraldStore(t)
	ctx := context.Background()
	mustApply(t, s, contactsManifest(decl("person.updated", 1)))
	mustApply(t, s, billingManifest(subTo("contacts.person.updated", 1)))
	evs := []store.NewEvent{newEvent("contacts.person.updated", "p1", "a")}
	if _, err := s.InsertEvents(ctx, evs); err != nil {
		t.Fatal(err)
	}
	var seq int64
	if err := s.Pool.QueryRow(ctx, `SELECT seq FROM events WHERE id = $1`, evs[0].ID).Scan(&seq); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecordDispatch(ctx, []store.Dispatch{{SubscriptionID: billingPersonSub, EventID: evs[0].ID,
		Seq: seq, Subject: "p1"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkDispatched(ctx, []int64{seq}); err != nil {
		t.Fatal(err)
	}
	wf := "deliver:" + billingPersonSub + ":p1"
	err := s.RecordWithAudit(ctx, billingPersonSub, "p1", []store.OutcomeUpdate{
		{EventID: evs[0].ID, Status: store.EventCancelled, Attempts: 3, Code: store.CodeSkippedAfterFailure,
			LastCode: "handler_failed", LastError: "status 500"},
	}, []store.AuditEntry{{
		Action: store.ActionDeliverySkipped, Outcome: store.OutcomeFailed, TargetType: store.TargetDelivery,
		TargetID: wf, ErrorCode: store.CodeSkippedAfterFailure,
		Metadata: map[string]any{"seq": float64(1), "attempts": float64(3), "failedCode": "attempts_exhausted",
			"lastCode": "handler_failed", "error": "status 500", "eventId": evs[0].ID,
			"subscription": billingPersonSub, "subject": "p1"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var skipped []map[string]any
	for _, ev := range heraldEvents(t, s) {
		if ev.Type == store.TypeKeySkipped {
			skipped = append(skipped, ev.Data)
		}
	}
	if len(skipped) != 1 {
		t.Fatalf("%d herald.key.skipped events, want 1", len(skipped))
	}
	if d := skipped[0]; d["eventId"] != evs[0].ID || d["code"] != store.CodeSkippedAfterFailure ||
		d["failedCode"] != "attempts_exhausted" || d["lastCode"] != "handler_failed" || d["attempts"] != float64(3) ||
		d["workflowId"] != wf || d["skippedAt"] == nil {
		t.Fatalf("skipped data %+v", d)
	}
	var status, code string
	var failedKeys int
	if err := s.Pool.QueryRow(ctx, `SELECT status, code, (SELECT count(*) FROM failed_keys) FROM outcomes
		WHERE subscription_id = $1 AND event_id = $2`, billingPersonSub, evs[0].ID).Scan(&status, &code, &failedKeys); err != nil {
		t.Fatal(err)
	}
	if status != store.EventCancelled || code != store.CodeSkippedAfterFailure || failedKeys != 0 {
		t.Fatalf("row %s/%s, %d failed keys; want cancelled/skipped_after_failure and no failed key", status, code, failedKeys)
	}
	requeued, refused, err := s.Requeue(ctx, billingPersonSub, "p1", []string{evs[0].ID})
	if err != nil || len(requeued) != 1 || len(refused) != 0 {
		t.Fatalf("redeliver of the skipped event: %+v refused %v, %v", requeued, refused, err)
	}
}
