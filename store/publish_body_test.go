package store_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"herald/internal/testenv"
	"herald/publish"
	"herald/store"
)

// TestPublisherFunctionsParseABodyOnce holds herald_publish and
// herald_publish_fast to one jsonb parse of each body (migration 0038):
// PostgreSQL pulls a subquery up into the query around it and writes its
// expression in at every use, so a body cast to jsonb in a subquery that
// is not fenced (OFFSET 0) is parsed once for every field read from it.
// A later migration that rewrites either function without the fence fails
// here.
func TestPublisherFunctionsParseABodyOnce(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, testenv.NewSchema(t), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	functions := []struct {
		fn     string
		fenced int
	}{
		{"herald_publish(uuid[], text[], integer[], text[], integer[], bytea[], text[], text[], text[], jsonb[])", 2},
		{"herald_publish_fast(uuid, text, integer, text, integer, bytea, text, jsonb)", 1},
	}
	// What 0038 must keep of each function: owner, SECURITY DEFINER,
	// settings (search_path), grants, language and result.
	attributes := func() []string {
		var out []string
		for _, f := range functions {
			var a string
			if err := st.Pool.QueryRow(ctx, `
				SELECT concat_ws(' | ', proowner::regrole::text, prosecdef::text, proconfig::text, proacl::text,
				                 prolang::text, prorettype::regtype::text, proretset::text, proargnames::text)
				  FROM pg_proc WHERE oid = $1::regprocedure`, f.fn).Scan(&a); err != nil {
				t.Fatal(err)
			}
			out = append(out, a)
		}
		return out
	}
	if _, err := st.MigrateTo(ctx, 37); err != nil {
		t.Fatal(err)
	}
	// A grant given before 0038, as store.GrantPublisher gives publisher
	// roles, must survive it.
	role, _ := newRuntimeRole(t, st)
	for _, f := range functions {
		if _, err := st.Pool.Exec(ctx, "GRANT EXECUTE ON FUNCTION "+f.fn+" TO "+pgx.Identifier{role}.Sanitize()); err != nil {
			t.Fatal(err)
		}
	}
	before := attributes()
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if after := attributes(); !slices.Equal(before, after) {
		t.Errorf("0038 changed the functions' attributes:\nbefore %q\nafter  %q", before, after)
	}
	for _, tc := range functions {
		var def string
		if err := st.Pool.QueryRow(ctx, `SELECT pg_get_functiondef($1::regprocedure)`, tc.fn).Scan(&def); err != nil {
			t.Fatal(err)
		}
		if got := strings.Count(def, "::jsonb AS j OFFSET 0)"); got != tc.fenced {
			t.Errorf("%s: %d fenced casts of a body, want %d", tc.fn, got, tc.fenced)
		}
		if n := strings.Count(def, "::jsonb AS j)"); n != 0 {
			t.Errorf("%s: %d casts of a body in a subquery PostgreSQL may pull up", tc.fn, n)
		}
	}
}

// BenchmarkPublisherRoleBody measures a publisher role's publish of bodies
// of 1 KB and 200 KB, one event a transaction (herald_publish_fast) and two
// (herald_publish), on one connection; it reports µs per event. Migration
// 0038 parses each body once instead of once for each of the six fields
// checked: measure it against the commit before to see the difference.
//
//	go test ./store -run '^$' -bench PublisherRoleBody -benchtime 200x
func BenchmarkPublisherRoleBody(b *testing.B) {
	ctx := context.Background()
	_, _, roleURL := publishingSchema(ctx, b, testenv.NewSchema(b), 2)
	rs, err := store.Open(ctx, roleURL, store.Options{MaxConns: 1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(rs.Close)
	n := 0
	for _, size := range []int{1 << 10, 200 << 10} {
		data := []byte(`{"s":"` + strings.Repeat("x", size) + `"}`)
		for _, perTx := range []int{1, 2} {
			b.Run(fmt.Sprintf("body=%dKB/events=%d", size>>10, perTx), func(b *testing.B) {
				publishTx := func() {
					evs := make([]store.NewEvent, perTx)
					for i := range evs {
						n++
						evs[i] = envelopedEvent("contacts", "contacts.person.updated", 1, fmt.Sprintf("body-%d", n), data)
						evs[i].Via = publish.ViaLibrary
					}
					if err := rs.WithTx(ctx, func(tx pgx.Tx) error {
						got, err := store.InsertPublisherEventsTx(ctx, tx, evs)
						if err == nil && len(got) != perTx {
							err = fmt.Errorf("%d of %d events published", len(got), perTx)
						}
						return err
					}); err != nil {
						b.Fatal(err)
					}
				}
				publishTx() // the connection's first publish prepares its statements
				b.ResetTimer()
				for range b.N {
					publishTx()
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*perTx), "µs/event")
			})
		}
	}
}
