package store_test

import (
	"context"
	"fmt"
	"testing"

	"herald/internal/testenv"
	"herald/store"
)

// BenchmarkInsertEvents is a publish's write: one transaction of 1 event,
// and of 100 events with distinct subject keys, each event an op. The
// ordering-key locks are part of it.
func BenchmarkInsertEvents(b *testing.B) {
	for _, n := range []int{1, 100} {
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			ctx := context.Background()
			s, err := store.Open(ctx, testenv.NewSchema(b), store.Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(s.Close)
			if _, err := s.Migrate(ctx); err != nil {
				b.Fatal(err)
			}
			if _, err := s.ApplyManifest(ctx, contactsManifest(decl("person.updated", 1)), "bench"); err != nil {
				b.Fatal(err)
			}
			evs := make([]store.NewEvent, n)
			b.ResetTimer()
			for i := 0; i < b.N; i += n {
				for j := range evs {
					evs[j] = newEvent("contacts.person.updated", fmt.Sprintf("p%d", i+j), "h")
				}
				if _, err := s.InsertEvents(ctx, evs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
