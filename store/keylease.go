package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// TakeKeyLease takes, or renews, the lease of a subscription's subject key
// for holder (a workflow run) until ttl from now. It reports whether holder
// has it and until when the lease runs, the other holder's when it does not.
func (s *Store) TakeKeyLease(ctx context.Context, subscriptionID, subject, holder string, ttl time.Duration) (bool, time.Time, error) {
	var until time.Time
	err := s.Pool.QueryRow(ctx, `
		INSERT INTO key_leases AS l (subscription_id, subject, holder, expires_at)
		VALUES ($1, $2, $3, now() + make_interval(secs => $4))
		ON CONFLICT (subscription_id, subject) DO UPDATE
		   SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
		 WHERE l.holder = EXCLUDED.holder OR l.expires_at < now()
		RETURNING expires_at`, subscriptionID, subject, holder, ttl.Seconds()).Scan(&until)
	switch {
	case err == nil:
		return true, until, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return false, time.Time{}, fmt.Errorf("take the lease of %s %s: %w", subscriptionID, subject, err)
	}
	err = s.Pool.QueryRow(ctx, `SELECT expires_at FROM key_leases WHERE subscription_id = $1 AND subject = $2`,
		subscriptionID, subject).Scan(&until)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, time.Now(), nil // given back meanwhile: try again at once
	}
	if err != nil {
		return false, time.Time{}, fmt.Errorf("read the lease of %s %s: %w", subscriptionID, subject, err)
	}
	return false, until, nil
}

// ReleaseKeyLease gives holder's lease of a key back (nothing when another
// holds it).
func (s *Store) ReleaseKeyLease(ctx context.Context, subscriptionID, subject, holder string) error {
	if _, err := s.Pool.Exec(ctx, `DELETE FROM key_leases WHERE subscription_id = $1 AND subject = $2 AND holder = $3`,
		subscriptionID, subject, holder); err != nil {
		return fmt.Errorf("release the lease of %s %s: %w", subscriptionID, subject, err)
	}
	return nil
}
