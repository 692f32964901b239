package publish_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"herald/internal/testkit"
	"herald/publish"
	"herald/store"
)

// appTable gives the test app a table of its own beside Herald's, as an app
// sharing the database would have.
func (e *env) appTable() {
	e.t.Helper()
	e.exec(`CREATE TABLE people (id text PRIMARY KEY, name text NOT NULL)`)
}

// begin starts a transaction on e's database, rolled back at the end of the
// test unless committed.
func (e *env) begin() pgx.Tx {
	e.t.Helper()
	tx, err := e.store.Pool.Begin(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// savePerson is the app's own change, made in tx.
func savePerson(t *testing.T, ctx context.Context, tx pgx.Tx, id, name string) {
	t.Helper()
	if _, err := tx.Exec(ctx, `INSERT INTO people (id, name) VALUES ($1, $2)`, id, name); err != nil {
		t.Fatalf("save person: %v", err)
	}
}

// undispatched returns the ids of the events the relay would claim now.
func (e *env) undispatched() []string {
	e.t.Helper()
	pending, err := e.store.Undispatched(e.ctx, 1000, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	ids := make([]string, len(pending))
	for i, p := range pending {
		ids[i] = p.ID
	}
	return ids
}

func (e *env) countRows(sql string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.store.Pool.QueryRow(e.ctx, sql, args...).Scan(&n); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func TestPublishTxRollbackPublishesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.appTable()
	p := e.publisher(publish.Options{})

	tx := e.begin()
	savePerson(t, e.ctx, tx, "person-1", "Ada")
	res, err := p.PublishTx(e.ctx, tx, person("person-1", "Ada"))
	if err != nil {
		t.Fatalf("PublishTx: %v", err)
	}
	if len(res) != 1 || res[0].Seq == 0 || res[0].Duplicate {
		t.Fatalf("PublishTx = %+v", res)
	}
	var inTx int
	if err := tx.QueryRow(e.ctx, `SELECT count(*) FROM events WHERE id = $1`, res[0].ID).Scan(&inTx); err != nil {
		t.Fatal(err)
	}
	if inTx != 1 {
		t.Errorf("the transaction sees %d rows of its event, want 1", inTx)
	}
	if got := e.undispatched(); len(got) != 0 {
		t.Errorf("the relay sees %v before the transaction ended", got)
	}
	if err := tx.Rollback(e.ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.undispatched(); len(got) != 0 {
		t.Errorf("the relay sees %v after a rollback", got)
	}
	if n := e.countRows(`SELECT count(*) FROM events`); n != 0 {
		t.Errorf("%d event rows after a rollback, want 0", n)
	}
	if n := e.countRows(`SELECT count(*) FROM people`); n != 0 {
		t.Errorf("%d people after a rollback, want 0", n)
	}
}

func TestPublishTxCommitPublishesOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.appTable()
	p := e.publisher(publish.Options{})

	// PublishTx never notifies the relay, neither before the commit nor
	// with it: a NOTIFY would make the caller's commit wait for every other
	// notifying transaction's (store/wake.go). The relay polls.
	listener, err := e.store.Pool.Acquire(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Release()
	if _, err := listener.Exec(e.ctx, "LISTEN "+store.NotifyChannel); err != nil {
		t.Fatal(err)
	}
	// The channel is database-wide and other tests publish too: only a
	// notification from this transaction's connection counts.
	notified := func(wait time.Duration, pid uint32) bool {
		ctx, cancel := context.WithTimeout(e.ctx, wait)
		defer cancel()
		_, err := testkit.WaitNotification(ctx, listener.Conn(), map[uint32]bool{pid: true})
		return err == nil
	}

	id := uuid.NewString()
	req := person("person-1", "Ada")
	req.ID = id
	tx := e.begin()
	pid := tx.Conn().PgConn().PID()
	savePerson(t, e.ctx, tx, "person-1", "Ada")
	res, err := p.PublishTx(e.ctx, tx, req)
	if err != nil {
		t.Fatalf("PublishTx: %v", err)
	}
	if notified(200*time.Millisecond, pid) {
		t.Error("the relay was notified before the commit")
	}
	if err := tx.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	if notified(300*time.Millisecond, pid) {
		t.Error("the publishing transaction notified the relay at its commit")
	}
	if got := e.undispatched(); len(got) != 1 || got[0] != id {
		t.Fatalf("the relay sees %v after the commit, want [%s]", got, id)
	}
	stored, err := e.store.GetEvent(e.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if stored.Seq != res[0].Seq || stored.SourceApp != "contacts" || stored.State != "accepted" {
		t.Errorf("stored event = seq %d, source %s, state %s; want seq %d from contacts, accepted",
			stored.Seq, stored.SourceApp, stored.State, res[0].Seq)
	}
	if !strings.Contains(string(stored.Envelope), `"source":"app:contacts"`) {
		t.Errorf("envelope %s does not name the publishing app", stored.Envelope)
	}

	// Publishing the same event again, in a later transaction (an app that
	// retries after an unclear commit), records nothing new.
	tx2 := e.begin()
	again, err := p.PublishTx(e.ctx, tx2, req)
	if err != nil {
		t.Fatalf("PublishTx again: %v", err)
	}
	if !again[0].Duplicate || again[0].Seq != res[0].Seq {
		t.Errorf("PublishTx again = %+v, want a duplicate of seq %d", again[0], res[0].Seq)
	}
	if err := tx2.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.countRows(`SELECT count(*) FROM events WHERE id = $1`, id); n != 1 {
		t.Errorf("%d rows of the event, want exactly 1", n)
	}
	if n := e.countRows(`SELECT count(*) FROM people`); n != 1 {
		t.Errorf("%d people, want 1", n)
	}
}

func TestPublishTxRejectionLeavesTransactionUsable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.appTable()
	p := e.publisher(publish.Options{})

	tx := e.begin()
	savePerson(t, e.ctx, tx, "person-1", "Ada")
	bad := person("person-1", "Ada")
	bad.Subject = ""
	_, err := p.PublishTx(e.ctx, tx, person("person-1", "Ada"), bad)
	rej, ok := publish.IsRejection(err)
	if !ok || rej.Code != publish.CodeSubjectInvalid {
		t.Fatalf("PublishTx = %v, want a subject_invalid rejection", err)
	}
	if !strings.HasPrefix(err.Error(), "event 2 of 2: subject_invalid: ") {
		t.Errorf("error %q does not name the refused event's position", err)
	}
	var inTx int
	if err := tx.QueryRow(e.ctx, `SELECT count(*) FROM events WHERE state <> 'rejected'`).Scan(&inTx); err != nil {
		t.Fatalf("the transaction is no longer usable: %v", err)
	}
	if inTx != 0 {
		t.Errorf("%d events written in the transaction although one was refused", inTx)
	}
	// The rejection is recorded outside the transaction, so operators see
	// it even though the app rolls back.
	if err := tx.Rollback(e.ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.count("rejected"); n != 1 {
		t.Errorf("%d rejections recorded, want 1", n)
	}

	// id_conflict is found only by the insert: the savepoint takes the
	// other events of the call back, and the app's own change stays.
	taken := person("person-2", "Bob")
	taken.ID = uuid.NewString()
	if _, err := p.Publish(e.ctx, taken); err != nil {
		t.Fatal(err)
	}
	reuse := person("person-3", "Cy")
	reuse.ID = taken.ID
	tx2 := e.begin()
	savePerson(t, e.ctx, tx2, "person-3", "Cy")
	_, err = p.PublishTx(e.ctx, tx2, person("person-3", "Cy"), reuse)
	if rej, ok := publish.IsRejection(err); !ok || rej.Code != publish.CodeIDConflict {
		t.Fatalf("PublishTx = %v, want id_conflict", err)
	}
	if err := tx2.Commit(e.ctx); err != nil {
		t.Fatalf("commit after a refused publish: %v", err)
	}
	if n := e.countRows(`SELECT count(*) FROM people WHERE id = 'person-3'`); n != 1 {
		t.Errorf("the app's own row is gone (%d)", n)
	}
	if n := e.count("accepted"); n != 1 {
		t.Errorf("%d accepted events, want only the first publish", n)
	}
}

// TestPublishTxKeyWaitsForEarlierTransaction: a transaction that publishes a
// key holds it until it ends, so a later publisher of the key, even one whose
// transaction began first, takes the next sequence number only after the
// first commits.
func TestPublishTxKeyWaitsForEarlierTransaction(t *testing.T) {
	// Serial: a timing bound.
	e := newEnv(t)
	e.appTable()
	p := e.publisher(publish.Options{})

	txB := e.begin() // begins first, publishes second
	savePerson(t, e.ctx, txB, "person-b", "B")
	txA := e.begin()
	resA, err := p.PublishTx(e.ctx, txA, person("k", "A"))
	if err != nil {
		t.Fatal(err)
	}

	type answer struct {
		res []publish.Result
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := p.PublishTx(e.ctx, txB, person("k", "B"))
		done <- answer{res, err}
	}()
	select {
	case a := <-done:
		t.Fatalf("PublishTx of the same key returned (%+v, %v) while another transaction held it", a.res, a.err)
	case <-time.After(300 * time.Millisecond):
	}
	// Another key is not held up.
	other := e.begin()
	if _, err := p.PublishTx(e.ctx, other, person("other", "O")); err != nil {
		t.Fatal(err)
	}
	if err := other.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}

	if err := txA.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	var b answer
	select {
	case b = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("PublishTx still waits after the holder committed")
	}
	if b.err != nil {
		t.Fatal(b.err)
	}
	if b.res[0].Seq <= resA[0].Seq {
		t.Errorf("seq of the later commit %d is not after %d", b.res[0].Seq, resA[0].Seq)
	}
	if err := txB.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
}

// TestPublishTxConcurrentTransactionsKeepCommitOrder runs transactions that
// publish one key and do work of their own before committing, while an
// observer polls like the relay: an event never becomes visible behind one
// already seen, so the relay's sequence order is the commit order.
func TestPublishTxConcurrentTransactionsKeepCommitOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.appTable()
	p := e.publisher(publish.Options{})
	ctx := e.ctx

	const workers, perWorker = 4, 15
	stopWatching := testkit.WatchVisibility(func() ([]int64, error) {
		rows, err := e.store.Pool.Query(ctx,
			`SELECT seq FROM events WHERE subject = 'k' AND state = 'accepted' ORDER BY seq`)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, pgx.RowTo[int64])
	})

	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				err := pgx.BeginFunc(ctx, e.store.Pool, func(tx pgx.Tx) error {
					id := fmt.Sprintf("w%d-%d", w, i)
					if _, err := tx.Exec(ctx, `INSERT INTO people (id, name) VALUES ($1, 'x')`, id); err != nil {
						return err
					}
					if _, err := p.PublishTx(ctx, tx, person("k", id)); err != nil {
						return err
					}
					// Work after publishing, so commits straggle.
					_, err := tx.Exec(ctx, `SELECT pg_sleep($1)`, float64((w+i)%3)/1000)
					if i%7 == 3 {
						return errors.Join(err, errRollback)
					}
					return err
				})
				if err != nil && !errors.Is(err, errRollback) {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("publisher: %v", err)
	}
	if err := stopWatching(); err != nil {
		t.Fatalf("observer: %v", err)
	}

	// Each committed transaction left its row and its event; rolled back
	// ones left neither.
	rolledBack := 0
	for i := range perWorker {
		if i%7 == 3 {
			rolledBack++
		}
	}
	want := workers * (perWorker - rolledBack)
	if n := e.countRows(`SELECT count(*) FROM people`); n != want {
		t.Errorf("%d people, want %d", n, want)
	}
	if n := e.countRows(`SELECT count(*) FROM events WHERE subject = 'k' AND state = 'accepted'`); n != want {
		t.Errorf("%d events of the key, want %d", n, want)
	}
	if n := e.countRows(`SELECT count(*) FROM people pp
		WHERE NOT EXISTS (SELECT 1 FROM events ev WHERE convert_from(ev.envelope, 'UTF8')::jsonb -> 'data' ->> 'name' = pp.id)`); n != 0 {
		t.Errorf("%d people committed without their event", n)
	}
}

// errRollback makes pgx.BeginFunc roll a transaction back on purpose.
var errRollback = errors.New("roll back on purpose")

func TestPublishDeprecatedVersion(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.appTable()
	e.exec(`UPDATE declarations SET deprecated = true WHERE type = 'contacts.blob.stored' AND version = 1`)
	p := e.publisher(publish.Options{})
	blob := publish.Request{App: "contacts", Type: "contacts.blob.stored", Version: 1, Subject: "b", Data: []byte(`{}`)}

	res, err := p.Publish(e.ctx, blob)
	if err != nil {
		t.Fatalf("publishing a deprecated version: %v", err)
	}
	if !res.Deprecated {
		t.Errorf("Result = %+v, want Deprecated", res)
	}
	plain, err := p.Publish(e.ctx, person("p", "Ada"))
	if err != nil || plain.Deprecated {
		t.Errorf("Publish of a current version = %+v, %v", plain, err)
	}
	tx := e.begin()
	out, err := p.PublishTx(e.ctx, tx, person("p", "Bob"), blob)
	if err != nil {
		t.Fatal(err)
	}
	if out[0].Deprecated || !out[1].Deprecated {
		t.Errorf("PublishTx results = %+v, want only the second deprecated", out)
	}
}

// TestPublishTxDatabaseError: a publish that fails in the database, not by
// a rejection (here its key's lock is held past the caller's
// lock_timeout), writes nothing. Under its savepoint (several events) the
// caller's transaction goes on with its earlier work; one event takes no
// savepoint (in Herald's own role, and in a publisher role's on a
// connection that has published before, as here), and the error leaves the
// transaction aborted, as the caller's own failed statement would: its
// commit rolls back.
func TestPublishTxDatabaseError(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	roleStore := e.publisherRoleStore(t)
	// Two keys of different lock stripes (FNV-1a of the subject mod 4096,
	// docs/design.md#key-locks): the held one, and a free one.
	stripe := func(subject string) uint64 { return keyHash(subject) % 4096 }
	held, free := "person-held", ""
	for i := 0; free == ""; i++ {
		if s := fmt.Sprintf("person-free-%d", i); stripe(s) != stripe(held) {
			free = s
		}
	}
	holder := e.begin()
	owner := e.publisher(publish.Options{})
	if _, err := owner.PublishTx(e.ctx, holder, person(held, "Held")); err != nil {
		t.Fatal(err)
	}
	withID := func(r publish.Request) publish.Request { r.ID = uuid.NewString(); return r }
	for _, as := range []struct {
		name  string
		store *store.Store
	}{{"herald", e.store}, {"publisher role", roleStore}} {
		p := publish.New(as.store, publish.Options{})
		for _, n := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s, %d events", as.name, n), func(t *testing.T) {
				tx, err := as.store.Pool.Begin(e.ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback(context.Background())
				earlier, err := p.PublishTx(e.ctx, tx, withID(person(free, "Earlier")))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tx.Exec(e.ctx, `SET LOCAL lock_timeout = '100ms'`); err != nil {
					t.Fatal(err)
				}
				rs := []publish.Request{withID(person(held, "Waits"))}
				if n == 2 {
					rs = append([]publish.Request{withID(person(free, "Before"))}, rs...)
				}
				res, err := p.PublishTx(e.ctx, tx, rs...)
				var pgErr *pgconn.PgError
				if !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
					t.Fatalf("PublishTx on a held key = %+v, %v; want lock_not_available (55P03)", res, err)
				}
				aborted := n == 1
				_, execErr := tx.Exec(e.ctx, `SELECT 1`)
				if aborted {
					if !errors.As(execErr, &pgErr) || pgErr.Code != "25P02" {
						t.Fatalf("a statement after one event's failed publish: %v; want in_failed_sql_transaction (25P02)", execErr)
					}
					if err := tx.Commit(e.ctx); !errors.Is(err, pgx.ErrTxCommitRollback) {
						t.Fatalf("commit after the failed publish: %v; want it rolled back", err)
					}
				} else {
					if execErr != nil {
						t.Fatalf("a statement after the failed publish under its savepoint: %v", execErr)
					}
					if err := tx.Commit(e.ctx); err != nil {
						t.Fatalf("commit after the failed publish: %v", err)
					}
				}
				want := 1
				if aborted {
					want = 0
				}
				if got := e.countRows(`SELECT count(*) FROM events WHERE id = $1`, earlier[0].ID); got != want {
					t.Errorf("the transaction's earlier event: %d rows after commit, want %d", got, want)
				}
				ids := []string{rs[0].ID, rs[n-1].ID}
				if got := e.countRows(`SELECT count(*) FROM events WHERE id = ANY($1::uuid[])`, ids); got != 0 {
					t.Errorf("%d events of the failed publish committed, want 0", got)
				}
			})
		}
	}
}

