package store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"herald/internal/testenv"
	"herald/store"
)

// BenchmarkFirstPublish measures the first two publishes of a new
// connection, one connection at a time: two transactions that each write
// one event and commit, on a connection opened for them (connecting is not
// timed), three ways:
//
//   - role: a publisher role (InsertPublisherEventsTx), whose first publish
//     prepares its statements and asks whether it may run
//     herald_publish_fast;
//   - herald: Herald's own role (InsertEventsTx);
//   - plain-insert: the same row's INSERT.
//
// The first publish prepares what later ones run, and a publisher role's
// first call of each PL/pgSQL function compiles it and plans its
// statements (herald_publish_fast's about 15 ms on this machine); the
// second shows whether the first left anything to the next.
// BenchmarkConcurrentPublish measures connections that have published
// before (the steady state of a pool); this is what each new connection
// adds to it once.
//
//	go test ./store -run '^$' -bench FirstPublish -benchtime 200x
func BenchmarkFirstPublish(b *testing.B) {
	ctx := context.Background()
	url := testenv.NewSchema(b)
	_, _, roleURL := publishingSchema(ctx, b, url, 2)
	ways := []struct {
		name, url string
		publish   func(tx pgx.Tx, ev store.NewEvent) error
	}{
		{"role", roleURL, func(tx pgx.Tx, ev store.NewEvent) error {
			_, err := store.InsertPublisherEventsTx(ctx, tx, []store.NewEvent{ev})
			return err
		}},
		{"herald", url, func(tx pgx.Tx, ev store.NewEvent) error {
			_, err := store.InsertEventsTx(ctx, tx, []store.NewEvent{ev})
			return err
		}},
		{"plain-insert", url, func(tx pgx.Tx, ev store.NewEvent) error {
			return store.InsertEventRowsOnly(ctx, tx, []store.NewEvent{ev})
		}},
	}
	for _, way := range ways {
		b.Run(way.name, func(b *testing.B) {
			for i := range b.N {
				b.StopTimer()
				conn, err := pgx.Connect(ctx, way.url)
				if err != nil {
					b.Fatal(err)
				}
				evs := []store.NewEvent{
					envelopedEvent("contacts", "contacts.person.updated", 1, fmt.Sprintf("first-%s-%d", way.name, i), []byte(`{"n":1}`)),
					envelopedEvent("contacts", "contacts.person.updated", 1, fmt.Sprintf("second-%s-%d", way.name, i), []byte(`{"n":1}`)),
				}
				b.StartTimer()
				for _, ev := range evs {
					if err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error { return way.publish(tx, ev) }); err != nil {
						break
					}
				}
				b.StopTimer()
				_ = conn.Close(ctx)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}
