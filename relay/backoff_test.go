package relay_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"herald/relay"
	"herald/store"
	"herald/workflows"
)

// dueNow makes every event that backs off due, as if its wait were over.
func dueNow(t *testing.T, st *store.Store) {
	t.Helper()
	if _, err := st.Pool.Exec(context.Background(),
		`UPDATE events SET relay_next_try = now() - interval '1 millisecond' WHERE relay_next_try IS NOT NULL`); err != nil {
		t.Fatal(err)
	}
}

// relayState reads the relay's back-off columns of the event with seq.
func relayState(t *testing.T, st *store.Store, seq int64) store.StoredEvent {
	t.Helper()
	ev, err := st.GetEvent(context.Background(), eventIDOfSeq(t, st, seq))
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// dbNow is PostgreSQL's clock, which sets the next tries.
func dbNow(t *testing.T, st *store.Store) time.Time {
	t.Helper()
	var now time.Time
	if err := st.Pool.QueryRow(context.Background(), `SELECT now()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}

// TestFailingKeyDoesNotStarveOthers: a key with more failing events than a
// round reads must not keep every other key's events from being
// dispatched. Before per-event back-off, every round read the same 1,000
// failing events and nothing else was ever dispatched.
func TestFailingKeyDoesNotStarveOthers(t *testing.T) {
	t.Parallel()
	st, p := setup(t)
	ctx := context.Background()
	publishN(t, p, "contacts.person.updated", "bad", 1100) // seq 1-1100
	publishN(t, p, "contacts.person.updated", "good", 3)   // seq 1101-1103
	publishN(t, p, "contacts.person.deleted", "other", 2)  // seq 1104-1105
	tmp := &fakeTemporal{refuse: func(id string) bool { return strings.HasSuffix(id, ":bad") }}
	r := &relay.Relay{Store: st, Temporal: tmp, BatchSize: 1000}
	for i := 0; i < 2; i++ {
		if _, err := r.DispatchOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	got := tmp.bySeq()
	for id, want := range map[string]string{
		workflows.DeliveryID("billing:contacts.person.updated@1", "good"): "[1101 1102 1103]",
		workflows.DeliveryID("crm:contacts.person.updated@1", "good"):     "[1101 1102 1103]",
		workflows.DeliveryID("crm:contacts.person.deleted@1", "other"):    "[1104 1105]",
	} {
		if fmt.Sprint(got[id]) != want {
			t.Fatalf("after two rounds %s got %v, want %s: a failing key starves the others", id, got[id], want)
		}
	}
	lag, err := st.RelayLag(ctx)
	if err != nil || lag.Undispatched != 1100 {
		t.Fatalf("lag %+v %v: the failing key's 1,100 events must wait", lag, err)
	}
}

// TestBackoffTiming: a failed signal counts an attempt on each event of the
// key from the failed one on, keeps the error and sets the next try to
// now + min(2^attempts s, 5 min); the key's events are not read before it.
func TestBackoffTiming(t *testing.T) {
	t.Parallel()
	st, p := setup(t)
	ctx := context.Background()
	publishN(t, p, "contacts.person.updated", "bad", 2) // seq 1-2
	publishN(t, p, "contacts.person.updated", "ok", 1)  // seq 3
	bad := workflows.DeliveryID("crm:contacts.person.updated@1", "bad")
	tmp := &fakeTemporal{refuse: func(id string) bool { return id == bad }}
	r := &relay.Relay{Store: st, Temporal: tmp, MaxAttempts: 20}
	before := dbNow(t, st)
	round, err := r.DispatchOnce(ctx)
	if err != nil || round.Failed != 1 || round.BackingOff != 2 || round.Dispatched != 1 {
		t.Fatalf("round %+v %v", round, err)
	}
	for _, seq := range []int64{1, 2} {
		ev := relayState(t, st, seq)
		if ev.State != "accepted" || ev.RelayAttempts != 1 || !strings.Contains(ev.RelayError, "signal "+bad+": refused") ||
			ev.RelayNextTry == nil || ev.RelayDeadAt != nil {
			t.Fatalf("event %d after one failed signal: %+v", seq, ev)
		}
		if wait := ev.RelayNextTry.Sub(before); wait < 2*time.Second || wait > 3*time.Second {
			t.Fatalf("event %d waits %v after its first failure, want 2 s", seq, wait)
		}
	}
	if round, err := r.DispatchOnce(ctx); err != nil || round.Events != 0 {
		t.Fatalf("a round during the back-off read %+v %v", round, err)
	}

	// The second failure waits 4 s; the ninth and later wait 5 min.
	publishN(t, p, "contacts.person.updated", "ok", 1)
	dueNow(t, st)
	before = dbNow(t, st)
	if _, err := r.DispatchOnce(ctx); err != nil {
		t.Fatal(err)
	}
	ev := relayState(t, st, 1)
	if wait := ev.RelayNextTry.Sub(before); ev.RelayAttempts != 2 || wait < 4*time.Second || wait > 5*time.Second {
		t.Fatalf("after the second failure: attempts %d, waits %v; want 2, 4 s", ev.RelayAttempts, wait)
	}
	if _, err := st.Pool.Exec(ctx, `UPDATE events SET relay_attempts = 8 WHERE seq = 1`); err != nil {
		t.Fatal(err)
	}
	publishN(t, p, "contacts.person.updated", "ok", 1)
	dueNow(t, st)
	before = dbNow(t, st)
	if _, err := r.DispatchOnce(ctx); err != nil {
		t.Fatal(err)
	}
	ev = relayState(t, st, 1)
	if wait := ev.RelayNextTry.Sub(before); ev.RelayAttempts != 9 || wait < 5*time.Minute || wait > 5*time.Minute+time.Second {
		t.Fatalf("after the ninth failure: attempts %d, waits %v; want 9, 5 min", ev.RelayAttempts, wait)
	}
	// The signal goes through at last: dispatched, the attempts kept.
	tmp.refuse = nil
	dueNow(t, st)
	if round, err := r.DispatchOnce(ctx); err != nil || round.Dispatched != 2 {
		t.Fatalf("round after recovery %+v %v", round, err)
	}
	if ev := relayState(t, st, 1); ev.State != "dispatched" || ev.RelayAttempts != 9 {
		t.Fatalf("recovered event %+v", ev)
	}
}

// TestOutageCountsNoAttempt: a signal Temporal refuses because it is down
// or shedding load (Unavailable, a deadline, a rate limit) counts no
// attempt in a round where Temporal accepted no signal at all, so an
// outage never makes events dead; the events still wait. A refusal of the
// key itself (here a plain error, or a busy workflow) counts even then, and
// an outage error counts in a round where other signals went through.
func TestOutageCountsNoAttempt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		err     error
		counted bool
	}{
		{"unavailable", serviceerror.NewUnavailable("connection refused"), false},
		{"deadline", serviceerror.NewDeadlineExceeded("context deadline exceeded"), false},
		{"rps limit", serviceerror.NewResourceExhausted(enumspb.RESOURCE_EXHAUSTED_CAUSE_RPS_LIMIT, "namespace rate limit"), false},
		{"busy workflow", serviceerror.NewResourceExhausted(enumspb.RESOURCE_EXHAUSTED_CAUSE_BUSY_WORKFLOW, "workflow is busy"), true},
		{"invalid argument", serviceerror.NewInvalidArgument("search attribute too long"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st, p := setup(t)
			ctx := context.Background()
			publishN(t, p, "contacts.person.updated", "p1", 2)
			tmp := &fakeTemporal{refuse: func(string) bool { return true }, refuseWith: tc.err}
			r := &relay.Relay{Store: st, Temporal: tmp, MaxAttempts: 5}
			for i := 0; i < 3; i++ {
				dueNow(t, st)
				if round, err := r.DispatchOnce(ctx); err != nil || round.Signals != 0 || round.BackingOff != 2 {
					t.Fatalf("round %d %+v %v", i, round, err)
				}
			}
			want := 0
			if tc.counted {
				want = 3
			}
			ev := relayState(t, st, 1)
			if ev.RelayAttempts != want || !strings.Contains(ev.RelayError, tc.err.Error()) || ev.RelayNextTry == nil {
				t.Fatalf("after 3 rounds refused with %v: %+v; want %d attempts", tc.err, ev, want)
			}
			// The same error counts once another key's signal goes through.
			tmp.refuse = func(id string) bool { return strings.HasSuffix(id, ":p1") }
			publishN(t, p, "contacts.person.updated", "p2", 1)
			dueNow(t, st)
			if _, err := r.DispatchOnce(ctx); err != nil {
				t.Fatal(err)
			}
			if ev := relayState(t, st, 1); ev.RelayAttempts != want+1 {
				t.Fatalf("attempts %d after a round with other signals accepted, want %d", ev.RelayAttempts, want+1)
			}
		})
	}
}

// TestDeadAfterMaxAttempts: the last allowed failed signal makes the event
// dead (relay_failed), with one log line; it holds its key until an
// operator retries it, and the lag counts it apart.
func TestDeadAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	st, p := setup(t)
	ctx := context.Background()
	publishN(t, p, "contacts.person.updated", "bad", 1) // seq 1
	bad := workflows.DeliveryID("crm:contacts.person.updated@1", "bad")
	tmp := &fakeTemporal{refuse: func(id string) bool { return id == bad }}
	core, logs := observer.New(zap.ErrorLevel)
	r := &relay.Relay{Store: st, Temporal: tmp, MaxAttempts: 3, Logger: zap.New(core)}
	var dead int
	for i := 0; i < 3; i++ {
		publishN(t, p, "contacts.person.updated", "ok", 1) // a signal that goes through
		dueNow(t, st)
		round, err := r.DispatchOnce(ctx)
		if err != nil || round.Failed != 1 {
			t.Fatalf("round %d %+v %v", i, round, err)
		}
		dead += round.Dead
	}
	ev := relayState(t, st, 1)
	if dead != 1 || ev.State != "accepted" || ev.RelayAttempts != 3 || ev.RelayDeadAt == nil || ev.RelayNextTry != nil {
		t.Fatalf("after 3 failed signals: %d dead, event %+v", dead, ev)
	}
	lines := logs.FilterMessageSnippet("gave up").All()
	if len(lines) != 1 || lines[0].ContextMap()["code"] != store.CodeRelayFailed ||
		lines[0].ContextMap()["event"] != ev.ID || lines[0].ContextMap()["attempts"] != int64(3) {
		t.Fatalf("log lines %+v", lines)
	}
	lag, err := st.RelayLag(ctx)
	if err != nil || lag.Dead != 1 || lag.Undispatched != 0 {
		t.Fatalf("lag %+v %v", lag, err)
	}

	// Dead holds the key even once Temporal would accept it.
	tmp.refuse = nil
	publishN(t, p, "contacts.person.updated", "bad", 1) // seq 5
	dueNow(t, st)
	if round, err := r.DispatchOnce(ctx); err != nil || round.Events != 0 {
		t.Fatalf("round with a dead key %+v %v", round, err)
	}
	res, err := st.RetryRelay(ctx, ev.ID, "ops", "fixed")
	if err != nil || res.Released != 1 || res.Attempts != 3 {
		t.Fatalf("retry relay %+v %v", res, err)
	}
	if round, err := r.DispatchOnce(ctx); err != nil || round.Dispatched != 2 {
		t.Fatalf("round after retry %+v %v", round, err)
	}
	if got := fmt.Sprint(tmp.bySeq()[bad]); got != "[1 5]" {
		t.Fatalf("the retried key got %s", got)
	}
}

// TestBackoffKeepsKeyOrder: an event of a key never goes before an earlier
// one of the same type and subject that backs off, even when its own
// signal would go through; other types of the same subject go on.
func TestBackoffKeepsKeyOrder(t *testing.T) {
	t.Parallel()
	st, p := setup(t)
	ctx := context.Background()
	publishN(t, p, "contacts.person.updated", "p1", 1) // seq 1
	crm := workflows.DeliveryID("crm:contacts.person.updated@1", "p1")
	billing := workflows.DeliveryID("billing:contacts.person.updated@1", "p1")
	down := true
	tmp := &fakeTemporal{refuse: func(id string) bool { return down && id == crm }}
	r := &relay.Relay{Store: st, Temporal: tmp}
	if _, err := r.DispatchOnce(ctx); err != nil {
		t.Fatal(err)
	}
	down = false
	publishN(t, p, "contacts.person.updated", "p1", 2) // seq 2-3
	publishN(t, p, "contacts.person.deleted", "p1", 1) // seq 4, another key
	round, err := r.DispatchOnce(ctx)
	if err != nil || round.Dispatched != 1 {
		t.Fatalf("round during the back-off %+v %v", round, err)
	}
	got := tmp.bySeq()
	if len(got[crm]) != 0 || fmt.Sprint(got[billing]) != "[1]" ||
		fmt.Sprint(got[workflows.DeliveryID("crm:contacts.person.deleted@1", "p1")]) != "[4]" {
		t.Fatalf("signals during the back-off %v: seq 2-3 must wait behind seq 1", got)
	}
	dueNow(t, st)
	if round, err := r.DispatchOnce(ctx); err != nil || round.Dispatched != 3 {
		t.Fatalf("round after the back-off %+v %v", round, err)
	}
	if got := fmt.Sprint(tmp.bySeq()[crm]); got != "[1 2 3]" {
		t.Fatalf("crm's key got %s, want [1 2 3]", got)
	}
}