// TestPublishTxRefusedID: an event whose id is taken, refused
// (id_conflict) or a duplicate, writes nothing and leaves the caller's
// transaction usable, in Herald's role and in a publisher role's. One event
// writes nothing that a savepoint would take back, so it keeps the key's
// lock until the transaction ends, as an accepted event would
// (docs/publishing.md): another publisher of the key waits. Several events
// give it back with their savepoint.
func TestPublishTxRefusedID(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	taken := person("elsewhere", "Ada")
	taken.ID = uuid.NewString()
	if _, err := e.publisher(publish.Options{}).Publish(e.ctx, taken); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		rs       func(key string) []publish.Request
		code     string // "" for a duplicate
		keepLock bool
	}{
		{"one event, id_conflict", func(key string) []publish.Request {
			r := person(key, "Other")
			r.ID = taken.ID
			return []publish.Request{r}
		}, publish.CodeIDConflict, true},
		{"one event, duplicate", func(string) []publish.Request { return []publish.Request{taken} }, "", true},
		{"two events, id_conflict", func(key string) []publish.Request {
			r := person(key, "Other")
			r.ID = taken.ID
			return []publish.Request{person(key+"-free", "Free"), r}
		}, publish.CodeIDConflict, false},
	}
	for _, as := range []struct {
		name  string
		store *store.Store
	}{{"herald", e.store}, {"publisher role", e.publisherRoleStore(t)}} {
		p := publish.New(as.store, publish.Options{})
		for i, c := range cases {
			t.Run(as.name+", "+c.name, func(t *testing.T) {
				key := fmt.Sprintf("locked-%s-%d", as.name, i)
				if c.code == "" {
					key = taken.Subject
				}
				count := `SELECT count(*) FROM events WHERE subject LIKE $1 || '%' AND state <> 'rejected'`
				before := e.countRows(count, key)
				tx, err := as.store.Pool.Begin(e.ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback(context.Background())
				res, err := p.PublishTx(e.ctx, tx, c.rs(key)...)
				if c.code != "" {
					if rej, ok := publish.IsRejection(err); !ok || rej.Code != c.code {
						t.Fatalf("PublishTx = %+v, %v; want %s", res, err, c.code)
					}
				} else if err != nil || !res[0].Duplicate {
					t.Fatalf("PublishTx = %+v, %v; want a duplicate", res, err)
				}
				if _, err := tx.Exec(e.ctx, `SELECT 1`); err != nil {
					t.Fatalf("the transaction after the refusal: %v", err)
				}

				other, err := as.store.Pool.Begin(e.ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer other.Rollback(context.Background())
				if _, err := other.Exec(e.ctx, `SET LOCAL lock_timeout = '300ms'`); err != nil {
					t.Fatal(err)
				}
				_, err = p.PublishTx(e.ctx, other, person(key, "Next"))
				var pgErr *pgconn.PgError
				switch {
				case c.keepLock && (!errors.As(err, &pgErr) || pgErr.Code != "55P03"):
					t.Errorf("a publisher of the key while the refused call's transaction is open: %v; want it to wait for the key's lock (55P03), as documented", err)
				case !c.keepLock && err != nil:
					t.Errorf("a publisher of the key while the refused call's transaction is open: %v; want the savepoint to have given the lock back", err)
				}
				if err := other.Rollback(e.ctx); err != nil {
					t.Fatal(err)
				}
				// What the refused call's transaction commits holds none
				// of its events.
				if err := tx.Commit(e.ctx); err != nil {
					t.Fatalf("commit after the refusal: %v", err)
				}
				if n := e.countRows(count, key); n != before {
					t.Errorf("%d events of the key committed after the refusal, %d before", n, before)
				}
			})
		}
	}
}

// TestPublishTxInOneRoundTrip: once the publisher's look-ups are cached, a
// publish in a caller's transaction sends one round trip, whatever it
// publishes: one event one statement (a publisher role's,
// herald_publish_fast, with no savepoint); several their statements
// and the savepoint that makes them all or nothing in one batch, not a
// savepoint of their own before and after.
func TestPublishTxInOneRoundTrip(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	roleURL := e.grantedPublisherRole(documentedPublisherGrants(t))
	roleStore, err := store.Open(e.ctx, roleURL, store.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(roleStore.Close)
	for _, as := range []struct {
		name  string
		url   string
		store *store.Store
	}{{"herald", e.url, e.store}, {"publisher role", roleURL, roleStore}} {
		for _, n := range []int{1, 3} {
			t.Run(fmt.Sprintf("%s, %d events", as.name, n), func(t *testing.T) {
				cfg, err := pgx.ParseConfig(as.url)
				if err != nil {
					t.Fatal(err)
				}
				counter := &testkit.Sent{}
				cfg.Tracer = counter
				conn, err := pgx.ConnectConfig(e.ctx, cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close(context.Background())
				tx, err := conn.Begin(e.ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback(context.Background())
				p := publish.New(as.store, publish.Options{})
				requests := func(round string) []publish.Request {
					rs := make([]publish.Request, n)
					for i := range rs {
						rs[i] = person(fmt.Sprintf("person-%s-%d", round, i), "Ann")
					}
					return rs
				}
				// The first call looks up the role, the app and the
				// declaration, and prepares the statements.
				if _, err := p.PublishTx(e.ctx, tx, requests("warm")...); err != nil {
					t.Fatal(err)
				}
				counter.Reset()
				out, err := p.PublishTx(e.ctx, tx, requests("counted")...)
				if err != nil {
					t.Fatal(err)
				}
				if len(out) != n || out[n-1].Seq == 0 {
					t.Fatalf("PublishTx = %+v, want %d events accepted", out, n)
				}
				statements, batches := counter.Reset()
				if sent := len(statements) + batches; sent != 1 {
					t.Errorf("PublishTx sent %d statements one by one %q and %d batches; want one round trip", len(statements), statements, batches)
				}
				if n == 1 && (len(statements) != 1 || as.store == roleStore && statements[0] != "herald_publish_fast") {
					t.Errorf("PublishTx of one event sent %q and %d batches; want one statement (a publisher role's herald_publish_fast)", statements, batches)
				}
				if err := tx.Commit(e.ctx); err != nil {
					t.Fatal(err)
				}
				if got := e.countRows(`SELECT count(*) FROM events WHERE id = ANY($1::uuid[])`, []string{out[0].ID, out[n-1].ID}); got != min(n, 2) {
					t.Errorf("%d of the counted call's events committed, want all", got)
				}
			})
		}
	}
}
