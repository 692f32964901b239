package store_test

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"herald/internal/testenv"
	"herald/store"
)

// publishers is how many publishers commit at once in
// BenchmarkConcurrentPublish (issue 29's figure).
const publishers = 64

// BenchmarkConcurrentPublish measures 64 publishers at once, each
// committing transactions of one event with a key of its own, three ways on
// the same schema one after the other: as Herald publishes (ordering-key
// stripe locks, the INSERT, pg_notify to wake the relay), the same without
// pg_notify, and plain INSERTs of the same rows (neither locks nor notify).
// PostgreSQL serialises the commits of notifying transactions through one
// lock, so the first against the second is what notifying costs; each
// against the third is publishing against the floor of writing the rows.
// It runs with synchronous_commit on (each commit waits for its WAL flush,
// as in production) and off. Every op is one event; each case reports
// events/s, and the parent prints the ratios of the run.
//
//	go test ./store -run '^$' -bench ConcurrentPublish -benchtime 3000x
//
// The PostgreSQL `make test` starts runs with fsync=off, where a WAL flush
// costs nothing; measure on a server with fsync on for production figures.
func BenchmarkConcurrentPublish(b *testing.B) {
	modes := []struct {
		name   string
		insert func(context.Context, pgx.Tx, []store.NewEvent) error
	}{
		{"herald", func(ctx context.Context, tx pgx.Tx, evs []store.NewEvent) error {
			_, err := store.InsertEventsTx(ctx, tx, evs)
			return err
		}},
		{"no-notify", func(ctx context.Context, tx pgx.Tx, evs []store.NewEvent) error {
			_, err := store.InsertEventsTxWithoutNotify(ctx, tx, evs)
			return err
		}},
		{"plain-insert", store.InsertEventRowsOnly},
	}
	rates := map[string]float64{}
	for _, syncCommit := range []string{"on", "off"} {
		schemaURL := testenv.NewSchema(b)
		u, err := url.Parse(schemaURL)
		if err != nil {
			b.Fatal(err)
		}
		q := u.Query()
		q.Set("synchronous_commit", syncCommit) // a run-time parameter of every connection
		u.RawQuery = q.Encode()
		ctx := context.Background()
		s, err := store.Open(ctx, u.String(), store.Options{MaxConns: publishers})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Migrate(ctx); err != nil {
			b.Fatal(err)
		}
		if _, err := s.ApplyManifest(ctx, contactsManifest(decl("person.updated", 1)), "bench"); err != nil {
			b.Fatal(err)
		}
		for _, mode := range modes {
			name := fmt.Sprintf("synchronous_commit=%s/%s", syncCommit, mode.name)
			b.Run(name, func(b *testing.B) {
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
							ev := newEvent("contacts.person.updated", fmt.Sprintf("%s-%d-%d", mode.name, w, i), "h")
							err := s.WithTx(ctx, func(tx pgx.Tx) error { return mode.insert(ctx, tx, []store.NewEvent{ev}) })
							if err != nil {
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
				rates[name] = rate
			})
		}
		s.Close()
	}
	for _, syncCommit := range []string{"on", "off"} {
		prefix := "synchronous_commit=" + syncCommit + "/"
		herald, quiet, plain := rates[prefix+"herald"], rates[prefix+"no-notify"], rates[prefix+"plain-insert"]
		if herald == 0 || quiet == 0 || plain == 0 {
			continue
		}
		fmt.Printf("%d publishers, synchronous_commit=%s: herald %.0f events/s, without pg_notify %.0f (herald %.2f× of it), plain INSERTs %.0f (herald %.2f×, without pg_notify %.2f×)\n",
			publishers, syncCommit, herald, quiet, herald/quiet, plain, herald/plain, quiet/plain)
	}
}
