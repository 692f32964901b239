package store_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"herald/store"
)

// coarseOnly is the last migration with 256 stripes a type (0031).
const coarseOnly = 31

// olderPublisherHolds publishes key's event as a publisher of a release
// before 0032 does, in a transaction it leaves open (rolled back at the
// test's end if still open): that publisher holds the key's coarse row.
func olderPublisherHolds(t *testing.T, s *store.Store, key string) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	older, err := s.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Ended whatever happens: the store's Close waits for its connection.
	t.Cleanup(func() { _ = older.Rollback(context.Background()) })
	if ok, err := store.OlderLockAndInsertOne(ctx, older, newEvent("contacts.person.updated", key, "h")); err != nil || !ok {
		t.Fatalf("the older publisher's publish of %s: inserted %v, %v", key, ok, err)
	}
	return older
}

// openStoreBeforeFineStripes is a store whose schema was at migration 0031
// (256 stripes a type) when contacts.person.updated@1 was declared and an
// event of it published, then migrated to the end: the upgrade of a
// database older publishers publish into.
func openStoreBeforeFineStripes(t *testing.T) *store.Store {
	t.Helper()
	ctx := context.Background()
	s := openStoreAt(t, coarseOnly)
	mustApply(t, s, contactsManifest(decl("person.updated", 1)))
	if ok, err := store.OlderLockAndInsertOne(ctx, s.Pool, newEvent("contacts.person.updated", "before", "h")); err != nil || !ok {
		t.Fatalf("an older publisher's publish before the upgrade: inserted %v, %v", ok, err)
	}
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return s
}

// stripeRows counts the coarse and fine stripe rows of contacts.person.updated@1.
func stripeRows(t *testing.T, s *store.Store) (coarse, fine int) {
	t.Helper()
	if err := s.Pool.QueryRow(context.Background(), `
		SELECT count(*) FILTER (WHERE stripe < $1), count(*) FILTER (WHERE stripe >= $1)
		  FROM key_stripes WHERE type = 'contacts.person.updated' AND version = 1`,
		store.FineStripeBase).Scan(&coarse, &fine); err != nil {
		t.Fatal(err)
	}
	return coarse, fine
}

// waitsFor runs publish and reports whether it was still waiting after
// 400 ms; holder, the transaction it may wait for, then commits, and the
// publish must end.
func waitsFor(t *testing.T, publish func() error, holder pgx.Tx) bool {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- publish() }()
	var waited bool
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("publish: %v", err)
		}
	case <-time.After(400 * time.Millisecond):
		waited = true
	}
	if err := holder.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if waited {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("publish after the other transaction ended: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("publish still waiting 10 s after the other transaction ended")
		}
	}
	return waited
}

