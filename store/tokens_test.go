package store_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"herald/manifest"
	"herald/store"
)

func TestAPITokens(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	ctx := context.Background()
	mustApply(t, s, mkManifest("contacts", []manifest.Event{decl("person.updated", 1)}))
	mustApply(t, s, mkManifest("billing", nil))

	if _, err := s.CreateAPIToken(ctx, "t0", "ghost", "crm", []byte("h0"), "alice"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("token of an unknown app: %v", err)
	}
	tok, err := s.CreateAPIToken(ctx, "t1", "contacts", "crm", []byte("h1"), "alice")
	if err != nil || tok.ID != "t1" || tok.App != "contacts" || tok.Name != "crm" || tok.CreatedBy != "alice" || tok.RevokedAt != nil {
		t.Fatalf("create: %+v %v", tok, err)
	}
	if _, err := s.CreateAPIToken(ctx, "t2", "contacts", "crm", []byte("h2"), "alice"); !errors.Is(err, store.ErrTokenNameTaken) {
		t.Fatalf("same live name: %v", err)
	}
	// Names are per app.
	if _, err := s.CreateAPIToken(ctx, "t3", "billing", "crm", []byte("h3"), "alice"); err != nil {
		t.Fatal(err)
	}
	cred, err := s.LiveAPIToken(ctx, "t1")
	if err != nil || cred.App != "contacts" || cred.Name != "crm" || !bytes.Equal(cred.Hash, []byte("h1")) || cred.AppRemoved {
		t.Fatalf("live: %+v %v", cred, err)
	}
	if _, err := s.LiveAPIToken(ctx, "nope\x00"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unqueryable id: %v", err)
	}

	rev, err := s.RevokeAPIToken(ctx, "contacts", "crm", "bob")
	if err != nil || rev.ID != "t1" || rev.RevokedAt == nil || rev.RevokedBy != "bob" {
		t.Fatalf("revoke: %+v %v", rev, err)
	}
	if _, err := s.LiveAPIToken(ctx, "t1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("revoked token still live: %v", err)
	}
	if _, err := s.RevokeAPIToken(ctx, "contacts", "crm", "bob"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("revoke by the name of a revoked token: %v", err)
	}
	if _, err := s.RevokeAPIToken(ctx, "contacts", "t1", "bob"); !errors.Is(err, store.ErrTokenRevoked) {
		t.Fatalf("revoke a revoked token by id: %v", err)
	}
	if _, err := s.RevokeAPIToken(ctx, "billing", "t1", "bob"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("revoke another app's token: %v", err)
	}
	// The name is free again once revoked.
	if _, err := s.CreateAPIToken(ctx, "t4", "contacts", "crm", []byte("h4"), "alice"); err != nil {
		t.Fatalf("reuse a revoked name: %v", err)
	}
	all, err := s.ListAPITokens(ctx, "")
	if err != nil || len(all) != 3 {
		t.Fatalf("list all: %+v %v", all, err)
	}
	mine, err := s.ListAPITokens(ctx, "contacts")
	if err != nil || len(mine) != 2 || mine[0].ID != "t1" || mine[1].ID != "t4" {
		t.Fatalf("list contacts: %+v %v", mine, err)
	}

	if _, err := s.RemoveApp(ctx, "contacts", "alice"); err != nil {
		t.Fatal(err)
	}
	// Removing the app revokes its live tokens (audited), so applying the
	// app id again does not bring them back.
	if _, err := s.LiveAPIToken(ctx, "t4"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("token of a removed app still live: %v", err)
	}
	if _, err := s.CreateAPIToken(ctx, "t5", "contacts", "other", []byte("h5"), "alice"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("token of a removed app: %v", err)
	}
	mustApply(t, s, mkManifest("contacts", []manifest.Event{decl("person.updated", 1)}))
	if cred, err := s.LiveAPIToken(ctx, "t4"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("token of a removed app came back when the app was applied again: %+v %v", cred, err)
	}
	if cred, err := s.LiveAPIToken(ctx, "t3"); err != nil || cred.App != "billing" {
		t.Fatalf("another app's token: %+v %v", cred, err)
	}

	created := auditRows(t, s, store.ActionAPITokenCreated, "")
	revoked := auditRows(t, s, store.ActionAPITokenRevoked, "")
	if len(created) != 3 || len(revoked) != 2 || revoked[0].Actor != "bob" || revoked[0].TargetID != "contacts" ||
		revoked[1].Actor != "alice" || revoked[1].TargetID != "contacts" {
		t.Fatalf("audit: %d created, revoked %+v", len(created), revoked)
	}
}
