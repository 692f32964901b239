package cli

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"

	"herald/config"
	"herald/internal/testkit"
	"herald/store"
	"herald/workflows"
)

// keyEvents returns the events of one subject key of a subscription's type,
// in sequence order, as the event log has them.
func (h *herald) keyEvents(subscription, subject string) []store.RequeuedEvent {
	h.t.Helper()
	keys, err := h.Svc.Store.WindowEvents(context.Background(), subscription, subject, time.Time{}, time.Now().Add(time.Hour))
	if err != nil {
		h.t.Fatal(err)
	}
	if len(keys) != 1 {
		h.t.Fatalf("events of %s: %d keys, want 1", subject, len(keys))
	}
	return keys[0].Events
}

// workflowStatus returns the status of the latest run of a workflow, or
// false when there is none.
func (h *herald) workflowStatus(id string) (enums.WorkflowExecutionStatus, bool) {
	h.t.Helper()
	d, err := h.Svc.Temporal.DescribeWorkflow(context.Background(), id, "")
	if isNotFound(err) {
		return 0, false
	}
	if err != nil {
		h.t.Fatalf("describe %s: %v", id, err)
	}
	return d.RawResponse.GetWorkflowExecutionInfo().GetStatus(), true
}

// waitClosed waits until the key's workflow has completed (idle timeout).
func (h *herald) waitClosed(id string) {
	h.t.Helper()
	testkit.Eventually(h.t, 30*time.Second, id+" to complete", func() bool {
		st, ok := h.workflowStatus(id)
		return ok && st == enums.WORKFLOW_EXECUTION_STATUS_COMPLETED
	})
}

