package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Limits are a subscriber app's delivery limits (manifest "limits"); zero
// fields set no limit.
type Limits struct {
	MaxPerSecond float64 `json:"maxPerSecond,omitempty"`
	MaxInFlight  int     `json:"maxInFlight,omitempty"`
}

// IsZero reports whether l sets no limit.
func (l Limits) IsZero() bool { return l.MaxPerSecond == 0 && l.MaxInFlight == 0 }

// String describes the limits for people: "5/s, 3 in flight", or "none".
func (l Limits) String() string {
	var parts []string
	if l.MaxPerSecond > 0 {
		parts = append(parts, strconv.FormatFloat(l.MaxPerSecond, 'g', -1, 64)+"/s")
	}
	if l.MaxInFlight > 0 {
		parts = append(parts, strconv.Itoa(l.MaxInFlight)+" in flight")
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// Grant is the answer to one AcquireDelivery.
type Grant struct {
	// Granted: a token and, with a maxInFlight limit, a lease (Lease) were
	// taken; the caller must wait Wait before it POSTs, then release Lease.
	Granted bool
	// Wait is how long until the token is available: when granted, how long
	// to sleep; when not, how long a caller would have had to wait.
	Wait time.Duration
	// AtCapacity: refused because maxInFlight POSTs are under way.
	AtCapacity bool
	// InFlight is the app's POSTs under way, this one included when granted.
	InFlight int
	// Lease names the in-flight lease (empty when none was taken).
	Lease string
}

// AcquireDelivery asks for one delivery to app under its limits, across
// every worker process: one token of the app's bucket, reserved at most
// maxWait ahead, and, when the app caps deliveries in flight, one lease that
// expires ttl after the token's time unless released first (ReleaseDelivery),
// so that a worker that dies does not hold it. Nothing is taken unless
// everything is granted. One statement, one round trip.
func (s *Store) AcquireDelivery(ctx context.Context, app string, ttl, maxWait time.Duration) (Grant, error) {
	lease := uuid.NewString()
	var g Grant
	var wait float64
	err := s.Pool.QueryRow(ctx, `SELECT granted, wait, in_flight, at_capacity FROM herald_limit_acquire($1, $2, $3, $4)`,
		app, lease, ttl.Seconds(), maxWait.Seconds()).Scan(&g.Granted, &wait, &g.InFlight, &g.AtCapacity)
	if err != nil {
		return Grant{}, fmt.Errorf("acquire a delivery to %s: %w", app, err)
	}
	g.Wait = time.Duration(wait * float64(time.Second))
	if g.Granted && g.InFlight > 0 {
		g.Lease = lease
	}
	return g, nil
}

// ReleaseDelivery ends an in-flight lease AcquireDelivery granted; releasing
// one that expired or was released already changes nothing.
func (s *Store) ReleaseDelivery(ctx context.Context, app, lease string) error {
	if lease == "" {
		return nil
	}
	if _, err := s.Pool.Exec(ctx, `UPDATE app_limit_state SET leases = leases - $2::text
		WHERE app = $1 AND leases ? $2::text`, app, lease); err != nil {
		return fmt.Errorf("release a delivery to %s: %w", app, err)
	}
	return nil
}

// ReturnDelivery gives back a turn AcquireDelivery granted and that was not
// used: the token (reserved ahead, or taken now) goes back to the app's
// bucket, which never holds more than its burst, and the in-flight lease, if
// any, ends. A wait whose app's limits were raised returns its turn, then
// asks for one under the new limits, so that the tokens reserved under the
// old rate do not hold the new one back.
func (s *Store) ReturnDelivery(ctx context.Context, app, lease string) error {
	if _, err := s.Pool.Exec(ctx, `UPDATE app_limit_state s
		   SET tokens = CASE WHEN a.max_per_second IS NULL THEN s.tokens
		                     ELSE least(greatest(1, a.max_per_second), s.tokens + 1) END,
		       leases = s.leases - $2::text
		  FROM apps a
		 WHERE s.app = $1 AND a.id = s.app`, app, lease); err != nil {
		return fmt.Errorf("return a turn of %s: %w", app, err)
	}
	return nil
}

// AppLimits reads the current limits of apps; an app that is not there is
// left out.
func (s *Store) AppLimits(ctx context.Context, apps []string) (map[string]Limits, error) {
	rows, err := s.Pool.Query(ctx, `SELECT id, coalesce(max_per_second, 0), coalesce(max_in_flight, 0)
		FROM apps WHERE id = ANY($1)`, apps)
	if err != nil {
		return nil, fmt.Errorf("read app limits: %w", err)
	}
	out := map[string]Limits{}
	for rows.Next() {
		var app string
		var l Limits
		if err := rows.Scan(&app, &l.MaxPerSecond, &l.MaxInFlight); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read app limits: %w", err)
		}
		out[app] = l
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read app limits: %w", err)
	}
	return out, nil
}

// RateRaised reports whether now's rate lets more through than l's: l has
// a rate, and now's is higher or none.
func (l Limits) RateRaised(now Limits) bool {
	return l.MaxPerSecond > 0 && (now.MaxPerSecond == 0 || now.MaxPerSecond > l.MaxPerSecond)
}
