package main

import (
	"fmt"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
)

func TestTailEventExplain(t *testing.T) {
	// e2 arrives while e1 is being delivered: its Deliver activity is
	// scheduled by the workflow task after e1's activity completes, whose
	// first attempt timed out on the sticky queue.
	history := []*historypb.HistoryEvent{
		signaled(1, 20, eventsPayload(t, "e1")),
		wftScheduled(2, 20, 1),
		wftStarted(3, 30, 2),
		wftCompleted(4, 40, 3),
		actScheduled(5, 40, "Deliver", 4, eventsPayload(t, "e1")),
		signaled(6, 120, eventsPayload(t, "e2")),
		actStarted(7, 60, 5, 1),
		actCompleted(8, 300, 7),
		wftScheduled(9, 300, 2),
		wftStarted(10, 450, 9),
		wftCompleted(11, 470, 10),
		actScheduled(12, 470, "Record", 11, eventsPayload(t, "e2")),
		actScheduled(13, 470, "Deliver", 11, eventsPayload(t, "e2", "e3")),
		actStarted(14, 900, 13, 2),
		actCompleted(15, 950, 14),
	}
	te := TailEvent{EventID: "e2", LatencyMS: 920}
	te.explain(history, t0.Add(100*time.Millisecond), t0.Add(1020*time.Millisecond))
	want := TailEvent{EventID: "e2", LatencyMS: 920, RelayMS: 20, KeyBusyMS: 180, WorkflowTaskWaitMS: 150,
		WorkflowTaskRunMS: 20, WorkflowTaskAttempts: 2, ActivityWaitMS: 430, ActivityAttempt: 2, PostMS: 120}
	if te != want {
		t.Errorf("explain = %+v\nwant      %+v", te, want)
	}
	sum := te.RelayMS + te.KeyBusyMS + te.WorkflowTaskWaitMS + te.WorkflowTaskRunMS + te.ActivityWaitMS + te.PostMS
	if sum != te.LatencyMS {
		t.Errorf("parts add up to %v ms, latency %v ms", sum, te.LatencyMS)
	}

	// A signal that arrives while the scheduling task already waits: the
	// task's wait counts from the signal, and the key was not busy.
	early := TailEvent{EventID: "e1"}
	early.explain(history, t0, t0.Add(70*time.Millisecond))
	if early.KeyBusyMS != 0 || early.WorkflowTaskWaitMS != 10 || early.RelayMS != 20 || early.PostMS != 10 {
		t.Errorf("explain e1 = %+v", early)
	}

	// e4 went in a local activity of the task that e4's signal scheduled;
	// e5's local attempt failed (not done), so it is not shown as local.
	done := func(ids ...string) map[string]any {
		var d []map[string]string
		for _, id := range ids {
			d = append(d, map[string]string{"id": id, "result": "delivered"})
		}
		return map[string]any{"outcome": "partial", "done": d}
	}
	history = append(history,
		signaled(16, 1000, eventsPayload(t, "e4", "e5")),
		wftScheduled(17, 1000, 1),
		wftStarted(18, 1040, 17),
		wftCompleted(19, 1100, 18),
		localMarker(t, 20, 1100, 19, "Settings", done("e4", "e5")),
		localMarker(t, 21, 1100, 19, "Deliver", done("e4")),
	)
	local := TailEvent{EventID: "e4", LatencyMS: 90}
	local.explain(history, t0.Add(990*time.Millisecond), t0.Add(1080*time.Millisecond))
	want = TailEvent{EventID: "e4", LatencyMS: 90, RelayMS: 10, KeyBusyMS: 0, WorkflowTaskWaitMS: 40,
		WorkflowTaskRunMS: 0, WorkflowTaskAttempts: 1, ActivityWaitMS: 0, ActivityAttempt: 1, PostMS: 40, Local: true}
	if local != want {
		t.Errorf("explain local = %+v\nwant            %+v", local, want)
	}
	failed := TailEvent{EventID: "e5"}
	failed.explain(history, t0, t0)
	if failed.Local || failed.Error == "" {
		t.Errorf("an event whose local attempt failed, with no activity after: %+v", failed)
	}

	// The relay started the key's workflow for s1 with no signal: the start
	// is the hand-over, and the run read s1 from its rows.
	startedHistory := []*historypb.HistoryEvent{
		ev(1, 30, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED),
		wftScheduled(2, 30, 1),
		wftStarted(3, 35, 2),
		wftCompleted(4, 80, 3),
		localMarker(t, 5, 80, 4, "Deliver", done("s1")),
	}
	fresh := TailEvent{EventID: "s1", LatencyMS: 90}
	fresh.explain(startedHistory, t0.Add(10*time.Millisecond), t0.Add(100*time.Millisecond))
	if fresh.Error != "" || fresh.RelayMS != 20 || fresh.WorkflowTaskWaitMS != 5 || !fresh.Local {
		t.Errorf("explain a started key's event = %+v", fresh)
	}

	// The run's start delivered s2 in its read
	// (workflows.DeliverInStartVersion): its marker is DeliveryStart's.
	// One whose read delivered nothing does not count.
	inStart := []*historypb.HistoryEvent{
		ev(1, 30, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED),
		wftScheduled(2, 30, 1),
		wftStarted(3, 35, 2),
		wftCompleted(4, 80, 3),
		localMarker(t, 5, 80, 4, "DeliveryStart", map[string]any{"first": map[string]any{"result": done("s2")}}),
	}
	startDelivered := TailEvent{EventID: "s2", LatencyMS: 90}
	startDelivered.explain(inStart, t0.Add(10*time.Millisecond), t0.Add(100*time.Millisecond))
	if startDelivered.Error != "" || startDelivered.RelayMS != 20 || startDelivered.WorkflowTaskWaitMS != 5 || !startDelivered.Local {
		t.Errorf("explain an event its run's start delivered = %+v", startDelivered)
	}
	inStart[4] = localMarker(t, 5, 80, 4, "DeliveryStart", done("s2"))
	readOnly := TailEvent{EventID: "s2"}
	readOnly.explain(inStart, t0, t0)
	if readOnly.Local || readOnly.Error == "" {
		t.Errorf("a start whose read delivered nothing taken for the delivery: %+v", readOnly)
	}

	missing := TailEvent{EventID: "e9"}
	missing.explain(history, t0, t0)
	if missing.Error == "" || missing.RelayMS != -1 || missing.PostMS != -1 {
		t.Errorf("an event the history does not show: %+v", missing)
	}
}

func TestSlowest(t *testing.T) {
	ph := &phase{subs: []string{"s1", "s2"}, published: map[delivery]time.Time{}, arrived: map[delivery]time.Time{}}
	for i := range 250 {
		id := fmt.Sprintf("e%03d", i)
		ph.events = append(ph.events, plannedEvent{ID: id, Key: fmt.Sprintf("k%d", i%7)})
		for _, sub := range ph.subs {
			ph.published[delivery{Sub: sub, ID: id}] = t0
			ph.arrived[delivery{Sub: sub, ID: id}] = t0.Add(time.Duration(i) * time.Millisecond)
		}
	}
	got := ph.slowest()
	if len(got) != 2 { // 1 % of 250 deliveries to the first subscription
		t.Fatalf("slowest = %d events, want 2: %+v", len(got), got)
	}
	if got[0].EventID != "e249" || got[0].LatencyMS != 249 || got[0].Key != "k4" || got[1].EventID != "e248" {
		t.Errorf("slowest = %+v", got)
	}
}
