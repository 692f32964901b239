package store_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"

	"herald/store"
)

// writerDigest is the once digest as a writer computed it before migration
// 0024 (store.onceDigest then): anyone could compute it for a row a
// workflow was going to write.
func writerDigest(t *testing.T, e store.AuditEntry) string {
	t.Helper()
	meta, err := json.Marshal(e.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	var m any
	if err := json.Unmarshal(meta, &m); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal([]any{e.Action, e.Outcome, e.Actor, e.TargetType, e.TargetID, e.ErrorCode, m})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// TestRuntimeRoleCannotPreEmptAOnceKey: the runtime role (which may insert
// audit rows) plants rows of its own content under the once key a key
// workflow's Record activity will use, naming them with the digest of the
// genuine row and with made-up digests. The genuine delivery.failed write,
// also as the runtime role, still writes its row, its outcome row and its
// herald.key.failed event, and its retry writes nothing again: the database
// computes the digest from each row's own content, whatever the writer says.
func TestRuntimeRoleCannotPreEmptAOnceKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	owner := heraldStore(t)
	mustApply(t, owner, contactsManifest(decl("person.updated", 1)))
	mustApply(t, owner, billingManifest(subTo("contacts.person.updated", 1)))
	ev := newEvent("contacts.person.updated", "p1", "a")
	if _, err := owner.InsertEvents(ctx, []store.NewEvent{ev}); err != nil {
		t.Fatal(err)
	}
	role, runtimeURL := newRuntimeRole(t, owner)
	if err := owner.GrantRuntime(ctx, role); err != nil {
		t.Fatal(err)
	}
	rt, err := store.Open(ctx, runtimeURL, store.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)

	wf := "deliver:" + billingPersonSub + ":p1"
	const key = "record:run-7/12/0"
	genuine := store.AuditEntry{
		Action: store.ActionDeliveryFailed, Outcome: store.OutcomeFailed, Actor: store.ActorSystem,
		TargetType: store.TargetDelivery, TargetID: wf, ErrorCode: "attempts_exhausted", OnceKey: key,
		Metadata: map[string]any{"seq": float64(1), "attempts": float64(3), "eventId": ev.ID},
	}
	// The trigger that computes the digest stays on for the runtime role.
	for _, sql := range []string{
		`ALTER TABLE audit DISABLE TRIGGER audit_once_digest`,
		`DROP TRIGGER audit_once_digest ON audit`,
		`CREATE OR REPLACE FUNCTION herald_audit_once_digest() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$`,
		`SET session_replication_role = replica`,
	} {
		_, err := rt.Pool.Exec(ctx, sql)
		wantRefused(t, sql, err)
	}
	planted := []string{writerDigest(t, genuine), "0000", ""}
	for i, digest := range planted {
		if _, err := rt.Pool.Exec(ctx, `
			INSERT INTO audit (action, outcome, actor, target_type, target_id, metadata, once_key, once_digest)
			VALUES ('delivery.note', 'allowed', 'system', 'delivery', $1, jsonb_build_object('planted', $2::int), $3, NULLIF($4, ''))`,
			wf, i, key, digest); err != nil {
			t.Fatalf("plant a row as the runtime role (digest %q): %v", digest, err)
		}
	}
	var named int
	if err := owner.Pool.QueryRow(ctx, `SELECT count(*) FROM audit WHERE once_key = $1 AND once_digest = ANY($2)`,
		key, planted).Scan(&named); err != nil || named != 0 {
		t.Errorf("%d planted rows keep the digest their writer gave (%v), want 0", named, err)
	}

	for range 2 { // the genuine write, then its retry
		if err := rt.RecordWithAudit(ctx, billingPersonSub, "p1", []store.OutcomeUpdate{
			{EventID: ev.ID, Status: store.EventFailed, Attempts: 3, Code: "attempts_exhausted", LastCode: "handler_failed"},
		}, []store.AuditEntry{genuine}); err != nil {
			t.Fatalf("the genuine write under a planted key: %v", err)
		}
	}
	var failedRows, notes int
	rows, err := rt.ListAudit(ctx, store.AuditFilter{TargetID: wf})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		switch r.Action {
		case store.ActionDeliveryFailed:
			failedRows++
			if r.ErrorCode != "attempts_exhausted" || r.Outcome != store.OutcomeFailed {
				t.Errorf("the delivery.failed row: %+v", r)
			}
		case "delivery.note":
			notes++
		}
	}
	if failedRows != 1 || notes != len(planted) {
		t.Errorf("%d delivery.failed rows and %d planted rows, want 1 and %d", failedRows, notes, len(planted))
	}
	var keyFailed int
	for _, h := range heraldEvents(t, owner) {
		if h.Type == store.TypeKeyFailed {
			keyFailed++
		}
	}
	if keyFailed != 1 {
		t.Errorf("%d herald.key.failed events, want 1", keyFailed)
	}
	var status string
	var attempts int
	if err := owner.Pool.QueryRow(ctx, `SELECT status, attempts FROM outcomes WHERE subscription_id = $1 AND event_id = $2`,
		billingPersonSub, ev.ID).Scan(&status, &attempts); err != nil || status != store.EventFailed || attempts != 3 {
		t.Errorf("outcome row: %s, %d attempts (%v); want failed, 3", status, attempts, err)
	}
	var failedKeys int
	if err := owner.Pool.QueryRow(ctx, `SELECT count(*) FROM failed_keys WHERE subscription_id = $1 AND subject = 'p1'`,
		billingPersonSub).Scan(&failedKeys); err != nil || failedKeys != 1 {
		t.Errorf("%d failed_keys rows (%v), want 1", failedKeys, err)
	}
}
