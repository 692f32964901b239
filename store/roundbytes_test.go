package store_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"testing"

	"herald/store"
)

// TestUndispatchedBoundsEnvelopeBytes: a read of undispatched events takes
// them in sequence order while the envelopes before them sum to less than
// its byte bound (the relay's memory), always at least one, and never more
// than its limit; the partition's read alike. A read whose envelopes reach
// the bound says so (EnvelopeBytes), one that fits does not.
func TestUndispatchedBoundsEnvelopeBytes(t *testing.T) {
	t.Parallel()
	s, _ := openEventsStore(t)
	ctx := context.Background()
	const size = 100_000
	var evs []store.NewEvent
	for range 10 {
		ev := newEvent("contacts.person.updated", "big-key", "h")
		// Random, so PostgreSQL cannot compress it: the bound is on the
		// envelope's length, whatever its stored size.
		b := make([]byte, size/2)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		ev.Envelope = []byte(fmt.Sprintf(`{"id":%q,"data":%q}`, ev.ID, hex.EncodeToString(b)))
		ev.Envelope = ev.Envelope[:size-1]
		ev.Envelope = append(ev.Envelope, '}')
		evs = append(evs, ev)
	}
	if _, err := s.InsertEvents(ctx, evs); err != nil {
		t.Fatal(err)
	}
	partition := -1
	for p := range store.RelayPartitions {
		got, err := s.UndispatchedIn(ctx, p, 1000, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) > 0 {
			partition = p
		}
	}
	read := map[string]func(limit int, maxBytes int64) ([]store.PendingEvent, error){
		"the log": func(limit int, maxBytes int64) ([]store.PendingEvent, error) {
			return s.Undispatched(ctx, limit, maxBytes)
		},
		"its partition": func(limit int, maxBytes int64) ([]store.PendingEvent, error) {
			return s.UndispatchedIn(ctx, partition, limit, maxBytes)
		},
	}
	for name, undispatched := range read {
		for _, c := range []struct {
			limit    int
			maxBytes int64
			want     int
			reached  bool
		}{
			{1000, 250_000, 3, true}, // 0, 100,000 and 200,000 bytes before them
			{1000, 300_000, 3, true}, // the fourth has 300,000 before it
			{1000, 300_001, 4, true},
			{1000, 1, 1, true}, // the first always
			{2, 250_000, 2, false},
			{1000, 0, 10, false}, // no bound
			{1000, 1_000_001, 10, false},
		} {
			got, err := undispatched(c.limit, c.maxBytes)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != c.want {
				t.Fatalf("%s, limit %d, %d bytes: %d events, want %d", name, c.limit, c.maxBytes, len(got), c.want)
			}
			for i, ev := range got {
				if ev.Seq != got[0].Seq+int64(i) || len(ev.Envelope) != size {
					t.Fatalf("%s: event %d is seq %d with %d bytes, want seq %d with %d", name, i, ev.Seq, len(ev.Envelope),
						got[0].Seq+int64(i), size)
				}
			}
			if reached := c.maxBytes > 0 && store.EnvelopeBytes(got) >= c.maxBytes; reached != c.reached {
				t.Fatalf("%s, limit %d, %d bytes: bound reached %v, want %v", name, c.limit, c.maxBytes, reached, c.reached)
			}
		}
	}
}
