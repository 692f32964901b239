package store

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// KeyStripeScheme is how publishers lock ordering keys (migration 0032):
// by a key's fine stripe row alone, or also by its coarse one, which
// publishers of releases before 0032 lock.
type KeyStripeScheme struct {
	// Coarse: the coarse rows are kept for publishers of older releases.
	Coarse    bool      `json:"coarse"`
	ChangedAt time.Time `json:"changedAt"`
	// CoarseRows and FineRows count the rows of each kind.
	CoarseRows int64 `json:"coarseRows"`
	FineRows   int64 `json:"fineRows"`
}

// KeyStripeScheme reads how publishers lock ordering keys.
func (s *Store) KeyStripeScheme(ctx context.Context) (KeyStripeScheme, error) {
	var k KeyStripeScheme
	err := s.Pool.QueryRow(ctx, `
		SELECT k.coarse, k.changed_at,
		       (SELECT count(*) FROM key_stripes WHERE stripe < $1),
		       (SELECT count(*) FROM key_stripes WHERE stripe >= $1)
		  FROM key_stripe_scheme k`, fineStripeBase).Scan(&k.Coarse, &k.ChangedAt, &k.CoarseRows, &k.FineRows)
	if err != nil {
		return KeyStripeScheme{}, fmt.Errorf("read the key stripe scheme: %w", err)
	}
	return k, nil
}

// ErrFineOnly is RetireCoarseStripes's error when the coarse rows are
// already gone.
var ErrFineOnly = errors.New("the coarse key stripes are already retired: publishers lock fine stripes only")

// RetireCoarseStripes deletes the coarse stripe rows, so that publishers
// lock one row a key, and records it in the audit trail: run it once no
// publisher of a release before migration 0032 is left (workers, starter,
// and apps linking PublishTx), as such a publisher then fails on every
// publish for want of its row. It waits for the transactions holding
// coarse rows' locks to end, in attempts that give way to them
// (retireCoarseStripes), for at most retireLockTimeout. A publisher of
// this release that waits for a coarse row it deletes finds the row gone
// and goes on with the fine row, which every publisher of this release
// locks, so no two publishers of one key ever lock it under different
// rows. It returns how many rows it deleted. It cannot be undone while
// publishers run: one that found no coarse row holds only the fine one,
// which an older publisher would not wait for.
func (s *Store) RetireCoarseStripes(ctx context.Context, actor string) (int64, error) {
	start, pause := time.Now(), 20*time.Millisecond
	for {
		deleted, err := s.retireCoarseStripes(ctx, actor)
		if err == nil {
			s.stripes.fineOnly.Store(true)
			return deleted, nil
		}
		pgErr, ok := errors.AsType[*pgconn.PgError](err)
		if !ok || pgErr.Code != "55P03" {
			return 0, err
		}
		if time.Since(start) >= retireLockTimeout {
			return 0, fmt.Errorf("retire the coarse key stripes: publishing transactions held their rows for %s; nothing changed, try again: %w",
				retireLockTimeout, err)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(pause):
		}
		pause = min(2*pause, 500*time.Millisecond)
	}
}