// TestRedeliverEventAfterIdle redelivers an event after its key's workflow
// has completed: the signal-with-start starts the workflow again, which
// takes its settings from the worker, and the subscriber gets the event
// again. Before that, events show reports the event delivered to both
// subscriptions; redeliver refuses events that are not the key's.
func TestRedeliverEventAfterIdle(t *testing.T) {
	t.Parallel()
	h := startHerald(t, func(c *config.Worker) { c.IdleTimeout = time.Second })
	h.publish([]string{"k-idle"}, 1, 2)
	h.waitArrivals("billing", "k-idle", 1, 2)
	h.waitArrivals("audit-log", "k-idle", 1, 2)
	id := workflows.DeliveryID(billingSub, "k-idle")
	h.waitClosed(id)
	evs := h.keyEvents(billingSub, "k-idle")
	if len(evs) != 2 {
		t.Fatalf("k-idle has %d events in the log, want 2", len(evs))
	}

	// events show: the outcome per subscription, settled by the deliveries.
	var shown eventShowJSON
	testkit.Eventually(t, 10*time.Second, "both outcomes of event 1 to be delivered", func() bool {
		shown = decode[eventShowJSON](t, mustRun(t, h.env, "events", "show", evs[0].ID, "--json").stdout)
		return len(shown.Outcomes) == 2 && shown.Outcomes[0].Status == store.EventDelivered &&
			shown.Outcomes[1].Status == store.EventDelivered
	})
	if e := shown.Event; e.ID != evs[0].ID || e.Seq != evs[0].Seq || e.Type != "contacts.person.updated" || e.Version != 1 ||
		e.SourceApp != "contacts" || e.Subject != "k-idle" || e.State != "dispatched" || e.DispatchedAt == nil ||
		compactJSON(e.Envelope) != compactJSON(shownEnvelope(t, h, e.ID)) || !strings.Contains(compactJSON(e.Envelope), `"data":{"n":1}`) {
		t.Errorf("events show --json event: %+v (envelope %s)", e, e.Envelope)
	}
	for i, sub := range []string{auditLogSub, billingSub} {
		if o := shown.Outcomes[i]; o.SubscriptionID != sub || o.Subject != "k-idle" || o.Attempts != 1 ||
			o.DeliveredAt == nil || o.QueuedAt.IsZero() || o.Code != "" {
			t.Errorf("outcome %d: %+v, want %s delivered at the first attempt", i, o, sub)
		}
	}
	text := mustRun(t, h.env, "events", "show", evs[0].ID).stdout
	wantContains(t, "events show", text, "event "+evs[0].ID, "type         contacts.person.updated@1",
		"source app   contacts", "subject      k-idle", "state        dispatched (", "Envelope:", `"n": 1`,
		"Outcomes (2 subscriptions):", auditLogSub, billingSub, "status     delivered", "attempts   1", ", delivered ")
	for _, args := range [][]string{
		{"events", "show", "00000000-0000-4000-8000-000000000000"},
		{"events", "show", "not-a-uuid"},
	} {
		if r := run(t, h.env, args...); r.code != ExitInvalid || !strings.Contains(r.stderr, "is not in the event log") {
			t.Errorf("%v: exit %d, stderr %q; want exit 2, not in the event log", args, r.code, r.stderr)
		}
	}
	if r := run(t, h.env, "events", "show"); r.code != ExitInvalid || !strings.Contains(r.stderr, "events show: missing ID") {
		t.Errorf("events show without an id: exit %d, stderr %q", r.code, r.stderr)
	}

	// redeliver --event of a completed key: Update-With-Start.
	r := mustRun(t, h.env, "redeliver", "--subscription", billingSub, "--subject", "k-idle", "--event", evs[0].ID,
		"--reason", "subscriber lost it", "--actor", "alice")
	t.Logf("redeliver --event of a completed key:\n%s", r.stdout)
	wantContains(t, "redeliver --event", r.stdout, "redeliver "+id+": ")
	h.waitArrivals("billing", "k-idle", 1, 2, 1)
	h.wantAudit(workflows.AuditDeliveryRedelivered, billingSub, "k-idle", "alice", "subscriber lost it")
	// Started without settings, the workflow took the worker's: its idle
	// timeout of a second (not the default ten minutes) ends it again.
	h.waitClosed(id)
	if got := h.Sub.Ns("audit-log", "k-idle"); !slices.Equal(got, []int{1, 2}) {
		t.Errorf("audit-log received %v, want [1 2]: the redeliver was for billing only", got)
	}

	r = mustRun(t, h.env, "redeliver", "--json", "--subscription", billingSub, "--subject", "k-idle", "--event", evs[1].ID)
	sent := decode[redeliverEventJSON](t, r.stdout)
	t.Logf("redeliver --event --json of a completed key:\n%s", r.stdout)
	want := workflows.Params{SubscriptionID: billingSub, SubscriberApp: "billing", EventType: "contacts.person.updated", SubjectKey: "k-idle"}
	if sent.WorkflowID != id || sent.Update != "redeliver" || sent.EventSeq != evs[1].Seq ||
		!paramsEqual(sent.StartInput, want) || !strings.HasPrefix(sent.TemporalCommand, "temporal workflow execute-update-with-start") {
		t.Errorf("redeliver --event --json = %+v", sent)
	}
	// The new run answers the Update, though it asks the worker for its
	// settings first.
	if sent.Result == nil || !sent.Result.Changed || !slices.Equal(sent.Result.Requeued, []string{evs[1].ID}) || sent.SignalledAfterStart {
		t.Errorf("redeliver --event --json: result %+v, signalled after start %v; want the event requeued", sent.Result, sent.SignalledAfterStart)
	}
	h.waitArrivals("billing", "k-idle", 1, 2, 1, 2)

	// A replay window starts a completed key's workflow too.
	h.waitClosed(id)
	win := decode[windowJSON](t, mustRun(t, h.env, "redeliver", "--json", "--subscription", billingSub, "--subject", "k-idle", "--since", "1h").stdout)
	if win.Keys != 1 || win.Queued != 2 || win.Results[0].Result != "queued" {
		t.Errorf("replay window of a completed key: %+v", win)
	}
	h.waitArrivals("billing", "k-idle", 1, 2, 1, 2, 1, 2)

	// Refused before anything is sent: an event that is not in the log,
	// one of another key, an unknown subscription.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--subscription", billingSub, "--subject", "k-idle", "--event", "00000000-0000-4000-8000-000000000000"}, "is not in the event log"},
		{[]string{"--subscription", billingSub, "--subject", "k-other", "--event", evs[0].ID}, `has the subject key "k-idle", not "k-other"`},
		{[]string{"--subscription", "billing:contacts.person.updated@2", "--subject", "k-idle", "--event", evs[0].ID}, "no subscription billing:contacts.person.updated@2"},
	} {
		r := run(t, h.env, append([]string{"redeliver"}, c.args...)...)
		if r.code != ExitInvalid || !strings.Contains(r.stderr, c.want) {
			t.Errorf("redeliver %v: exit %d, stderr %q; want exit 2 and %q", c.args, r.code, r.stderr, c.want)
		}
	}
	if _, ok := h.workflowStatus(workflows.DeliveryID(billingSub, "k-other")); ok {
		t.Errorf("a refused redeliver started the workflow of k-other")
	}
}

