package store_test

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"herald/internal/testenv"
	"herald/publish"
	"herald/store"
)

// publishers is how many publishers commit at once in
// BenchmarkConcurrentPublish (issue 29's figure), and rounds how many times
// each way takes its turn: an even number, so that every way's mean place
// in the turns is the same (the rounds alternate the order).
const (
	publishers = 64
	rounds     = 4
)

// BenchmarkConcurrentPublish measures 64 publishers at once, each
// committing transactions of one event with a key of its own, thirteen ways on
// the same schema one after the other:
//
//   - publish-tx: as PublishTx writes one event inside a caller's
//     transaction: InsertEventsTx (the ordering-key stripe lock and the
//     INSERT in one statement);
//   - savepoint: what InsertEventsTx writes for several events (all or
//     nothing), here for one: the stripes' lock statement and an insert
//     that raises when the id is taken, under a savepoint, all in one
//     round trip;
//   - savepoint-apart: publish-tx under a savepoint of its own, before and
//     after, as PublishTx wrote several events and a publisher role's until
//     2026-12-04, and one event until it took none;
//   - role and role-apart: what PublishTx writes for an app's own database
//     role (a publisher role: InsertPublisherEventsTx, herald_publish under
//     a savepoint in one round trip), and the same with the savepoint in
//     round trips of its own, as until 2026-12-04;
//   - role-floor: what a publisher role's publish through a PL/pgSQL
//     function of herald_publish's kind costs with no work of its own
//     beyond the write: roleFloor finds the role's app, locks the key's
//     stripe and inserts, with no check, no savepoint and a scalar result;
//   - own-tx: as the HTTP API and starter publish write (InsertEvents: the
//     same in a transaction of its own, for one event its one statement,
//     then a wake-up of the relay after commit);
//   - PublishTx and Publish: the whole of publish.Publisher's PublishTx in
//     a transaction and Publish (the HTTP API's, without HTTP): the
//     look-ups (cached), validation and the envelope before publish-tx's
//     or own-tx's writes;
//   - two-statements: InsertEventsTx as it was until one event took one
//     statement: the stripe's lock statement, then the insert (no
//     savepoint);
//   - notify-in-tx: InsertEventsTx as it was until issue 29, with pg_notify
//     inside the transaction, whose commits PostgreSQL serialises;
//   - plain-insert: the same rows' INSERTs, neither locks nor notify, in a
//     transaction (the baseline of the ways inside one);
//   - plain-autocommit: the same INSERT as a statement of its own (own-tx's
//     and Publish's baseline).
//
// Every way writes the rows the publisher writes for the same requests
// (until 2026-12-03 the ways without the publisher wrote a 45-byte
// envelope and a one-letter content hash, so their rows were smaller than
// PublishTx's and Publish's).
//
// Every connection of a way's pool has published before its clock starts
// (warm), as an app's pool of connections has: the first publish of a
// connection is BenchmarkFirstPublish's. It runs with synchronous_commit on
// (each commit waits for its WAL flush, as in production) and off. Every op
// is one event; the thirteen ways take turns four times, every other time in
// reverse order, each turn reports events/s, and the parent prints each
// way's mean and its ratio to plain INSERTs.
//
//	go test ./store -run '^$' -bench ConcurrentPublish -benchtime 20000x
//
// The PostgreSQL `make test` starts runs with fsync=off, where a WAL flush
// costs nothing; for production figures measure on one with fsync on
// (HERALD_PG_DURABLE=1 scripts/pg.sh start DIR).
func BenchmarkConcurrentPublish(b *testing.B) {
	var s, roleStore *store.Store
	// Each way is compared with plain INSERTs of the same shape: inside a
	// transaction, or (own-tx, one statement) each its own transaction.
	const inTx, autocommit = "plain-insert", "plain-autocommit"
	var pub *publish.Publisher
	request := func(w int, i int64) publish.Request {
		return publish.Request{App: "contacts", Type: "contacts.person.updated", Version: 1,
			Subject: fmt.Sprintf("publisher-%d-%d", w, i), Data: []byte(`{"n":1}`)}
	}
	// row is the row the publisher writes for request(w, i): the ways
	// without it write rows of the same size (the CloudEvent envelope, the
	// content hash, how it came), so the comparison is of the same rows.
	row := func(w int, i int64) store.NewEvent {
		r := request(w, i)
		ev := envelopedEvent(r.App, r.Type, r.Version, r.Subject, r.Data)
		ev.Via = publish.ViaLibrary
		return ev
	}
	modes := []struct {
		name string
		// insert writes request(w, i)'s event; the ways without the
		// publisher build its row (row) themselves, so that PublishTx and
		// Publish, which build their own, do not pay for one too.
		insert func(ctx context.Context, w int, i int64) error
		base   string
	}{
		{"publish-tx", func(ctx context.Context, w int, i int64) error {
			evs := []store.NewEvent{row(w, i)}
			return s.WithTx(ctx, func(tx pgx.Tx) error { _, err := store.InsertEventsTx(ctx, tx, evs); return err })
		}, inTx},
		{"savepoint", func(ctx context.Context, w int, i int64) error {
			evs := []store.NewEvent{row(w, i)}
			return s.WithTx(ctx, func(tx pgx.Tx) error { _, err := store.InsertEventsTxUnderSavepoint(ctx, tx, evs); return err })
		}, inTx},
		{"savepoint-apart", func(ctx context.Context, w int, i int64) error {
			evs := []store.NewEvent{row(w, i)}
			return s.WithTx(ctx, func(tx pgx.Tx) error {
				sp, err := tx.Begin(ctx)
				if err != nil {
					return err
				}
				if _, err := store.InsertEventsTx(ctx, sp, evs); err != nil {
					return err
				}
				return sp.Commit(ctx)
			})
		}, inTx},
		{"role", func(ctx context.Context, w int, i int64) error {
			evs := []store.NewEvent{row(w, i)}
			return roleStore.WithTx(ctx, func(tx pgx.Tx) error { _, err := store.InsertPublisherEventsTx(ctx, tx, evs); return err })
		}, inTx},
		{"role-floor", func(ctx context.Context, w int, i int64) error {
			evs := []store.NewEvent{row(w, i)}
			return roleStore.WithTx(ctx, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `SELECT herald_bench_publish_floor($1, $2, $3, $4, $5, $6, $7)`,
					evs[0].ID, evs[0].Type, evs[0].Version, evs[0].Subject, store.KeyStripe(evs[0].Subject), evs[0].Envelope, evs[0].ContentHash)
				return err
			})
		}, inTx},
		{"role-apart", func(ctx context.Context, w int, i int64) error {
			evs := []store.NewEvent{row(w, i)}
			return roleStore.WithTx(ctx, func(tx pgx.Tx) error { _, err := store.InsertPublisherEventsTxApart(ctx, tx, evs); return err })
		}, inTx},
		{"own-tx", func(ctx context.Context, w int, i int64) error {
			evs := []store.NewEvent{row(w, i)}
			_, err := s.InsertEvents(ctx, evs)
			return err
		}, autocommit},
		{"PublishTx", func(ctx context.Context, w int, i int64) error {
			return s.WithTx(ctx, func(tx pgx.Tx) error { _, err := pub.PublishTx(ctx, tx, request(w, i)); return err })
		}, inTx},
		{"Publish", func(ctx context.Context, w int, i int64) error {
			_, err := pub.Publish(ctx, request(w, i))
			return err
		}, autocommit},
		{"two-statements", func(ctx context.Context, w int, i int64) error {
			evs := []store.NewEvent{row(w, i)}
			return s.WithTx(ctx, func(tx pgx.Tx) error { _, err := store.InsertEventsTxTwoStatements(ctx, tx, evs); return err })
		}, inTx},
		{"notify-in-tx", func(ctx context.Context, w int, i int64) error {
			evs := []store.NewEvent{row(w, i)}
			return s.WithTx(ctx, func(tx pgx.Tx) error { _, err := store.InsertEventsTxNotifying(ctx, tx, evs); return err })
		}, inTx},
		{inTx, func(ctx context.Context, w int, i int64) error {
			evs := []store.NewEvent{row(w, i)}
			return s.WithTx(ctx, func(tx pgx.Tx) error { return store.InsertEventRowsOnly(ctx, tx, evs) })
		}, inTx},
		{autocommit, func(ctx context.Context, w int, i int64) error {
			evs := []store.NewEvent{row(w, i)}
			return store.InsertEventRowsOnly(ctx, s.Pool, evs)
		}, autocommit},
	}
	turn := map[string]float64{} // each way's rate in each round
	// One schema per setting, both open throughout: the settings take turns
	// within each round too, so whatever one leaves behind (dead rows,
	// autovacuum, grown tables) falls on both alike. With each setting's
	// rounds in a row, the second (off) measured slower than the first in
	// every run, although with fsync off a commit waits for nothing.
	type setting struct {
		name    string
		s, role *store.Store
		pub     *publish.Publisher
	}
	ctx := context.Background()
	var settings []setting
	for _, syncCommit := range []string{"on", "off"} {
		u, err := url.Parse(testenv.NewSchema(b))
		if err != nil {
			b.Fatal(err)
		}
		q := u.Query()
		q.Set("synchronous_commit", syncCommit) // a run-time parameter of every connection
		u.RawQuery = q.Encode()
		st, role, roleURL := publishingSchema(ctx, b, u.String(), publishers)
		if _, err := st.Pool.Exec(ctx, roleFloor); err != nil {
			b.Fatal(err)
		}
		if _, err := st.Pool.Exec(ctx, `GRANT EXECUTE ON FUNCTION herald_bench_publish_floor(uuid, text, integer, text, integer, bytea, text) TO `+
			pgx.Identifier{role}.Sanitize()); err != nil {
			b.Fatal(err)
		}
		rs, err := store.Open(ctx, roleURL, store.Options{MaxConns: publishers})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(rs.Close)
		settings = append(settings, setting{name: syncCommit, s: st, role: rs, pub: publish.New(st, publish.Options{})})
	}
	// The modes take turns, rounds times, so that a change in the machine's
	// load falls on all of them alike; each reports its mean. Every other
	// round takes them in reverse order, so every way's mean place is the
	// same: a way's place in the turns moved its rate (2026-12-06: with
	// three rounds in one order, own-tx measured below Publish in all seven
	// runs; with the two swapped, above it in both runs and every round).
	// One place still costs: the first way on Herald's pool after the
	// role's ways, whose turns ran 14-25 % below its turns in the other
	// order (own-tx in forward rounds, savepoint-apart in reverse ones, at
	// 72ee774); alternating spreads that over two ways, it does not
	// remove it.
	for round := range rounds {
		order := slices.Clone(modes)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, set := range settings {
			s, roleStore, pub = set.s, set.role, set.pub
			for _, mode := range order {
				name := fmt.Sprintf("synchronous_commit=%s/%s", set.name, mode.name)
				b.Run(fmt.Sprintf("%s/round=%d", name, round), func(b *testing.B) {
					// Only the way's own pool keeps its connections (a
					// role's 64 and Herald's of both settings exceed the
					// test cluster's 200), opened before the clock starts.
					active := set.s
					if strings.HasPrefix(mode.name, "role") {
						active = set.role
					}
					for _, other := range settings {
						for _, st := range []*store.Store{other.s, other.role} {
							if st != active {
								st.Pool.Reset()
							}
						}
					}
					openConns(ctx, b, active)
					warm(ctx, b, func(w int, i int64) error { return mode.insert(ctx, w, -int64(round+1)*int64(publishers)-i) })
					var next atomic.Int64
					var wg sync.WaitGroup
					errs := make(chan error, publishers)
					b.ResetTimer()
					for w := range publishers {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for {
								i := next.Add(1)
								if i > int64(b.N) {
									return
								}
								if err := mode.insert(ctx, w, i); err != nil {
									errs <- err
									return
								}
							}
						}()
					}
					wg.Wait()
					b.StopTimer()
					select {
					case err := <-errs:
						b.Fatal(err)
					default:
					}
					rate := float64(b.N) / b.Elapsed().Seconds()
					b.ReportMetric(rate, "events/s")
					// b.Run calls this first with b.N = 1, then with
					// -benchtime's count: only the last call's rate stays.
					// (Until 2026-12-03 the one-event call's rate was added
					// in too, so each mean carried the mean one-event rate,
					// pulling every ratio toward the ratio of those.)
					turn[name+"/"+strconv.Itoa(round)] = rate
				})
			}
		}
	}
	rates := map[string]float64{} // each way's mean over the rounds it ran
	ran := map[string]int{}
	for name, rate := range turn {
		way := name[:strings.LastIndexByte(name, '/')]
		rates[way] += rate
		ran[way]++
	}
	for way := range rates {
		rates[way] /= float64(ran[way])
	}
	for _, syncCommit := range []string{"on", "off"} {
		prefix := "synchronous_commit=" + syncCommit + "/"
		line := fmt.Sprintf("%d publishers, synchronous_commit=%s, events/s (× plain INSERTs of the same shape):", publishers, syncCommit)
		for _, mode := range modes {
			r, plain := rates[prefix+mode.name], rates[prefix+mode.base]
			if plain == 0 || r == 0 {
				continue // not run (-bench narrowed it)
			}
			line += fmt.Sprintf(" %s %.0f (%.2f×)", mode.name, r, r/plain)
		}
		fmt.Println(line)
	}
}

