package store_test

import (
	"context"
	"testing"

	"herald/internal/testenv"
	"herald/store"
)

// BenchmarkRecordOutcomesDelivered is the Deliver activity's write of one
// delivered event: the outcome upsert, with the failed_keys probe riding
// along.
func BenchmarkRecordOutcomesDelivered(b *testing.B) {
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
	if _, err := s.ApplyManifest(ctx, billingManifest(subTo("contacts.person.updated", 1)), "bench"); err != nil {
		b.Fatal(err)
	}
	evs := make([]store.NewEvent, 256)
	for i := range evs {
		evs[i] = newEvent("contacts.person.updated", "p1", "h")
	}
	if _, err := s.InsertEvents(ctx, evs); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ev := evs[i%len(evs)]
		if err := s.RecordOutcomes(ctx, billingPersonSub, "p1", []store.OutcomeUpdate{
			{EventID: ev.ID, Status: store.EventDelivered, Attempts: 1}}); err != nil {
			b.Fatal(err)
		}
	}
}
