package store_test

import (
	"context"
	"testing"
	"time"

	"herald/internal/testenv"
	"herald/store"
)

// TestPurgeEventsKeepsWhatIsStillNeeded: old dispatched and rejected events
// go, in bounded batches; undispatched ones survive however old, recent
// ones survive, and the audit trail is never touched.
func TestPurgeEventsKeepsWhatIsStillNeeded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := store.Open(ctx, testenv.NewSchema(t), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.Audit(ctx, store.AuditEntry{Action: "app.applied", TargetType: "app", TargetID: "a"}); err != nil {
		t.Fatal(err)
	}
	// 5 old dispatched, 2 old rejected, 3 old undispatched, 2 recent dispatched, 1 recent rejected.
	insert := func(state string, age time.Duration, n int) {
		for i := 0; i < n; i++ {
			_, err := st.Pool.Exec(ctx, `
				INSERT INTO events (id, source_app, type, version, subject, envelope, state, code, received_at, dispatched_at)
				VALUES (gen_random_uuid(), 'a', 'a.x', 1, 'k', '\x7b7d', $1, CASE WHEN $1 = 'rejected' THEN 'data_invalid' END,
				        now() - $2::interval, CASE WHEN $1 = 'dispatched' THEN now() - $2::interval END)`,
				state, age.String())
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	insert("dispatched", 40*24*time.Hour, 5)
	insert("rejected", 40*24*time.Hour, 2)
	insert("accepted", 400*24*time.Hour, 3)
	insert("dispatched", time.Hour, 2)
	insert("rejected", time.Hour, 1)

	cutoff := time.Now().Add(-30 * 24 * time.Hour)
	var total store.PurgeCounts
	for round := 0; ; round++ {
		n, err := st.PurgeEvents(ctx, cutoff, 3)
		if err != nil {
			t.Fatal(err)
		}
		if n.Events > 3 || n.Outcomes > 3 {
			t.Fatalf("a batch of 3 deleted %+v", n)
		}
		total.Events += n.Events
		total.Outcomes += n.Outcomes
		if !n.Full(3) {
			break
		}
		if round > 10 {
			t.Fatal("purge does not end")
		}
	}
	if total.Events != 7 || total.Outcomes != 0 {
		t.Fatalf("purged %+v, want the 7 old dispatched or rejected events and no outcome", total)
	}
	counts := map[string]int{}
	rows, err := st.Pool.Query(ctx, `SELECT state, count(*) FROM events GROUP BY state`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			t.Fatal(err)
		}
		counts[s] = n
	}
	if counts["accepted"] != 3 || counts["dispatched"] != 2 || counts["rejected"] != 1 {
		t.Fatalf("left after retention: %v", counts)
	}
	audit, err := st.ListAudit(ctx, store.AuditFilter{})
	if err != nil || len(audit) != 1 {
		t.Fatalf("audit rows after retention: %d, %v", len(audit), err)
	}
}