// TestUpgradedDatabaseKeepsOlderPublishersInOrder: migration 0032 keeps
// the 256 coarse stripe rows of a database that has any, beside the new
// fine ones, and a publisher of this release locks a key's coarse row as
// well as its fine one: while an older publisher's transaction holds the
// key's coarse row, a new publish of the key (one event, several, in a
// caller's transaction or not) waits for it, so seq order stays commit
// order within the key.
func TestUpgradedDatabaseKeepsOlderPublishersInOrder(t *testing.T) {
	t.Parallel()
	s := openStoreBeforeFineStripes(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if coarse, fine := stripeRows(t, s); coarse != store.CoarseStripeCount || fine != store.KeyStripeCount {
		t.Fatalf("after the upgrade: %d coarse and %d fine rows, want %d and %d", coarse, fine,
			store.CoarseStripeCount, store.KeyStripeCount)
	}
	scheme, err := s.KeyStripeScheme(ctx)
	if err != nil || !scheme.Coarse {
		t.Fatalf("scheme after the upgrade: %+v, %v, want the coarse rows kept", scheme, err)
	}
	// A declaration made after the upgrade gets both kinds too.
	mustApply(t, s, contactsManifest(decl("person.updated", 1), decl("person.updated", 2)))
	var v2 int
	if err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM key_stripes WHERE type = 'contacts.person.updated' AND version = 2`).
		Scan(&v2); err != nil || v2 != store.CoarseStripeCount+store.KeyStripeCount {
		t.Fatalf("a declaration after the upgrade has %d stripe rows (%v), want %d", v2, err,
			store.CoarseStripeCount+store.KeyStripeCount)
	}

	ways := map[string]func(key string) error{
		"one event": func(key string) error {
			_, err := s.InsertEvents(ctx, []store.NewEvent{newEvent("contacts.person.updated", key, "h")})
			return err
		},
		"several events": func(key string) error {
			_, err := s.InsertEvents(ctx, []store.NewEvent{
				newEvent("contacts.person.updated", key+"-other", "h"), newEvent("contacts.person.updated", key, "h")})
			return err
		},
		"one event in a caller's transaction": func(key string) error {
			return s.WithTx(ctx, func(tx pgx.Tx) error {
				_, err := store.InsertEventsTx(ctx, tx, []store.NewEvent{newEvent("contacts.person.updated", key, "h")})
				return err
			})
		},
	}
	for name, publish := range ways {
		key := "person-" + strings.ReplaceAll(name, " ", "-")
		older := olderPublisherHolds(t, s, key)
		if !waitsFor(t, func() error { return publish(key) }, older) {
			t.Errorf("%s: a new publish of the key did not wait for the older publisher's open transaction", name)
		}
	}
}

// TestRetiringCoarseStripes: `starter db key-stripes --fine-only`
// (RetireCoarseStripes) waits for a transaction holding a coarse row,
// deletes every coarse row and says so in the audit trail. After it a new
// publish locks the fine row alone and an older publisher is refused, never
// let through without a lock; a new declaration gets fine rows only, and a
// second retirement has nothing to do.
func TestRetiringCoarseStripes(t *testing.T) {
	t.Parallel()
	s := openStoreBeforeFineStripes(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	older := olderPublisherHolds(t, s, "person-1")
	var deleted int64
	if !waitsFor(t, func() error {
		var err error
		deleted, err = s.RetireCoarseStripes(ctx, "alice")
		return err
	}, older) {
		t.Error("the retirement did not wait for a transaction holding a coarse row")
	}
	if deleted != store.CoarseStripeCount {
		t.Errorf("retirement deleted %d rows, want %d", deleted, store.CoarseStripeCount)
	}
	if coarse, fine := stripeRows(t, s); coarse != 0 || fine != store.KeyStripeCount {
		t.Errorf("after retirement: %d coarse and %d fine rows, want 0 and %d", coarse, fine, store.KeyStripeCount)
	}
	scheme, err := s.KeyStripeScheme(ctx)
	if err != nil || scheme.Coarse || scheme.CoarseRows != 0 {
		t.Errorf("scheme after retirement: %+v, %v", scheme, err)
	}
	rows, err := s.ListAudit(ctx, store.AuditFilter{Action: store.ActionKeyStripesFineOnly})
	if err != nil || len(rows) != 1 || rows[0].Actor != "alice" || rows[0].TargetType != store.TargetDatabase {
		t.Errorf("audit of the retirement: %+v, %v, want one row by alice", rows, err)
	}

	if ok, err := store.OlderLockAndInsertOne(ctx, s.Pool, newEvent("contacts.person.updated", "person-2", "h")); err != nil || ok {
		t.Errorf("an older publisher after retirement: inserted %v, %v, want nothing inserted", ok, err)
	}
	// A new publish of a key whose fine row another transaction holds waits.
	newer, err := s.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer newer.Rollback(context.Background())
	if _, err := store.InsertEventsTx(ctx, newer, []store.NewEvent{newEvent("contacts.person.updated", "person-3", "h")}); err != nil {
		t.Fatal(err)
	}
	if !waitsFor(t, func() error {
		_, err := s.InsertEvents(ctx, []store.NewEvent{newEvent("contacts.person.updated", "person-3", "h")})
		return err
	}, newer) {
		t.Error("a publish did not wait for another transaction holding its key's fine row")
	}
	mustApply(t, s, contactsManifest(decl("person.updated", 1), decl("person.updated", 2)))
	var v2 int
	if err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM key_stripes WHERE type = 'contacts.person.updated' AND version = 2 AND stripe < $1`,
		store.FineStripeBase).Scan(&v2); err != nil || v2 != 0 {
		t.Errorf("a declaration after retirement has %d coarse rows (%v), want none", v2, err)
	}
	if _, err := s.RetireCoarseStripes(ctx, "alice"); !errors.Is(err, store.ErrFineOnly) {
		t.Errorf("a second retirement: %v, want ErrFineOnly", err)
	}
}