// warmRounds is how many times warm has all publishers publish at once:
// enough that every connection of a pool has published (a pool hands out
// its idle connections newest first, so one round may leave a few out).
const warmRounds = 4

// warm has every publisher publish warmRounds times at once before a way's
// clock starts, so that its figure is the steady state of an app's pool of
// connections rather than of connections new to the way: the first publish
// of a connection prepares its statements (a publisher role's also asks
// whether it may run herald_publish_fast, and compiles the PL/pgSQL it
// calls). Until 2026-12-05 each way's turn ran on connections new to it,
// some 300 publishes each at -benchtime 20000x, and that first publish
// weighed on a publisher role's figure most (0.54× and 0.63× plain
// INSERTs cold, 0.72× and 0.80× warm, in turns at 7c08af5). The first
// publish of a new connection is BenchmarkFirstPublish's.
func warm(ctx context.Context, b *testing.B, publish func(w int, i int64) error) {
	b.Helper()
	for i := range warmRounds {
		var wg sync.WaitGroup
		errs := make(chan error, publishers)
		for w := range publishers {
			wg.Go(func() {
				if err := publish(w, int64(i)); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		select {
		case err := <-errs:
			b.Fatalf("warming the way's connections: %v", err)
		default:
		}
	}
}

// openConns opens publishers connections of st's pool at once, so that a
// way's timing does not include connecting.
func openConns(ctx context.Context, b *testing.B, st *store.Store) {
	b.Helper()
	conns := make([]*pgxpool.Conn, 0, publishers)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range publishers {
		c, err := st.Pool.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		conns = append(conns, c)
	}
}

// roleFloor creates the role-floor way's function: as herald_publish, a
// PL/pgSQL function running as the owner with its search_path pinned, that
// finds the session's app in publisher_roles; then only the key's stripe
// lock and the insert, in one statement, as one event's fast path in
// herald_publish (migration 0034) does once its checks pass.
const roleFloor = `
CREATE FUNCTION herald_bench_publish_floor(event_id uuid, event_type text, event_version integer, event_subject text,
                                           event_stripe integer, event_envelope bytea, event_hash text)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    got bigint;
BEGIN
    WITH me AS MATERIALIZED (
        SELECT p.app FROM publisher_roles p JOIN apps a ON a.id = p.app AND a.removed_at IS NULL
         WHERE p.role = session_user),
    locked AS MATERIALIZED (
        SELECT 1 FROM key_stripes k
         WHERE (SELECT count(*) FROM me) > 0
           AND k.type = event_type AND k.version = event_version AND k.stripe = event_stripe
           FOR NO KEY UPDATE)
    INSERT INTO events (id, source_app, type, version, subject, envelope, content_hash, state, published_via)
    SELECT event_id, me.app, event_type, event_version, event_subject, event_envelope, event_hash, 'accepted', 'library'
      FROM me, locked
    RETURNING seq INTO got;
    IF got IS NULL THEN
        RAISE EXCEPTION 'role-floor: nothing inserted';
    END IF;
    RETURN got;
END
$$;
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION herald_bench_publish_floor(uuid, text, integer, text, integer, bytea, text) SET search_path = %I, pg_temp',
                   current_schema());
END
$$;
REVOKE ALL ON FUNCTION herald_bench_publish_floor(uuid, text, integer, text, integer, bytea, text) FROM PUBLIC`
