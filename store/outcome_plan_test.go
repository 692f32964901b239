package store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"herald/store"
)

// TestOutcomeWriteFindsEventsByID: a write of outcome updates finds each
// event by id (events_app_id), also when the statistics have the log
// small (a new database, a burst autovacuum has not analysed yet), where
// the join it had read all of it for several updates (1,000 events: a
// sequential scan for 7).
func TestOutcomeWriteFindsEventsByID(t *testing.T) {
	t.Parallel()
	s, _ := openEventsStore(t)
	ctx := context.Background()
	if _, err := s.Pool.Exec(ctx, `
		INSERT INTO events (id, source_app, type, version, subject, envelope, content_hash, state)
		SELECT gen_random_uuid(), 'contacts', 'contacts.person.updated', 1, 'key-' || (g % 20), '{}', 'h', 'dispatched'
		  FROM generate_series(1, 1000) AS g`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool.Exec(ctx, `ANALYZE events`); err != nil {
		t.Fatal(err)
	}
	var ids []string
	rows, err := s.Pool.Query(ctx, `SELECT id::text FROM events WHERE subject = 'key-1' ORDER BY seq LIMIT 7`)
	if err != nil {
		t.Fatal(err)
	}
	if ids, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	texts := func(v string) []string {
		out := make([]string, len(ids))
		for i := range out {
			out[i] = v
		}
		return out
	}
	many := []any{"sub", "key-1", ids, texts("delivered"), make([]int32, len(ids)), texts(""), texts(""), texts(""), texts("")}
	one := []any{"sub", "key-1", ids[0], "delivered", int32(0), "", "", "", ""}
	for _, c := range []struct {
		name string
		sql  string
		args []any
	}{{"several updates", store.OutcomeWriteMany, many}, {"one update", store.OutcomeWriteOne, one}} {
		var plan []struct{ Plan planNode }
		if err := s.Pool.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+c.sql, c.args...).Scan(&plan); err != nil {
			t.Fatal(err)
		}
		if len(plan) != 1 {
			t.Fatalf("%s: plan %+v", c.name, plan)
		}
		var events []string
		plan[0].Plan.walk(func(n planNode) {
			if n.Relation == "events" {
				events = append(events, fmt.Sprintf("%s (%s)", n.Type, n.Index))
			}
		})
		if len(events) != 1 || events[0] != "Index Scan (events_app_id)" {
			t.Errorf("%s: the write reads the log by %v, want one index scan of events_app_id", c.name, events)
		}
	}
}

// planNode is a node of EXPLAIN (FORMAT JSON)'s plan.
type planNode struct {
	Type     string     `json:"Node Type"`
	Relation string     `json:"Relation Name"`
	Index    string     `json:"Index Name"`
	Plans    []planNode `json:"Plans"`
}

func (n planNode) walk(fn func(planNode)) {
	fn(n)
	for _, c := range n.Plans {
		c.walk(fn)
	}
}