// TestNewDatabaseLocksFineStripesOnly: a database migrated from nothing
// keeps no coarse rows (nothing older can have published into it), and the
// retirement has nothing to do.
func TestNewDatabaseLocksFineStripesOnly(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	ctx := context.Background()
	mustApply(t, s, contactsManifest(decl("person.updated", 1)))
	if coarse, fine := stripeRows(t, s); coarse != 0 || fine != store.KeyStripeCount {
		t.Errorf("%d coarse and %d fine rows, want 0 and %d", coarse, fine, store.KeyStripeCount)
	}
	if _, err := s.RetireCoarseStripes(ctx, "alice"); !errors.Is(err, store.ErrFineOnly) {
		t.Errorf("retirement on a new database: %v, want ErrFineOnly", err)
	}
	if ok, err := store.OlderLockAndInsertOne(ctx, s.Pool, newEvent("contacts.person.updated", "k", "h")); err != nil || ok {
		t.Errorf("an older publisher on a new database: inserted %v, %v, want nothing", ok, err)
	}
}

// TestKeyLocksFindRowsByTheirWholeKey: every statement that locks stripe
// rows finds each row by its whole primary key, also in a plan made before
// the table has statistics (a new database). With "stripe IN (...)" the
// planner scanned every row of the type and filtered on the stripe, at
// about a sixth of the rate with 64 publishers.
func TestKeyLocksFindRowsByTheirWholeKey(t *testing.T) {
	t.Parallel()
	s := openStoreBeforeFineStripes(t) // the coarse rows kept: every branch runs
	ctx := context.Background()
	conn, err := s.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(ctx, `RESET plan_cache_mode`)
	for stmt, args := range store.KeyLockStatements(newEvent("contacts.person.updated", "person-1", "h")) {
		var plan []map[string]any
		if err := conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+stmt, args...).Scan(&plan); err != nil {
			t.Fatalf("explain: %v\n%s", err, stmt)
		}
		var scans int
		var walk func(n map[string]any)
		walk = func(n map[string]any) {
			if n["Relation Name"] == "key_stripes" {
				scans++
				cond, _ := n["Index Cond"].(string)
				filter, _ := n["Filter"].(string)
				if !strings.Contains(cond, "stripe =") || strings.Contains(filter, "stripe") {
					t.Errorf("%s on key_stripes: Index Cond %q, Filter %q; want the stripe in the index condition\n%s",
						n["Node Type"], cond, filter, stmt)
				}
			}
			children, _ := n["Plans"].([]any)
			for _, c := range children {
				walk(c.(map[string]any))
			}
		}
		walk(plan[0]["Plan"].(map[string]any))
		if scans == 0 {
			t.Errorf("no scan of key_stripes in the plan of\n%s", stmt)
		}
	}
}

// declareInOpenTx inserts app contacts (when withApp) and a declaration of
// typ@1 in a transaction it leaves open, as `apps apply` of any release
// does while `starter migrate` runs beside it.
func declareInOpenTx(t *testing.T, s *store.Store, typ string, withApp bool) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := s.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if withApp {
		if _, err := tx.Exec(ctx, `INSERT INTO apps (id, endpoint, delivery_path, manifest, content_hash)
			VALUES ('contacts', 'http://x', '/', '{}', 'h')`); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tx.Exec(ctx, `INSERT INTO declarations (type, version, app, name, subject, data_schema)
		VALUES ($1, 1, 'contacts', $2, 'thing', '{}')`, typ, strings.TrimPrefix(typ, "contacts.")); err != nil {
		t.Fatal(err)
	}
	return tx
}

