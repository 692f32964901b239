package store_test

import (
	"context"
	"testing"

	"herald/store"
)

// TestKeyHeadsCountHeldUpToTheCap: a key's held rows are counted up to
// KeyHeldCap, so a page of keys never reads a key's whole backlog (a key
// of a subscriber that fails holds every event published to it since);
// beyond the cap the count says "at least". A key holding fewer is
// counted exactly, failed and queued rows alike, settled ones not.
func TestKeyHeadsCountHeldUpToTheCap(t *testing.T) {
	t.Parallel()
	s, _ := openEventsStore(t)
	ctx := context.Background()
	// big holds KeyHeldCap+500 queued rows behind a failed head; small
	// holds two queued and one failed behind none, beside a delivered one.
	if _, err := s.Pool.Exec(ctx, `
		INSERT INTO outcomes (subscription_id, event_id, event_seq, subject, status)
		SELECT 'billing:contacts.person.updated@1', gen_random_uuid(), g, 'big',
		       CASE WHEN g = 1 THEN 'failed' ELSE 'queued' END
		  FROM generate_series(1, $1::int) g`, store.KeyHeldCap+500); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool.Exec(ctx, `
		INSERT INTO outcomes (subscription_id, event_id, event_seq, subject, status)
		VALUES ('billing:contacts.person.updated@1', gen_random_uuid(), 1, 'small', 'delivered'),
		       ('billing:contacts.person.updated@1', gen_random_uuid(), 2, 'small', 'queued'),
		       ('billing:contacts.person.updated@1', gen_random_uuid(), 3, 'small', 'failed'),
		       ('billing:contacts.person.updated@1', gen_random_uuid(), 4, 'small', 'queued')`); err != nil {
		t.Fatal(err)
	}
	// At the cap and one over it.
	for subject, n := range map[string]int{"at-cap": store.KeyHeldCap, "over-cap": store.KeyHeldCap + 1} {
		if _, err := s.Pool.Exec(ctx, `
			INSERT INTO outcomes (subscription_id, event_id, event_seq, subject, status)
			SELECT 'billing:contacts.person.updated@1', gen_random_uuid(), g, $1, 'queued'
			  FROM generate_series(1, $2::int) g`, subject, n); err != nil {
			t.Fatal(err)
		}
	}
	sub := "billing:contacts.person.updated@1"
	heads, err := s.KeyHeads(ctx, []string{sub, sub, sub, sub, sub}, []string{"big", "small", "none", "at-cap", "over-cap"})
	if err != nil {
		t.Fatal(err)
	}
	if h := heads[[2]string{sub, "big"}]; h.Held != store.KeyHeldCap || h.HeldExact || h.Seq != 1 || h.Status != "failed" {
		t.Errorf("the big key's head: %+v, want held %d (at least), the failed head at 1", h, store.KeyHeldCap)
	}
	if h := heads[[2]string{sub, "small"}]; h.Held != 3 || !h.HeldExact || h.Seq != 2 || h.Status != "queued" {
		t.Errorf("the small key's head: %+v, want held 3 exactly, the queued head at 2", h)
	}
	if h := heads[[2]string{sub, "at-cap"}]; h.Held != store.KeyHeldCap || !h.HeldExact {
		t.Errorf("a key holding exactly %d: held %d, exact %v; want %d exactly", store.KeyHeldCap, h.Held, h.HeldExact, store.KeyHeldCap)
	}
	if h := heads[[2]string{sub, "over-cap"}]; h.Held != store.KeyHeldCap || h.HeldExact {
		t.Errorf("a key holding %d: held %d, exact %v; want %d, not exact", store.KeyHeldCap+1, h.Held, h.HeldExact, store.KeyHeldCap)
	}
	if h, ok := heads[[2]string{sub, "none"}]; ok {
		t.Errorf("a key holding nothing has a head: %+v", h)
	}
}
