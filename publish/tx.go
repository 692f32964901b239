package publish

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"herald/manifest"
	"herald/store"
)

// PublishTx validates rs and records them in the event log inside tx, the
// caller's own transaction, so an app stores its change and the events about
// it atomically (a transactional outbox): the relay sees the events only when
// tx commits, and a rollback publishes nothing.
//
// tx must be a transaction on the database that holds Herald's schema, the
// same database as the Publisher's store (the app's database with Herald's
// schema migrated into it, or Herald's database holding the app's tables
// too). The app and declaration look-ups run in tx, so PublishTx needs no
// other connection while the caller holds one, except to record a rejection.
//
// It is all or nothing. When any request is refused, nothing is written in tx
// and the error joins one *Rejection per refused request, each wrapped with
// its position ("event 2 of 3: ..."); IsRejection finds the first. Rejections
// are recorded in the event log on the Publisher's own connections, so they
// stay visible to operators whatever becomes of tx (best effort: waiting at
// most recordWait for a free connection). After a refusal tx is as it was
// before the call, and the caller may still commit its other work, or roll
// back: nothing was written (several events are inserted under a
// savepoint, which the refusal rolls back, and so is a publisher role's
// event that herald_publish_fast did not insert; one event whose id is
// taken keeps its key's lock until tx ends, as an accepted one would).
// A database error (the key's lock not granted within the caller's
// lock_timeout, a deadlock, a serialization failure at REPEATABLE READ or
// SERIALIZABLE, such as the same id committed by another transaction after
// tx's snapshot, a lost connection) leaves tx aborted, as a failed statement
// of the caller's own would, when the call was one event with no savepoint:
// in Herald's role, and in a publisher role's on a connection that has
// published before (store.InsertPublisherEventsTx); under the savepoint, tx
// goes on without the call's events. The look-ups
// before the inserts (the role, the app, the declaration, each kept for the
// cache TTL) run in tx unprotected: their failure, such as a role without the
// grants, leaves tx aborted.
//
// PublishTx takes each event's ordering-key lock (type, version, subject) in
// tx and holds it until tx ends, so that sequence order is commit order per
// key. Keep transactions that publish short: a publisher of the same key,
// or of a key of the same type and version that shares its lock stripe
// (store.InsertEventsTx), waits for them.
//
// It returns one Result per request, in order; a Duplicate result means the
// same id and content were already accepted (by a committed transaction, or
// earlier in this one).
func (p *Publisher) PublishTx(ctx context.Context, tx pgx.Tx, rs ...Request) (_ []Result, err error) {
	if tx == nil {
		return nil, errors.New("publish in transaction: no transaction given")
	}
	if len(rs) == 0 {
		return nil, nil
	}
	evs := make([]store.NewEvent, len(rs))
	deprecated := make([]bool, len(rs))
	spans := make([]trace.Span, len(rs))
	defer func() {
		if err != nil {
			// All or nothing: the spans of the requests that passed end
			// unpublished too (a refused one has already ended with its code).
			endFailed(spans, err)
		}
	}()
	// A publisher role's transaction publishes for the role's app only, and
	// through its functions; Herald's runtime and owner roles write the
	// tables themselves.
	pub, err := p.cache.publisherApp(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("publish in transaction: %w", err)
	}
	var role *store.PublisherApp
	if pub.OK {
		role = &pub
	}
	var refused []error
	budget := manifest.NewBudget(manifest.MaxRequestValidationSteps)
	for i, r := range rs {
		if role != nil && r.App == "" {
			r.App = role.App
		}
		ev, dep, rej, span, err := p.check(ctx, tx, role, r, budget)
		spans[i] = span
		if err != nil {
			return nil, err
		}
		if role != nil && r.App != role.App {
			rej = &Rejection{Code: CodeTypeNotOwned,
				Message: fmt.Sprintf("this database role publishes for app %q only, not as app %q", role.App, r.App)}
		}
		if rej != nil {
			endRejected(span, rej)
			p.recordOutside(ctx, role, r, rej)
			refused = append(refused, positioned(i, len(rs), rej))
			continue
		}
		evs[i], deprecated[i] = ev, dep
	}
	if len(refused) > 0 {
		return nil, errors.Join(refused...)
	}

	// Several events are all or nothing under a savepoint the store sends
	// in the round trip that writes them: a refusal has written nothing.
	// One event needs none: its statement writes nothing when it refuses
	// (store.InsertEventsTx), and a publisher role's herald_publish_fast
	// inserts it or writes nothing, the savepoint then following
	// (store.InsertPublisherEventsTx).
	insert := store.InsertEventsTx
	if role != nil {
		insert = store.InsertPublisherEventsTx
	}
	inserted, err := insert(ctx, tx, evs)
	if err != nil {
		return nil, fmt.Errorf("publish in transaction: %w", err)
	}
	out := make([]Result, len(rs))
	for i, ins := range inserted {
		if ins.Conflict {
			rej := &Rejection{Code: CodeIDConflict,
				Message: fmt.Sprintf("event id %s was already used for different content", ins.ID)}
			endRejected(spans[i], rej)
			p.recordOutside(ctx, role, rs[i], rej)
			refused = append(refused, positioned(i, len(rs), rej))
			continue
		}
		out[i] = Result{ID: ins.ID, Seq: ins.Seq, Duplicate: ins.Duplicate, Deprecated: deprecated[i]}
	}
	if len(refused) > 0 {
		return nil, errors.Join(refused...)
	}
	// The events are written in tx; whether tx commits is the caller's
	// affair, after this span ends.
	for i := range out {
		endAccepted(spans[i], out[i].ID, out[i])
	}
	return out, nil
}

// recordWait bounds how long PublishTx waits for a connection of its own to
// record a rejection. The caller holds one of the pool's connections in its
// transaction, perhaps the last free one; recording is best effort and must
// not hold the caller up for long.
const recordWait = 2 * time.Second

// recordOutside records a rejection on the Publisher's pool, outside the
// caller's transaction, so it survives a rollback. For a publisher role's
// transaction (role not nil) it is recorded under the role's app, through
// its function: the Publisher's store then connects as the same role.
func (p *Publisher) recordOutside(ctx context.Context, role *store.PublisherApp, r Request, rej *Rejection) {
	ctx, cancel := context.WithTimeout(ctx, recordWait)
	defer cancel()
	if role == nil {
		p.record(ctx, r, rej)
		return
	}
	if p.rejected != nil {
		p.rejected(role.App, rej.Code)
	}
	via, token := p.origin(r)
	err := store.RecordPublisherRejection(ctx, p.store.Pool, store.Rejection{ID: r.ID, SourceApp: role.App,
		Type: r.Type, Version: r.Version, Subject: r.Subject, Code: rej.Code, Reason: rej.Message, Via: via, Token: token})
	if err != nil && !errors.Is(err, context.Canceled) {
		p.log.Warn("record rejection", zap.String("code", rej.Code), zap.Error(err))
	}
}

// positioned wraps the rejection of request i of n with its position when
// there are several requests.
func positioned(i, n int, rej *Rejection) error {
	if n == 1 {
		return rej
	}
	return fmt.Errorf("event %d of %d: %w", i+1, n, rej)
}