// TestMigrationBesideADeclaration: migration 0032 keeps declarations and
// stripe rows from changing until it commits (found by a review). An older
// worker's apply open beside it, declaring the database's first type, made
// that type's coarse rows (the older trigger) while the migration decided
// the database kept none: an older publisher then held the key's coarse
// row and a new publish of the key did not wait. Now the migration waits
// for the apply, sees its rows and keeps them.
func TestMigrationBesideADeclaration(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := openStoreAt(t, coarseOnly)
	apply := declareInOpenTx(t, s, "contacts.person.updated", true)
	migrated := make(chan error, 1)
	go func() { _, err := s.Migrate(ctx); migrated <- err }()
	time.Sleep(300 * time.Millisecond)
	if err := apply.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-migrated; err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if coarse, fine := stripeRows(t, s); coarse != store.CoarseStripeCount || fine != store.KeyStripeCount {
		t.Errorf("the type declared beside the migration has %d coarse and %d fine rows, want %d and %d",
			coarse, fine, store.CoarseStripeCount, store.KeyStripeCount)
	}
	older := olderPublisherHolds(t, s, "person-1")
	if !waitsFor(t, func() error {
		_, err := s.InsertEvents(ctx, []store.NewEvent{newEvent("contacts.person.updated", "person-1", "h")})
		return err
	}, older) {
		t.Error("a new publish of person-1 committed while an older publisher's transaction held the key's coarse row")
	}
}

// TestRetirementGivesWayToATransactionPublishingTwice: a transaction that
// publishes one key, then another whose coarse stripe is lower, while the
// retirement waits for the first key's row, deadlocked with it (found by a
// review: PostgreSQL aborted one of the two after a second). The
// retirement's attempts now give up within 100 ms a row and try again, so
// the transaction commits and the retirement succeeds after it.
func TestRetirementGivesWayToATransactionPublishingTwice(t *testing.T) {
	t.Parallel()
	s := openStoreBeforeFineStripes(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	coarse := func(s string) uint64 { h := fnv.New64a(); h.Write([]byte(s)); return h.Sum64() % 256 }
	lo, hi := "person-lo", ""
	for i := 0; hi == ""; i++ {
		if c := fmt.Sprintf("person-hi-%d", i); coarse(c) > coarse(lo)+1 {
			hi = c
		}
	}
	for _, wait := range []time.Duration{200 * time.Millisecond, 1500 * time.Millisecond} {
		app, err := s.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer app.Rollback(context.Background())
		if _, err := store.InsertEventsTx(ctx, app, []store.NewEvent{newEvent("contacts.person.updated", hi, "h")}); err != nil {
			t.Fatal(err)
		}
		retired := make(chan error, 1)
		go func() { _, err := s.RetireCoarseStripes(ctx, "alice"); retired <- err }()
		time.Sleep(wait) // the retirement waits for hi's coarse row meanwhile
		_, err = store.InsertEventsTx(ctx, app, []store.NewEvent{newEvent("contacts.person.updated", lo, "h")})
		if err == nil {
			err = app.Commit(ctx)
		}
		if err != nil {
			t.Errorf("after %s: the transaction publishing twice: %v, want it to commit", wait, err)
		}
		if err := <-retired; err != nil {
			t.Errorf("after %s: the retirement: %v, want it to succeed after the transaction", wait, err)
		}
		// Keep the coarse rows for the next round.
		if _, err := s.Pool.Exec(ctx, `UPDATE key_stripe_scheme SET coarse = true`); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Pool.Exec(ctx, `INSERT INTO key_stripes (type, version, stripe)
			SELECT type, version, s FROM declarations, generate_series(0, 255) AS s ON CONFLICT DO NOTHING`); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSchemeReadInACallersTransactionSaysWhatFailed: on a database without
// migration 0032, a publish in a caller's transaction fails naming the
// scheme it could not read, not only "current transaction is aborted"
// (found by a review).
func TestSchemeReadInACallersTransactionSaysWhatFailed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStoreAt(t, coarseOnly)
	err := s.WithTx(ctx, func(tx pgx.Tx) error {
		_, err := store.InsertEventsTx(ctx, tx, []store.NewEvent{newEvent("contacts.person.updated", "k", "h")})
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "key stripe scheme") || !strings.Contains(err.Error(), "key_stripe_scheme") {
		t.Errorf("publish on a database before 0032: %v, want the scheme's read named", err)
	}
}
