package system

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"herald/internal/testenv"
	"herald/store"
	"herald/workflows"
)

// ExplainOnFailure logs, if the test has failed by the time the caller
// returns, where a subject key's events stand for the fixture's two
// subscribers: the log's rows, their outcome rows, the relay's partition
// lease and the key workflows' histories, each with its times. A test that
// waits for deliveries defers it, so a timeout says whether the relay
// dispatched late or the key's workflow waited in Temporal:
//
//	defer s.ExplainOnFailure("during")
//
// It reads through connections of its own, so a stopped or crashed worker
// does not hide what it explains.
func (s *System) ExplainOnFailure(subject string) {
	s.t.Helper()
	if !s.t.Failed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s.t.Logf("where the events of key %q stand (now %s):\n%s", subject, stamp(time.Now()), s.explain(ctx, subject))
}

// explain describes what ExplainOnFailure logs; a part it cannot read says
// why in its place.
func (s *System) explain(ctx context.Context, subject string) string {
	var b strings.Builder
	conn, err := pgx.Connect(ctx, s.Cfg.DatabaseURL) // the URL names the test's schema
	if err != nil {
		fmt.Fprintf(&b, "database: %v\n", err)
	} else {
		defer func() { _ = conn.Close(context.Background()) }()
		explainRows(ctx, &b, conn, subject)
	}
	c, err := client.Dial(client.Options{HostPort: s.Cfg.TemporalAddress, Namespace: s.Cfg.TemporalNamespace,
		Logger: testenv.QuietLogger{}})
	if err != nil {
		fmt.Fprintf(&b, "temporal: %v\n", err)
		return b.String()
	}
	defer c.Close()
	for _, sub := range []string{BillingSub, AuditLogSub} {
		id := workflows.DeliveryID(sub, subject)
		fmt.Fprintf(&b, "workflow %s, latest run:\n", id)
		it := c.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			e, err := it.Next()
			if err != nil {
				fmt.Fprintf(&b, "  history: %v\n", err)
				break
			}
			fmt.Fprintf(&b, "  %d %s %s\n", e.GetEventId(), stamp(e.GetEventTime().AsTime()), e.GetEventType())
		}
	}
	return b.String()
}

// explainRows writes the key's event and outcome rows and its partition's
// lease.
func explainRows(ctx context.Context, b *strings.Builder, conn *pgx.Conn, subject string) {
	// Each part is one query whose rows are written as they come.
	part := func(title, sql string, dest []any, line func() string) {
		rows, err := conn.Query(ctx, sql, subject)
		if err == nil {
			b.WriteString(title + ":\n")
			_, err = pgx.ForEachRow(rows, dest, func() error {
				b.WriteString("  " + line() + "\n")
				return nil
			})
		}
		if err != nil {
			fmt.Fprintf(b, "%s: %v\n", title, err)
		}
	}
	var seq int64
	var state, sub, code string
	var attempts int
	var at, at2 time.Time
	var maybe *time.Time
	part("events (seq state received dispatched)",
		`SELECT seq, state, received_at, dispatched_at FROM events WHERE subject = $1 ORDER BY seq`,
		[]any{&seq, &state, &at, &maybe},
		func() string { return fmt.Sprintf("%d %s %s %s", seq, state, stamp(at), stampOrNone(maybe)) })
	part("outcomes (subscription seq status attempts queued updated delivered last-code)", `
		SELECT subscription_id, event_seq, status, attempts, queued_at, updated_at, delivered_at, COALESCE(last_code, '')
		  FROM outcomes WHERE subject = $1 ORDER BY subscription_id, event_seq`,
		[]any{&sub, &seq, &state, &attempts, &at, &at2, &maybe, &code},
		func() string {
			return fmt.Sprintf("%s %d %s %d %s %s %s %s", sub, seq, state, attempts, stamp(at), stamp(at2), stampOrNone(maybe), code)
		})
	// A lease given back or never taken expires at -infinity: no time.
	part("relay partition of the key (partition holder lease-until)", `
		SELECT partition, COALESCE(holder, ''), NULLIF(expires_at, '-infinity') FROM relay_partitions
		 WHERE partition = `+store.SubjectPartitionSQL,
		[]any{&seq, &sub, &maybe},
		func() string { return fmt.Sprintf("%d %q %s", seq, sub, stampOrNone(maybe)) })
}

func stamp(t time.Time) string { return t.UTC().Format("15:04:05.000") }

func stampOrNone(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return stamp(*t)
}
