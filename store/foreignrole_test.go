package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"herald/store"
)

// TestForeignRoleCannotTakeHeraldsLocks: a login role with no privilege on
// Herald's tables holds every advisory lock Herald used to take (the relay's
// leader lock, a key's ordering lock, the apply locks) and tries the tables
// that replaced them. Herald's locks are rows of its own tables now, so the
// role is refused there, and the relay still leads, the key is still
// published and apps are still applied while it holds its locks.
func TestForeignRoleCannotTakeHeraldsLocks(t *testing.T) {
	t.Parallel()
	s, _ := openEventsStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, foreignURL := newRuntimeRole(t, s) // no GrantRuntime: no privilege at all
	foreign, err := pgx.Connect(ctx, foreignURL)
	if err != nil {
		t.Fatalf("connect as the foreign role: %v", err)
	}
	defer foreign.Close(context.Background())

	var schema string
	if err := s.Pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		`SELECT pg_advisory_lock(hashtext('herald.relay:' || $1::text)::bigint)`,
		`SELECT pg_advisory_lock(hashtextextended('contacts.person.updated@1:person-9', 0)) WHERE $1::text IS NOT NULL`,
		`SELECT pg_advisory_lock(hashtext('herald.app:contacts')) WHERE $1::text IS NOT NULL`,
		`SELECT pg_advisory_lock(hashtext('herald.subscriptions:' || $1::text))`,
	} {
		if _, err := foreign.Exec(ctx, sql, schema); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// The tables that hold Herald's locks refuse the role.
	for _, sql := range []string{
		`SELECT * FROM ` + pgx.Identifier{schema, "relay_lease"}.Sanitize() + ` FOR UPDATE`,
		`UPDATE ` + pgx.Identifier{schema, "relay_lease"}.Sanitize() + ` SET expires_at = 'infinity'`,
		`SELECT * FROM ` + pgx.Identifier{schema, "relay_partitions"}.Sanitize() + ` FOR UPDATE`,
		`UPDATE ` + pgx.Identifier{schema, "relay_partitions"}.Sanitize() + ` SET expires_at = 'infinity'`,
		`INSERT INTO ` + pgx.Identifier{schema, "relay_workers"}.Sanitize() + ` VALUES ('x', 1, NULL, 'infinity')`,
		`SELECT * FROM ` + pgx.Identifier{schema, "key_stripes"}.Sanitize() + ` FOR UPDATE`,
		`INSERT INTO ` + pgx.Identifier{schema, "key_stripes"}.Sanitize() + ` VALUES ('contacts.person.updated', 1, 0)`,
		`SELECT * FROM ` + pgx.Identifier{schema, "apps"}.Sanitize() + ` FOR UPDATE`,
		`LOCK TABLE ` + pgx.Identifier{schema, "apps"}.Sanitize() + ` IN ACCESS EXCLUSIVE MODE`,
	} {
		tx, err := foreign.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = tx.Exec(ctx, sql)
		wantRefused(t, sql, err)
		_ = tx.Rollback(ctx)
	}

	within := func(what string, d time.Duration, fn func(context.Context) error) {
		t.Helper()
		fctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		if err := fn(fctx); err != nil {
			t.Errorf("%s while the foreign role holds its locks: %v", what, err)
		}
	}
	within("take the relay's leadership", 10*time.Second, func(ctx context.Context) error {
		l, err := s.TryLead(ctx)
		if err != nil {
			return err
		}
		if l == nil {
			return errLockHeld
		}
		defer l.Release()
		return l.Check(ctx)
	})
	within("lead every relay partition", 10*time.Second, func(ctx context.Context) error {
		return leadAll(ctx, s)
	})
	within("publish the key", 10*time.Second, func(ctx context.Context) error {
		_, err := s.InsertEvents(ctx, []store.NewEvent{newEvent("contacts.person.updated", "person-9", "h1")})
		return err
	})
	within("apply an app", 10*time.Second, func(ctx context.Context) error {
		_, err := s.ApplyManifest(ctx, contactsManifest(decl("person.updated", 1)), "alice")
		return err
	})
}

// errLockHeld says another holder has a lock the test expected to get.
var errLockHeld = errorString("someone else holds it")

type errorString string

func (e errorString) Error() string { return string(e) }

// TestRuntimeRoleTakesHeraldsLocks: the runtime role, granted as `starter
// migrate --runtime-role` does, takes every lock the foreign role cannot:
// it applies (apply locks, and a new declaration's stripes through the
// trigger), publishes (key stripes, also of an undeclared type) and leads
// the relay.
func TestRuntimeRoleTakesHeraldsLocks(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	owner := openSyncStore(t)
	role, runtimeURL := newRuntimeRole(t, owner)
	if err := owner.GrantRuntime(ctx, role); err != nil {
		t.Fatal(err)
	}
	rt, err := store.Open(ctx, runtimeURL, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	if _, err := rt.ApplyManifest(ctx, contactsManifest(decl("person.updated", 1)), "alice"); err != nil {
		t.Fatalf("apply as the runtime role: %v", err)
	}
	if _, err := rt.InsertEvents(ctx, []store.NewEvent{
		newEvent("contacts.person.updated", "person-1", "h"),
		newEvent("contacts.undeclared.happened", "x", "h"),
	}); err != nil {
		t.Fatalf("publish as the runtime role: %v", err)
	}
	l, err := rt.TryLead(ctx)
	if err != nil || l == nil {
		t.Fatalf("lead as the runtime role: %v, %v", l, err)
	}
	err = l.Check(ctx)
	l.Release() // the members stand by while it leads
	if err != nil {
		t.Fatal(err)
	}
	if err := leadAll(ctx, rt); err != nil {
		t.Fatalf("lead the relay partitions as the runtime role: %v", err)
	}
}

// leadAll joins s's relays and returns once the member leads every
// partition, or with why not when ctx ends.
func leadAll(ctx context.Context, s *store.Store) error {
	m, err := s.JoinRelay(ctx)
	if err != nil {
		return err
	}
	defer m.Leave()
	for len(m.Partitions()) != store.RelayPartitions {
		select {
		case <-ctx.Done():
			return fmt.Errorf("leads %v: %w", m.Partitions(), ctx.Err())
		case <-m.Lost():
			return m.Err()
		case <-m.Changed():
		}
	}
	return nil
}
