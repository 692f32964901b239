package store

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"
	"weak"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A publish of several events in a caller's transaction, and a publisher
// role's that herald_publish_fast did not insert (InsertPublisherEventsTx),
// is all or nothing under a savepoint, which leaves the caller's
// transaction usable when the publish fails. Its statements go in one
// round trip: SAVEPOINT, the publish's statements, RELEASE
// (underSavepoint).
//
// pgx prepares a statement it has not cached in a round trip of its own
// before the batch runs, outside the savepoint: a failure there (a lock
// timeout while a migration holds a table, a statement timeout) would abort
// the caller's transaction. So the statements are prepared by name, once a
// connection, under a savepoint of their own taken and released before the
// first call's statements (prepareUnderSavepoint), and a batch, or a
// publisher role's call of herald_publish_fast, names them (pgx then
// prepares nothing).

// namedStatement is a statement prepared by name on a connection. One with
// a function (a regprocedure's text) is prepared only where that function
// exists and the session's role may run it: a migration adds it, and a
// library may meet a database not yet migrated.
type namedStatement struct{ name, sql, function string }

var (
	stmtTakeSavepoint    = namedStatement{name: "herald_take_savepoint", sql: takeSavepoint}
	stmtReleaseSavepoint = namedStatement{name: "herald_release_savepoint", sql: releaseSavepoint}
	stmtLockStripes      = namedStatement{name: "herald_lock_stripes", sql: lockStripes}
	stmtInsertEvents     = namedStatement{name: "herald_insert_events", sql: insertEvents}
	stmtPublishChecked   = namedStatement{name: "herald_publish_checked", sql: heraldPublishChecked}
	stmtPublishOne       = namedStatement{name: "herald_publish_one", sql: heraldPublish}
	stmtPublishFast      = namedStatement{name: "herald_publish_fast", sql: heraldPublishFast, function: publishFastFunction}
)

// statementSet is the statements one kind of publisher prepares on its
// connections (Herald's roles write the tables, a publisher role calls
// herald_publish and may not read them), and the connections they are
// prepared on. An entry goes with its connection. A caller that
// deallocates them behind pgx (DEALLOCATE ALL, DISCARD ALL) breaks pgx's
// own statement cache too.
type statementSet struct {
	stmts    []namedStatement
	prepared sync.Map // weak.Pointer[pgconn.PgConn] -> preparedStatements
}

// preparedStatements names the statements of a set with a function that
// are prepared on a connection (every other one is). Nil: the set was
// forgotten there (forget) and is to be prepared anew.
type preparedStatements map[string]bool

var (
	heraldStatements = &statementSet{stmts: []namedStatement{stmtTakeSavepoint, stmtReleaseSavepoint, stmtLockStripes, stmtInsertEvents}}
	roleStatements   = &statementSet{stmts: []namedStatement{stmtTakeSavepoint, stmtReleaseSavepoint, stmtPublishChecked, stmtPublishOne, stmtPublishFast}}
)

// preparedOn reports whether set is prepared on pc.
func (set *statementSet) preparedOn(pc *pgconn.PgConn) bool {
	v, ok := set.prepared.Load(weak.Make(pc))
	return ok && v.(preparedStatements) != nil
}

// forgotten reports whether set was forgotten on pc since it was prepared.
func (set *statementSet) forgotten(pc *pgconn.PgConn) bool {
	v, ok := set.prepared.Load(weak.Make(pc))
	return ok && v.(preparedStatements) == nil
}

// preparedWith reports whether set is prepared on pc with s, a statement
// of set's that has a function.
func (set *statementSet) preparedWith(pc *pgconn.PgConn, s namedStatement) bool {
	v, ok := set.prepared.Load(weak.Make(pc))
	return ok && v.(preparedStatements)[s.name]
}

// forget forgets what set knows of pc: its next publish prepares set anew,
// deallocating its statements first (pgx would otherwise keep its own
// description of one the server no longer has) and asking again which
// statements with a function it may run.
func (set *statementSet) forget(pc *pgconn.PgConn) {
	key := weak.Make(pc)
	if _, ok := set.prepared.Load(key); ok {
		set.prepared.Store(key, preparedStatements(nil))
	}
}

// notePrepared notes that set is prepared on pc, with those of its
// statements that have a function named in with.
func (set *statementSet) notePrepared(pc *pgconn.PgConn, with preparedStatements) {
	key := weak.Make(pc)
	if _, loaded := set.prepared.Swap(key, with); !loaded {
		runtime.AddCleanup(pc, func(k weak.Pointer[pgconn.PgConn]) { set.prepared.Delete(k) }, key)
	}
}

// errSavepointKept marks a failure after which the call's savepoint could
// not be rolled back: the caller's transaction is left inside it, aborted,
// and only its rollback (of the transaction, or to a savepoint of its own
// taken before the call) helps.
var errSavepointKept = errors.New("the publish's savepoint could not be rolled back")

// undoTimeout bounds the rollback to the savepoint after a failure; it runs
// even when the call's context is done, so that a cancelled publish leaves
// the caller's transaction as it was when the connection survives.
const undoTimeout = 5 * time.Second

