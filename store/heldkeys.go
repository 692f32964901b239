package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// KeyRef names one delivery key: a subscription and a subject key.
type KeyRef struct {
	SubscriptionID string
	Subject        string
}

// HeldKeys returns those of keys whose head (the held outcome row with the
// lowest sequence number) is failed, or queued with at least two attempts
// spent, and was queued HeldAfter ago or more: a key that holds on a
// failing head. The relay does not signal such
// a key's new events; its workflow reads them from the rows once the head
// resolves (workflows.HeldKeysChange). One probe of the held-rows index per
// key, in one statement.
func (s *Store) HeldKeys(ctx context.Context, keys []KeyRef) (map[KeyRef]bool, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	subs := make([]string, len(keys))
	subjects := make([]string, len(keys))
	for i, k := range keys {
		subs[i], subjects[i] = k.SubscriptionID, k.Subject
	}
	rows, err := s.Pool.Query(ctx, `
		SELECT k.subscription_id, k.subject
		  FROM unnest($1::text[], $2::text[]) AS k(subscription_id, subject)
		 CROSS JOIN LATERAL (
		       SELECT o.status, o.attempts, o.queued_at FROM outcomes o
		        WHERE o.subscription_id = k.subscription_id AND o.subject = k.subject
		          AND o.status IN ('queued', 'failed')
		        ORDER BY o.event_seq LIMIT 1) h
		 WHERE (h.status = 'failed' OR h.attempts >= $3)
		   AND h.queued_at < now() - make_interval(secs => $4)`, subs, subjects, HeldAttempts, HeldAfter.Seconds())
	if err != nil {
		return nil, fmt.Errorf("read the heads of %d keys: %w", len(keys), err)
	}
	held := map[KeyRef]bool{}
	var k KeyRef
	if _, err := pgx.ForEachRow(rows, []any{&k.SubscriptionID, &k.Subject}, func() error {
		held[k] = true
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read the heads of %d keys: %w", len(keys), err)
	}
	return held, nil
}

// HeldAfter is how long a failing head must have been queued before its key
// counts as held. A head that fails at once (a subscriber that refuses it)
// would otherwise leave the events published right behind it unsignalled,
// out of the run's queue and so out of its state query (`starter inspect`)
// and out of reach of an operator's cancel of one event, until the head
// resolves; a key that keeps failing, the neighbour whose signals cost the
// others Temporal work, is held all the same once this long has passed.
const HeldAfter = 10 * time.Second

// HeldAttempts is the attempts spent on a queued head from which its key
// counts as held (HeldKeys). Two, not one: a second attempt is always made
// by an execution whose result tells the workflow that the head failed
// before, whereas a first attempt's failure can be lost with its worker.
const HeldAttempts = 2
