package main

import (
	"bytes"
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"herald/internal/testenv"
	"herald/store"
	"herald/workflows"
)

// TestEndRunsLeavesWhatIsOwed: the bench ends no run of a measurement that
// lost an event, and PostgreSQL's unsettled outcome rows (queued, failed)
// name the keys whose runs it must leave.
func TestEndRunsLeavesWhatIsOwed(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := store.Open(ctx, testenv.NewSchema(t), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	rows := []struct{ sub, subject, status string }{
		{"s1", "k1", store.EventQueued},
		{"s2", "k1", store.EventDelivered},
		{"s1", "k2", store.EventFailed},
		{"s1", "k3", store.EventDelivered},
		{"s2", "k3", store.EventFiltered},
		{"s1", "other", store.EventQueued}, // not the measurement's key
	}
	for i, r := range rows {
		if _, err := st.Pool.Exec(ctx, `INSERT INTO outcomes (subscription_id, event_id, event_seq, subject, status)
			VALUES ($1, $2, $3, $4, $5)`, r.sub, uuid.New(), i+1, r.subject, r.status); err != nil {
			t.Fatal(err)
		}
	}
	var progress bytes.Buffer
	b := &bench{cfg: Config{Progress: &progress}, store: st}
	ph := &phase{shape: Shape{Name: "C"}, system: SystemHerald, keys: []string{"k1", "k2", "k3"}, subs: []string{"s1", "s2"}}
	ids, owing, err := b.runsToEnd(ctx, ph)
	if err != nil {
		t.Fatal(err)
	}
	// s1's k1 (queued) and k2 (failed) owe events; the other four pairs do not.
	want := []string{workflows.DeliveryID("s2", "k1"), workflows.DeliveryID("s2", "k2"),
		workflows.DeliveryID("s1", "k3"), workflows.DeliveryID("s2", "k3")}
	if owing != 2 || !reflect.DeepEqual(ids, want) {
		t.Errorf("runs to end %v, %d owing; want %v, 2 owing", ids, owing, want)
	}

	// A measurement that lost a delivery: nothing is ended (the bench has
	// no Temporal client here, so any attempt would fail the test).
	m := Measurement{Lost: 1}
	b.endRuns(ctx, ph, &m)
	if m.RunsEnded != 0 || m.RunsLeft != 6 || !strings.Contains(progress.String(), "1 deliveries lost") {
		t.Errorf("a lossy measurement: ended %d, left %d, want 0 and 6; progress %q", m.RunsEnded, m.RunsLeft, progress.String())
	}
}