// underSavepoint runs in tx, under a savepoint of its own, the statements
// queue adds to a batch (set's, by what ref gives: their names, or their
// text on a connection of the simple protocol) and reads their results with
// read. It sends the savepoint, the statements and its release in one round
// trip, once set is prepared on tx's connection (prepareUnderSavepoint
// prepares it first). When anything fails it rolls back to the savepoint
// and returns the failure: tx goes on as it was before the call.
func underSavepoint(ctx context.Context, tx pgx.Tx, set *statementSet, queue func(*pgx.Batch, func(namedStatement) string), read func(pgx.BatchResults) error) error {
	ref := func(s namedStatement) string { return s.name }
	// The simple protocol (a connection configured for a pooler in
	// transaction mode) prepares nothing, and knows no names.
	if simpleProtocol(tx) {
		ref = func(s namedStatement) string { return s.sql }
	} else if err := prepareUnderSavepoint(ctx, tx, set); err != nil {
		return err
	}
	b := &pgx.Batch{}
	b.Queue(ref(stmtTakeSavepoint))
	queue(b, ref)
	b.Queue(ref(stmtReleaseSavepoint))
	br := tx.SendBatch(ctx, b)
	_, err := br.Exec()
	saved := err == nil
	if saved {
		if err = read(br); err == nil {
			_, err = br.Exec()
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil && saved {
		return undoSavepointAfter(ctx, tx, err)
	}
	return err
}

// simpleProtocol reports whether tx's connection uses the simple protocol.
func simpleProtocol(tx pgx.Tx) bool {
	return tx.Conn().Config().DefaultQueryExecMode == pgx.QueryExecModeSimpleProtocol
}

// prepareUnderSavepoint prepares set on tx's connection, once a
// connection, under a savepoint taken and released in round trips of their
// own: a failure (a lock timeout while a migration holds a table, a
// statement timeout) rolls back to it, and tx goes on as it was. Prepared
// statements outlive that rollback, so they are noted as soon as they are.
// Nothing else runs under that savepoint: a connection's first publish
// then goes as every later one does (before, it also ran its statements
// there, so a publisher role's first publish on each connection compiled
// herald_publish, however it went on).
func prepareUnderSavepoint(ctx context.Context, tx pgx.Tx, set *statementSet) error {
	conn := tx.Conn()
	if set.preparedOn(conn.PgConn()) {
		return nil
	}
	// No argument: the simple protocol, nothing to prepare first.
	if _, err := tx.Exec(ctx, takeSavepoint); err != nil {
		return err
	}
	with, err := prepareSet(ctx, conn, set, set.forgotten(conn.PgConn()))
	if err == nil {
		set.notePrepared(conn.PgConn(), with)
		_, err = tx.Exec(ctx, releaseSavepoint)
	}
	if err != nil {
		return undoSavepointAfter(ctx, tx, err)
	}
	return nil
}

// undoSavepointAfter rolls tx back to the savepoint a call took, after err,
// even when the call's context is done, and returns err (with
// errSavepointKept when the rollback failed too). Only a savepoint the call
// took is undone: the caller may have one of the same name.
func undoSavepointAfter(ctx context.Context, tx pgx.Tx, err error) error {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	if _, uerr := tx.Exec(uctx, undoSavepoint); uerr != nil {
		return errors.Join(err, fmt.Errorf("%w: %w", errSavepointKept, uerr))
	}
	return err
}

// prepareSet prepares set's statements on conn by name (pgx does nothing
// for one it has prepared there, unless again: then each is deallocated
// first), and names those with a function it prepared: one whose function
// is missing, or which the session's role may not run, is left out (asked
// first, so that nothing fails).
func prepareSet(ctx context.Context, conn *pgx.Conn, set *statementSet, again bool) (preparedStatements, error) {
	with := preparedStatements{}
	for _, s := range set.stmts {
		if again {
			// Closing a statement the server does not have succeeds.
			if err := conn.Deallocate(ctx, s.name); err != nil {
				return nil, fmt.Errorf("deallocate %s: %w", s.name, err)
			}
		}
		if s.function != "" {
			var runs bool
			err := conn.QueryRow(ctx, `SELECT coalesce(has_function_privilege(to_regprocedure($1), 'EXECUTE'), false)`,
				s.function).Scan(&runs)
			if err != nil {
				return nil, fmt.Errorf("look up %s: %w", s.function, err)
			}
			if !runs {
				continue
			}
			with[s.name] = true
		}
		if _, err := conn.Prepare(ctx, s.name, s.sql); err != nil {
			return nil, fmt.Errorf("prepare %s: %w", s.name, err)
		}
	}
	return with, nil
}

// underOwnSavepoint runs insert under a savepoint of pgx's, taken and
// released in round trips of their own: the slow way of a call whose id was
// taken, which insert's results tell apart. When any is a Conflict it rolls
// the savepoint back and reports only the conflicts (the others carry their
// ID alone); otherwise it releases it.
func underOwnSavepoint(ctx context.Context, tx pgx.Tx, insert func(sp pgx.Tx) ([]InsertedEvent, error)) ([]InsertedEvent, error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("savepoint: %w", err)
	}
	out, err := insert(sp)
	if err != nil {
		_ = sp.Rollback(ctx)
		return nil, err
	}
	if !slices.ContainsFunc(out, func(ins InsertedEvent) bool { return ins.Conflict }) {
		return out, sp.Commit(ctx)
	}
	if err := sp.Rollback(ctx); err != nil {
		return nil, fmt.Errorf("roll back to the savepoint: %w", err)
	}
	for i := range out {
		out[i] = InsertedEvent{ID: out[i].ID, Conflict: out[i].Conflict}
	}
	return out, nil
}
