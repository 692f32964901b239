package store_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"herald/internal/testenv"
	"herald/signing"
	"herald/store"
)

// Concurrent first uses of an app's secret (replicas delivering at once)
// agree on one secret, created and audited once, and stored sealed.
func TestEnsureAppSecretsConcurrent(t *testing.T) {
	t.Parallel()
	s, box := contactsWithSecretBox(t)
	ctx := context.Background()
	req := store.SecretRequest{App: "contacts", Box: box, New: signing.NewSecret, Actor: store.ActorSystem}
	const n = 8
	got := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			set, err := s.EnsureAppSecrets(ctx, req)
			if err != nil {
				t.Error(err)
				return
			}
			got[i] = set.Current.Secret
		}()
	}
	wg.Wait()
	for _, g := range got[1:] {
		if g != got[0] {
			t.Fatalf("concurrent callers got different secrets: %q", got)
		}
	}
	rows, err := s.ListAudit(ctx, store.AuditFilter{Action: store.ActionSecretCreated, TargetID: "contacts"})
	if err != nil || len(rows) != 1 {
		t.Fatalf("secret_created rows %d, %v: want 1", len(rows), err)
	}
	var sealed []byte
	if err := s.Pool.QueryRow(ctx, `SELECT sealed FROM app_secrets WHERE app = 'contacts'`).Scan(&sealed); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, []byte(got[0])) || bytes.Contains(sealed, []byte(got[0][6:])) {
		t.Fatal("the secret is stored in the clear")
	}
	if _, err := s.EnsureAppSecrets(ctx, store.SecretRequest{App: "nope", Box: box, New: signing.NewSecret}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown app: %v, want ErrNotFound", err)
	}
}

