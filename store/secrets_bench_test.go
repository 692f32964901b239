package store_test

import (
	"context"
	"testing"

	"herald/internal/testenv"
	"herald/signing"
	"herald/store"
)

// BenchmarkEnsureAppSecrets is what each delivery attempt pays to read and
// decrypt its app's secrets (one short transaction).
func BenchmarkEnsureAppSecrets(b *testing.B) {
	s := openSyncStore(b)
	ctx := context.Background()
	if _, err := s.ApplyManifest(ctx, contactsManifest(decl("person.updated", 1)), "bench"); err != nil {
		b.Fatal(err)
	}
	box, err := signing.LoadSecretBox(testenv.SecretKey)
	if err != nil {
		b.Fatal(err)
	}
	req := store.SecretRequest{App: "contacts", Box: box, New: signing.NewSecret, AllowRemoved: true}
	for b.Loop() {
		if _, err := s.EnsureAppSecrets(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}
