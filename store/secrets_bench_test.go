package store_test

import (
	"context"
	"testing"

	"herald/signing"
	"herald/store"
)

// BenchmarkEnsureAppSecrets is what each delivery attempt pays to read and
// decrypt its app's secrets (one short transaction).
func BenchmarkEnsureAppSecrets(b *testing.B) {
	s, box := contactsWithSecretBox(b)
	ctx := context.Background()
	req := store.SecretRequest{App: "contacts", Box: box, New: signing.NewSecret, AllowRemoved: true}
	for b.Loop() {
		if _, err := s.EnsureAppSecrets(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}