// The worker's read (one statement since it also checks the app) returns
// the current secret first and the valid previous ones newest first, as a
// rotation left them; an expired one is gone, and an app with no valid
// secret gets a new current one.
func TestEnsureAppSecretsAfterRotations(t *testing.T) {
	t.Parallel()
	s, box := contactsWithSecretBox(t)
	ctx := context.Background()
	req := store.SecretRequest{App: "contacts", Box: box, New: signing.NewSecret, Actor: "alice", AllowRemoved: true}
	first, err := s.EnsureAppSecrets(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	second, err := s.RotateAppSecret(ctx, store.RotateRequest{SecretRequest: req, Overlap: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	third, err := s.RotateAppSecret(ctx, store.RotateRequest{SecretRequest: req, Overlap: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.EnsureAppSecrets(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	all := got.All()
	want := []string{third.Current.Secret, second.Current.Secret, first.Current.Secret}
	if len(all) != 3 || all[0] != want[0] || all[1] != want[1] || all[2] != want[2] {
		t.Fatalf("secrets %q, want current then newest previous first %q", all, want)
	}
	if got.Current.ValidUntil != nil || got.Previous[0].ValidUntil == nil || got.Previous[1].ValidUntil == nil ||
		!got.Previous[0].ValidUntil.After(*got.Previous[1].ValidUntil) {
		t.Fatalf("valid until: current %v, previous %v and %v", got.Current.ValidUntil, got.Previous[0].ValidUntil, got.Previous[1].ValidUntil)
	}
	if _, err := s.Pool.Exec(ctx, `UPDATE app_secrets SET valid_until = now() - interval '1 second'
		WHERE app = 'contacts' AND valid_until IS NOT NULL AND valid_until < now() + interval '90 minutes'`); err != nil {
		t.Fatal(err)
	}
	if got, err = s.EnsureAppSecrets(ctx, req); err != nil || len(got.All()) != 2 || got.Previous[0].Secret != second.Current.Secret {
		t.Fatalf("after the oldest expired: %d secrets, %v", len(got.All()), err)
	}
	if _, err := s.Pool.Exec(ctx, `UPDATE app_secrets SET valid_until = now() - interval '1 second' WHERE app = 'contacts'`); err != nil {
		t.Fatal(err)
	}
	got, err = s.EnsureAppSecrets(ctx, req)
	if err != nil || len(got.All()) != 1 || got.Current.ValidUntil != nil || got.Current.Secret == third.Current.Secret {
		t.Fatalf("with no valid secret: %d secrets, current valid until %v, %v; want a new current one", len(got.All()), got.Current.ValidUntil, err)
	}
}

// A removed app's secret is refused to operators but still served to the
// worker, which signs the attempts in flight.
func TestEnsureAppSecretsRemovedApp(t *testing.T) {
	t.Parallel()
	s, box := contactsWithSecretBox(t)
	ctx := context.Background()
	req := store.SecretRequest{App: "contacts", Box: box, New: signing.NewSecret, Actor: "alice"}
	before, err := s.EnsureAppSecrets(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RemoveApp(ctx, "contacts", "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnsureAppSecrets(ctx, req); !errors.Is(err, store.ErrAppRemoved) {
		t.Fatalf("removed app: %v, want ErrAppRemoved", err)
	}
	if _, err := s.RotateAppSecret(ctx, store.RotateRequest{SecretRequest: req}); !errors.Is(err, store.ErrAppRemoved) {
		t.Fatalf("rotate removed app: %v, want ErrAppRemoved", err)
	}
	req.AllowRemoved = true
	after, err := s.EnsureAppSecrets(ctx, req)
	if err != nil || after.Current.Secret != before.Current.Secret {
		t.Fatalf("worker's read of a removed app: %v, same secret %v", err, after.Current.Secret == before.Current.Secret)
	}
}

// An app removed and applied again keeps neither its publisher roles nor
// its secrets: whoever held them in its earlier life cannot publish as it
// or verify and forge its deliveries (issue 27).
func TestReappliedAppForgetsRolesAndSecrets(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	ctx := context.Background()
	m := contactsManifest(decl("person.updated", 1))
	if _, err := s.ApplyManifest(ctx, m, "alice"); err != nil {
		t.Fatal(err)
	}
	box, err := signing.LoadSecretBox(testenv.SecretKey)
	if err != nil {
		t.Fatal(err)
	}
	req := store.SecretRequest{App: "contacts", Box: box, New: signing.NewSecret, Actor: store.ActorSystem}
	old, err := s.EnsureAppSecrets(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool.Exec(ctx, `INSERT INTO publisher_roles (role, app) VALUES ('contacts_db', 'contacts')`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RemoveApp(ctx, "contacts", "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ApplyManifest(ctx, m, "bob"); err != nil {
		t.Fatal(err)
	}
	var roles int
	if err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM publisher_roles WHERE app = 'contacts'`).Scan(&roles); err != nil {
		t.Fatal(err)
	}
	if roles != 0 {
		t.Errorf("%d publisher roles of the removed app survived its new apply", roles)
	}
	now, err := s.EnsureAppSecrets(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if now.Current.Secret == old.Current.Secret {
		t.Error("the re-applied app signs with its earlier life's secret")
	}
	for _, p := range now.Previous {
		if p.Secret == old.Current.Secret {
			t.Error("the earlier life's secret is still valid as a previous one")
		}
	}
	for _, action := range []string{store.ActionPublisherRevoked, store.ActionSecretRotated} {
		rows, err := s.ListAudit(ctx, store.AuditFilter{Action: action, TargetID: "contacts"})
		if err != nil || len(rows) != 1 || rows[0].Actor != "bob" {
			t.Errorf("%s rows %+v, %v: want one by bob", action, rows, err)
		}
	}
}

// contactsWithSecretBox is a store where app contacts is applied, and the
// box its secrets are sealed with.
func contactsWithSecretBox(t testing.TB) (*store.Store, *signing.SecretBox) {
	t.Helper()
	s := openSyncStore(t)
	if _, err := s.ApplyManifest(context.Background(), contactsManifest(decl("person.updated", 1)), "alice"); err != nil {
		t.Fatal(err)
	}
	box, err := signing.LoadSecretBox(testenv.SecretKey)
	if err != nil {
		t.Fatal(err)
	}
	return s, box
}

// TestDeliveryBatchNamesTheCurrentSecret: a delivery batch carries the id
// of the subscriber app's current secret, the one the worker's read makes
// current; a rotation, and the end of the secrets of an app removed and
// applied again, change it (0 while the app has none), so a worker never
// keeps signing with secrets it read before them.
func TestDeliveryBatchNamesTheCurrentSecret(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	ctx := context.Background()
	c := mkManifest("contacts", nil)
	c.Events = append(c.Events, decl("person.updated", 1))
	mustApply(t, s, c)
	billing := mkManifest("billing", nil, subTo("contacts.person.updated", 1))
	mustApply(t, s, billing)
	box, err := signing.LoadSecretBox(testenv.SecretKey)
	if err != nil {
		t.Fatal(err)
	}
	ev := newEvent("contacts.person.updated", "p1", "a")
	if _, err := s.InsertEvents(ctx, []store.NewEvent{ev}); err != nil {
		t.Fatal(err)
	}
	batchSecret := func(what string) int64 {
		t.Helper()
		var got []int64
		for _, ids := range [][]string{{ev.ID}, {ev.ID, ev.ID}} { // both statements
			b, err := s.DeliveryBatch(ctx, billingPersonSub, "", ids)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			got = append(got, b.SecretID)
		}
		if got[0] != got[1] {
			t.Fatalf("%s: the one-event batch names secret %d, the other %d", what, got[0], got[1])
		}
		return got[0]
	}
	if got := batchSecret("before any secret"); got != 0 {
		t.Fatalf("before any secret: batch names secret %d, want 0", got)
	}
	req := store.SecretRequest{App: "billing", Box: box, New: signing.NewSecret, Actor: store.ActorSystem, AllowRemoved: true}
	first, err := s.EnsureAppSecrets(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got := batchSecret("first secret"); got == 0 || got != first.Current.ID {
		t.Fatalf("batch names secret %d, want the current one %d", got, first.Current.ID)
	}
	rotated, err := s.RotateAppSecret(ctx, store.RotateRequest{SecretRequest: req, Overlap: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	read, err := s.EnsureAppSecrets(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got := batchSecret("rotated"); got == first.Current.ID || got != rotated.Current.ID || read.Current.ID != got ||
		len(read.Previous) != 1 || read.Previous[0].ID != first.Current.ID {
		t.Fatalf("after a rotation: batch names %d, the read %d (previous %+v); want %d, first %d", got,
			read.Current.ID, read.Previous, rotated.Current.ID, first.Current.ID)
	}
	if _, err := s.RemoveApp(ctx, "billing", "alice"); err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, billing)
	if got := batchSecret("applied again"); got != 0 {
		t.Fatalf("an app applied again names secret %d, want 0 until its new one", got)
	}
}
