package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"

	"herald/store"
)

// purgeStore deletes what it is told to per batch and keeps the audit rows
// by once key, as the store does.
type purgeStore struct {
	Store
	batches []store.PurgeCounts
	cutoffs []time.Time
	limits  []int
	audit   map[string]store.AuditEntry
	info    activity.Info
}

func (s *purgeStore) PurgeEvents(ctx context.Context, cutoff time.Time, limit int) (store.PurgeCounts, error) {
	s.cutoffs, s.limits = append(s.cutoffs, cutoff), append(s.limits, limit)
	s.info = activity.GetInfo(ctx)
	if len(s.batches) == 0 {
		return store.PurgeCounts{}, nil
	}
	n := s.batches[0]
	s.batches = s.batches[1:]
	return n, nil
}

func (s *purgeStore) Audit(_ context.Context, e store.AuditEntry) error {
	if _, ok := s.audit[e.OnceKey]; ok {
		return fmt.Errorf("once key %s written twice", e.OnceKey)
	}
	s.audit[e.OnceKey] = e
	return nil
}

func (s *purgeStore) AuditByOnceKey(_ context.Context, key string) (store.AuditRow, error) {
	e, ok := s.audit[key]
	if !ok {
		return store.AuditRow{}, store.ErrNotFound
	}
	b, err := json.Marshal(e.Metadata)
	return store.AuditRow{Action: e.Action, TargetType: e.TargetType, TargetID: e.TargetID, Metadata: b}, err
}

func purge(t *testing.T, a *Activities, in PurgeInput) PurgeResult {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.RegisterActivity(a)
	v, err := env.ExecuteActivity(a.PurgeEvents, in)
	if err != nil {
		t.Fatal(err)
	}
	var res PurgeResult
	if err := v.Get(&res); err != nil {
		t.Fatal(err)
	}
	return res
}

// TestPurgeEventsHoldsCutoffToWorkerRetention: a cutoff later than now
// minus the worker's retention (keep = 1ns in the workflow's input) is held
// to it, and said so in the one audit row; an earlier one (a longer keep)
// is applied as asked. The row carries the counts of events and outcomes.
func TestPurgeEventsHoldsCutoffToWorkerRetention(t *testing.T) {
	t.Parallel()
	const retention = 48 * time.Hour
	tests := []struct {
		name    string
		cutoff  time.Duration // before now
		clamped bool
	}{
		{"keep 1ns", time.Nanosecond, true},
		{"keep in the future", -time.Hour, true},
		{"keep longer", 100 * time.Hour, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := &purgeStore{audit: map[string]store.AuditEntry{},
				batches: []store.PurgeCounts{{Events: 3, Outcomes: 1}, {Events: 2}}}
			a := &Activities{Store: st, Retention: retention}
			requested := time.Now().Add(-tt.cutoff)
			res := purge(t, a, PurgeInput{Cutoff: requested, BatchSize: 3})
			if len(st.cutoffs) != 2 || st.limits[0] != 3 {
				t.Fatalf("batches %v of %v, want 2 of 3", st.cutoffs, st.limits)
			}
			applied := st.cutoffs[0]
			if applied.After(time.Now().Add(-retention)) {
				t.Fatalf("applied cutoff %s is newer than now - %s", applied, retention)
			}
			if tt.clamped == applied.Equal(requested) || res.Clamped != tt.clamped ||
				!res.Cutoff.Equal(applied) || !res.CutoffRequested.Equal(requested) {
				t.Fatalf("requested %s, applied %s, result %+v; want clamped %v", requested, applied, res, tt.clamped)
			}
			if res.Events != 5 || res.Outcomes != 1 || res.Deleted != 6 || res.Batches != 2 {
				t.Fatalf("result %+v, want 5 events, 1 outcome in 2 batches", res)
			}
			if len(st.audit) != 1 {
				t.Fatalf("audit rows %+v, want 1", st.audit)
			}
			want := fmt.Sprintf("retention:%s/%s", st.info.WorkflowExecution.RunID, st.info.ActivityID)
			e, ok := st.audit[want]
			if !ok || e.Action != store.ActionRetentionPurged || e.TargetType != store.TargetRetention ||
				e.TargetID != st.info.WorkflowExecution.ID || e.Actor != store.ActorSystem ||
				e.Metadata["events"] != float64(5) || e.Metadata["outcomes"] != float64(1) ||
				e.Metadata["clamped"] != tt.clamped || e.Metadata["retention"] != "48h0m0s" {
				t.Fatalf("audit rows %+v, want one under %s with the counts", st.audit, want)
			}
		})
	}
}

// TestPurgeEventsDefaultsAndBounds: a worker without a retention setting
// holds cutoffs to DefaultRetention; a batch size beyond MaxPurgeBatch is
// capped; a run that deletes nothing still writes its row.
func TestPurgeEventsDefaultsAndBounds(t *testing.T) {
	t.Parallel()
	st := &purgeStore{audit: map[string]store.AuditEntry{}}
	res := purge(t, &Activities{Store: st}, PurgeInput{Cutoff: time.Now(), BatchSize: 1 << 30})
	if st.cutoffs[0].After(time.Now().Add(-DefaultRetention)) || st.limits[0] != MaxPurgeBatch {
		t.Fatalf("cutoff %s, batch %d", st.cutoffs[0], st.limits[0])
	}
	if res.Deleted != 0 || len(st.audit) != 1 {
		t.Fatalf("result %+v, audit %+v: want nothing deleted and one row", res, st.audit)
	}
}

// TestPurgeEventsRetryWritesNoSecondRow: an attempt that finds the row of
// its scheduled activity (an earlier attempt wrote it and died before
// Temporal heard) deletes nothing and answers what the row recorded.
func TestPurgeEventsRetryWritesNoSecondRow(t *testing.T) {
	t.Parallel()
	st := &purgeStore{audit: map[string]store.AuditEntry{}}
	a := &Activities{Store: st, Retention: time.Hour}
	// Each fresh test environment gives its first activity the same run
	// and activity id, as Temporal gives the attempts of one activity.
	st.batches = []store.PurgeCounts{{Events: 4, Outcomes: 7}}
	first := purge(t, a, PurgeInput{Cutoff: time.Now()})
	st.batches = []store.PurgeCounts{{Events: 100}}
	res := purge(t, a, PurgeInput{Cutoff: time.Now()})
	if len(st.cutoffs) != 1 || len(st.audit) != 1 {
		t.Fatalf("second attempt: %d purges, %d rows; want 1 and 1", len(st.cutoffs), len(st.audit))
	}
	if res.Events != 4 || res.Outcomes != 7 || !res.Clamped || !res.Cutoff.Equal(first.Cutoff) {
		t.Fatalf("second attempt answered %+v, want the first's %+v", res, first)
	}
}
