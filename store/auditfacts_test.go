package store_test

import (
	"slices"
	"testing"

	"herald/store"
	"herald/workflows/payload"
)

// TestKeyEventFactsAreReadByStore: store reads every audit metadata key the
// Delivery workflow writes for a key event (payload.KeyEventFacts), under
// that very name, and reads no key the workflow does not write for one.
// workflows' TestAuditFactsAreWhatStoreReads holds the workflow side.
func TestKeyEventFactsAreReadByStore(t *testing.T) {
	t.Parallel()
	var written []string
	for _, keys := range payload.KeyEventFacts {
		for _, k := range keys {
			if !slices.Contains(written, k) {
				written = append(written, k)
			}
		}
	}
	read := store.FactReaderKeys()
	slices.Sort(written)
	slices.Sort(read)
	if !slices.Equal(written, read) {
		t.Fatalf("store reads the metadata keys %v; the workflow writes %v for key events", read, written)
	}
	// Each key alone gives a fact: the reader named k reads k. Values as
	// they arrive after a trip through Temporal (JSON).
	samples := []any{"x", 3.0, []any{"x"}}
	for _, k := range written {
		if !slices.ContainsFunc(samples, func(v any) bool { return store.ReadsDeliveryFact(map[string]any{k: v}) }) {
			t.Errorf("metadata key %q alone gives no fact to a key event", k)
		}
	}
	if store.ReadsDeliveryFact(map[string]any{payload.MetaReason: "x", payload.MetaSubject: "x", "eventID": "x"}) {
		t.Error("keys no key event is built from gave a fact")
	}
}