// retireCoarseStripes is one attempt of RetireCoarseStripes. It takes the
// rows in the order publishers lock them (types in byte order, then
// stripes), and waits at most retireRowWait for each: a transaction that
// publishes twice locks its second key's row after its first, so it may
// wait for a row this holds while holding one this wants; giving up well
// before PostgreSQL's deadlock check (deadlock_timeout, 1 s by default)
// makes the attempt, never the publisher, the one that yields.
func (s *Store) retireCoarseStripes(ctx context.Context, actor string) (int64, error) {
	var deleted int64
	err := s.WithTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE key_stripe_scheme SET coarse = false, changed_at = now() WHERE coarse`)
		if err != nil {
			return fmt.Errorf("retire the coarse key stripes: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return ErrFineOnly
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf(`SET LOCAL lock_timeout = %d`, retireRowWait.Milliseconds())); err != nil {
			return fmt.Errorf("retire the coarse key stripes: %w", err)
		}
		tag, err = tx.Exec(ctx, `
			DELETE FROM key_stripes k USING (
			  SELECT type, version, stripe FROM key_stripes WHERE stripe < $1
			   ORDER BY type COLLATE "C", version, stripe
			     FOR UPDATE) AS c
			 WHERE k.type = c.type AND k.version = c.version AND k.stripe = c.stripe`, fineStripeBase)
		if err != nil {
			return fmt.Errorf("retire the coarse key stripes: %w", err)
		}
		deleted = tag.RowsAffected()
		var schema string
		if err := tx.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
			return fmt.Errorf("retire the coarse key stripes: %w", err)
		}
		return AppendAudit(ctx, tx, AuditEntry{Action: ActionKeyStripesFineOnly, Actor: actor,
			TargetType: TargetDatabase, TargetID: schema, Metadata: map[string]any{"coarseRowsDeleted": deleted}})
	})
	return deleted, err
}

// retireLockTimeout bounds RetireCoarseStripes's attempts; retireRowWait
// an attempt's wait for one row's lock.
const (
	retireLockTimeout = 10 * time.Second
	retireRowWait     = 100 * time.Millisecond
)

// stripeScheme is what a Store knows of its schema's key stripe scheme:
// once it has seen the coarse rows retired it says so for good (retiring
// them is one-way, and no coarse row is made after: the trigger and
// makeStripes read the scheme row FOR SHARE, which waits for a retirement
// in progress), and until then it asks again at most every
// stripeSchemeRecheck.
type stripeScheme struct {
	fineOnly atomic.Bool
	mu       sync.Mutex
	askedAt  time.Time
}

// stripeSchemeRecheck is how often a Store asks whether the coarse rows
// are retired until they are.
const stripeSchemeRecheck = 5 * time.Second

// fineStripesOnly reports whether the coarse stripe rows are known to be
// retired, so that a publish may lock its key's fine row alone with the
// cheapest statement (lockAndInsertOneFine). False when unsure: the other
// statements lock a coarse row whenever the scheme keeps them, so they are
// always right.
func (s *Store) fineStripesOnly(ctx context.Context) bool {
	fine, _ := s.stripes.ask(ctx, s.Pool) // on an error the statement that reads the scheme says what is wrong
	return fine
}

// connSchemes is stripeScheme for callers' transactions (InsertEventsTx,
// which PublishTx runs in an app's transaction), one per connection, since
// a connection's search_path names its schema. An entry goes with its
// connection.
var connSchemes sync.Map // weak.Pointer[pgconn.PgConn] -> *stripeScheme

// fineStripesOnlyIn is Store.fineStripesOnly for tx's connection. Asking
// runs in tx, so its error (a database without migration 0032) is the
// publish's: tx is aborted. A connection is taken to stay in one schema:
// one that switches its search_path between Herald schemas must not
// publish with PublishTx (docs/design.md, Key locks).
func fineStripesOnlyIn(ctx context.Context, tx pgx.Tx) (bool, error) {
	pc := tx.Conn().PgConn()
	key := weak.Make(pc)
	v, ok := connSchemes.Load(key)
	if !ok {
		if v, ok = connSchemes.LoadOrStore(key, &stripeScheme{}); !ok {
			runtime.AddCleanup(pc, func(k weak.Pointer[pgconn.PgConn]) { connSchemes.Delete(k) }, key)
		}
	}
	return v.(*stripeScheme).ask(ctx, tx)
}

// ask is fineStripesOnly's question, of q.
func (k *stripeScheme) ask(ctx context.Context, q Querier) (bool, error) {
	if k.fineOnly.Load() {
		return true, nil
	}
	if !k.mu.TryLock() {
		return false, nil
	}
	defer k.mu.Unlock()
	if time.Since(k.askedAt) < stripeSchemeRecheck {
		return false, nil
	}
	k.askedAt = time.Now()
	var coarse bool
	if err := q.QueryRow(ctx, `SELECT coarse FROM key_stripe_scheme`).Scan(&coarse); err != nil {
		return false, fmt.Errorf("read the key stripe scheme: %w", err)
	}
	if !coarse {
		k.fineOnly.Store(true)
	}
	return !coarse, nil
}

// ActionKeyStripesFineOnly records RetireCoarseStripes.
const ActionKeyStripesFineOnly = "key_stripes.fine_only"