// shownEnvelope is the envelope of an event as the event log has it.
func shownEnvelope(t *testing.T, h *herald, id string) json.RawMessage {
	t.Helper()
	ev, err := h.Svc.Store.GetEvent(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return ev.Envelope
}

func paramsEqual(a, b workflows.Params) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// TestRedeliverWindow replays a window over three keys: the dry run sends
// nothing, the replay delivers every event of each key again in sequence
// order, one audit row per key; an empty window exits 2.
func TestRedeliverWindow(t *testing.T) {
	t.Parallel()
	h := startHerald(t)
	keys := []string{"w-1", "w-2", "w-3"}
	h.publish(keys, 1, 2, 3)
	for _, k := range keys {
		h.waitArrivals("billing", k, 1, 2, 3)
		h.waitArrivals("audit-log", k, 1, 2, 3)
	}

	plan := decode[windowJSON](t, mustRun(t, h.env, "redeliver", "--subscription", billingSub, "--since", "1h", "--dry-run", "--json").stdout)
	if !plan.DryRun || plan.Keys != 3 || plan.Events != 9 || plan.Queued != 0 || len(plan.Results) != 3 {
		t.Fatalf("dry run --json: %+v", plan)
	}
	for i, r := range plan.Results {
		evs := h.keyEvents(billingSub, keys[i])
		if r.Subject != keys[i] || r.Events != 3 || r.Result != "dry-run" || r.Signals != 0 ||
			r.FirstSeq != evs[0].Seq || r.LastSeq != evs[2].Seq || r.WorkflowID != workflows.DeliveryID(billingSub, keys[i]) {
			t.Errorf("dry run key %d: %+v", i, r)
		}
	}
	text := mustRun(t, h.env, "redeliver", "--subscription", billingSub, "--subject", "w-2", "--since", "1h", "--dry-run").stdout
	wantContains(t, "dry run text", text, "redeliver window of "+billingSub+", subject key w-2", "w-2", "dry-run",
		"would queue 3 events again on 1 key (dry run: nothing was sent)")
	for _, k := range keys {
		if rows := h.audit(workflows.AuditDeliveryRedelivered, billingSub, k); len(rows) != 0 {
			t.Errorf("a dry run wrote %d redelivered audit rows for %s", len(rows), k)
		}
	}

	until := time.Now().Add(time.Minute).UTC().Format(time.RFC3339)
	done := decode[windowJSON](t, mustRun(t, h.env, "redeliver", "--subscription", billingSub, "--since", "1h", "--until", until,
		"--reason", "replay after restore", "--actor", "carol", "--json").stdout)
	if done.DryRun || done.Keys != 3 || done.Events != 9 || done.Queued != 9 {
		t.Fatalf("replay --json: %+v", done)
	}
	for i, r := range done.Results {
		if r.Subject != keys[i] || r.Result != "queued" || r.Signals != 1 || r.Error != "" {
			t.Errorf("replay key %d: %+v", i, r)
		}
	}
	for _, k := range keys {
		h.waitArrivals("billing", k, 1, 2, 3, 1, 2, 3)
		h.wantAudit(workflows.AuditDeliveryRedelivered, billingSub, k, "carol", "replay after restore")
		var meta struct {
			Count int  `json:"count"`
			Again bool `json:"again"`
		}
		if err := json.Unmarshal(h.audit(workflows.AuditDeliveryRedelivered, billingSub, k)[0].Metadata, &meta); err != nil || meta.Count != 3 || !meta.Again {
			t.Errorf("redelivered audit row of %s: count %d, again %v (%v); want 3, true", k, meta.Count, meta.Again, err)
		}
	}
	for _, k := range keys {
		if got := h.Sub.Ns("audit-log", k); !slices.Equal(got, []int{1, 2, 3}) {
			t.Errorf("audit-log received %v of %s; the replay was for billing only", got, k)
		}
	}

	// Windows with no events exit 2 and say so.
	from, to := time.Now().Add(-48*time.Hour).UTC().Format(time.RFC3339), time.Now().Add(-47*time.Hour).UTC().Format(time.RFC3339)
	for _, args := range [][]string{
		{"--since", from, "--until", to},
		{"--since", "1h", "--subject", "nobody"},
	} {
		r := run(t, h.env, append([]string{"redeliver", "--subscription", billingSub}, args...)...)
		if r.code != ExitInvalid || !strings.Contains(r.stderr, "nothing to redeliver for "+billingSub) {
			t.Errorf("redeliver %v: exit %d, stderr %q; want exit 2, nothing to redeliver", args, r.code, r.stderr)
		}
	}
}

// TestRedeliverWindowUsage checks the flags of a replay window; all are
// refused before anything is read or sent.
func TestRedeliverWindowUsage(t *testing.T) {
	t.Parallel()
	e := env{"USER": "tester"}
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--subscription", billingSub, "--since", "2h", "--event", "7c0e7c1e-6d3a-4b5e-9d53-2f0c1a9b8e11"}, "it takes no --event, --all-failed or --all"},
		{[]string{"--subscription", billingSub, "--since", "2h", "--all-failed"}, "it takes no --event, --all-failed or --all"},
		{[]string{"--subscription", billingSub, "--subject", "k", "--until", "1h"}, "--until needs --since"},
		{[]string{"--subscription", billingSub, "--subject", "k", "--dry-run"}, "--dry-run goes with a replay window"},
		{[]string{"--since", "2h"}, "--since needs --subscription"},
		{[]string{"--subscription", "billing", "--since", "2h"}, `--subscription "billing" is not a subscription id`},
		{[]string{"--subscription", billingSub, "--since", "yesterday"}, `--since "yesterday" is neither an RFC 3339 time`},
		{[]string{"--subscription", billingSub, "--since", "-2h"}, "must be positive"},
		{[]string{"--subscription", billingSub, "--since", "1h", "--until", "2h"}, "must be before --until"},
		{[]string{"--subscription", billingSub, "--since", future}, "is in the future"},
		{[]string{"--subscription", billingSub, "--since", "2h", "--subject", "a\x01b"}, "--subject has a control"},
	} {
		r := run(t, e, append([]string{"redeliver"}, c.args...)...)
		if r.code != ExitInvalid || !strings.Contains(r.stderr, c.want) || !strings.Contains(r.stderr, "usage: starter redeliver") {
			t.Errorf("redeliver %v: exit %d, stderr %q; want exit 2 with %q and the usage", c.args, r.code, r.stderr, c.want)
		}
	}
}

func TestParseTimeFlag(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"2h":                        now.Add(-2 * time.Hour),
		"90m":                       now.Add(-90 * time.Minute),
		"2026-11-29T08:30:00Z":      time.Date(2026, 11, 29, 8, 30, 0, 0, time.UTC),
		"2026-11-29T09:30:00+01:00": time.Date(2026, 11, 29, 8, 30, 0, 0, time.UTC),
	} {
		got, err := parseTimeFlag("redeliver", "since", in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("parseTimeFlag(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
}

func TestCountBar(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	bar := newCountBar(&b, 200, "events")
	if got := bar.render(50); got != "[#######.......................]  25%  50/200 events" {
		t.Errorf("render(50) = %q", got)
	}
	bar.update(200)
	bar.clear()
	if got := b.String(); !strings.HasPrefix(got, "\r[##############################] 100%  200/200 events") || !strings.HasSuffix(got, "\r\x1b[K") {
		t.Errorf("drawn %q", got)
	}
}
