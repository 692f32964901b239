package relay

import (
	"context"

	"herald/store"
)

// skipHeld drops from this round's signals the keys whose head is failed
// or has failed twice (store.HeldKeys), and returns the rest with the
// number of events it did not signal. Their outcome rows are written, so
// the events are dispatched all the same: PostgreSQL is the state of record
// of a key, and its workflow reads the rows after its cursor whenever a
// head it held on resolves (workflows.HeldKeysChange) — delivered,
// cancelled, skipped, redelivered, expired or re-armed. A signal would only
// wake the workflow, to take a claim it cannot act on, for Temporal work
// (a workflow task per signal) that a failing neighbour would otherwise
// make every healthy key wait behind.
//
// The race with a head that resolves meanwhile is safe: the rows of this
// round are committed before the heads are read, so a head that still
// looks held resolves after that, and the read that follows its
// resolution sees this round's rows.
func (r *Relay) skipHeld(ctx context.Context, order []*group) ([]*group, int, error) {
	if len(order) == 0 {
		return order, 0, nil
	}
	refs := make([]store.KeyRef, len(order))
	for i, g := range order {
		refs[i] = store.KeyRef{SubscriptionID: g.key.sub.ID, Subject: g.key.subject}
	}
	held, err := r.Store.HeldKeys(ctx, refs)
	if err != nil || len(held) == 0 {
		return order, 0, err
	}
	kept := order[:0]
	skipped := 0
	for i, g := range order {
		if held[refs[i]] {
			skipped += len(g.events)
			continue
		}
		kept = append(kept, g)
	}
	return kept, skipped, nil
}
