package main

import (
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Builders of history events for the tests, at milliseconds after t0.
var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func at(msec int) *timestamppb.Timestamp {
	return timestamppb.New(t0.Add(time.Duration(msec) * time.Millisecond))
}

func payload(t *testing.T, v any) *commonpb.Payloads {
	t.Helper()
	p, err := converter.GetDefaultDataConverter().ToPayloads(v)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// eventsPayload is Herald's signal and Deliver input shape: {"events":[{"id":…}]}.
func eventsPayload(t *testing.T, ids ...string) *commonpb.Payloads {
	var events []map[string]string
	for _, id := range ids {
		events = append(events, map[string]string{"id": id})
	}
	return payload(t, map[string]any{"events": events})
}

func ev(id int64, msec int, typ enumspb.EventType) *historypb.HistoryEvent {
	return &historypb.HistoryEvent{EventId: id, EventTime: at(msec), EventType: typ}
}

func signaled(id int64, msec int, input *commonpb.Payloads) *historypb.HistoryEvent {
	e := ev(id, msec, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED)
	e.Attributes = &historypb.HistoryEvent_WorkflowExecutionSignaledEventAttributes{
		WorkflowExecutionSignaledEventAttributes: &historypb.WorkflowExecutionSignaledEventAttributes{Input: input}}
	return e
}

func wftScheduled(id int64, msec int, attempt int32) *historypb.HistoryEvent {
	e := ev(id, msec, enumspb.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED)
	e.Attributes = &historypb.HistoryEvent_WorkflowTaskScheduledEventAttributes{
		WorkflowTaskScheduledEventAttributes: &historypb.WorkflowTaskScheduledEventAttributes{Attempt: attempt}}
	return e
}

func wftStarted(id int64, msec int, scheduled int64) *historypb.HistoryEvent {
	e := ev(id, msec, enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED)
	e.Attributes = &historypb.HistoryEvent_WorkflowTaskStartedEventAttributes{
		WorkflowTaskStartedEventAttributes: &historypb.WorkflowTaskStartedEventAttributes{ScheduledEventId: scheduled}}
	return e
}

func wftCompleted(id int64, msec int, started int64) *historypb.HistoryEvent {
	e := ev(id, msec, enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)
	e.Attributes = &historypb.HistoryEvent_WorkflowTaskCompletedEventAttributes{
		WorkflowTaskCompletedEventAttributes: &historypb.WorkflowTaskCompletedEventAttributes{StartedEventId: started}}
	return e
}

func actScheduled(id int64, msec int, name string, completed int64, input *commonpb.Payloads) *historypb.HistoryEvent {
	e := ev(id, msec, enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
	e.Attributes = &historypb.HistoryEvent_ActivityTaskScheduledEventAttributes{
		ActivityTaskScheduledEventAttributes: &historypb.ActivityTaskScheduledEventAttributes{
			ActivityType: &commonpb.ActivityType{Name: name}, WorkflowTaskCompletedEventId: completed, Input: input}}
	return e
}

func actStarted(id int64, msec int, scheduled int64, attempt int32) *historypb.HistoryEvent {
	e := ev(id, msec, enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED)
	e.Attributes = &historypb.HistoryEvent_ActivityTaskStartedEventAttributes{
		ActivityTaskStartedEventAttributes: &historypb.ActivityTaskStartedEventAttributes{ScheduledEventId: scheduled, Attempt: attempt}}
	return e
}

func actCompleted(id int64, msec int, started int64) *historypb.HistoryEvent {
	e := ev(id, msec, enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED)
	e.Attributes = &historypb.HistoryEvent_ActivityTaskCompletedEventAttributes{
		ActivityTaskCompletedEventAttributes: &historypb.ActivityTaskCompletedEventAttributes{StartedEventId: started}}
	return e
}

// localMarker is a local activity's marker with its result.
func localMarker(t *testing.T, id int64, msec int, completed int64, activityType string, result any) *historypb.HistoryEvent {
	e := ev(id, msec, enumspb.EVENT_TYPE_MARKER_RECORDED)
	e.Attributes = &historypb.HistoryEvent_MarkerRecordedEventAttributes{
		MarkerRecordedEventAttributes: &historypb.MarkerRecordedEventAttributes{
			MarkerName: "LocalActivity", WorkflowTaskCompletedEventId: completed,
			Details: map[string]*commonpb.Payloads{
				"data":   payload(t, map[string]any{"ActivityID": "1", "ActivityType": activityType}),
				"result": payload(t, result),
			}}}
	return e
}

func TestHistoryTally(t *testing.T) {
	published := map[string]time.Time{"e1": t0, "e2": t0.Add(100 * time.Millisecond)}
	lookup := func(id string) (time.Time, bool) { p, ok := published[id]; return p, ok }

	tests := []struct {
		name    string
		history []*historypb.HistoryEvent
		want    Actions
	}{
		{
			name: "one delivery (Herald's signal shape)",
			history: []*historypb.HistoryEvent{
				ev(1, 10, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED),
				signaled(2, 10, eventsPayload(t, "e1")),
				ev(3, 10, enumspb.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED),
				wftStarted(4, 40, 3),
				wftCompleted(5, 50, 4),
				ev(6, 50, enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES),
				actScheduled(7, 50, "Deliver", 5, nil),
				actStarted(8, 70, 7, 1),
				actCompleted(9, 75, 8),
				localMarker(t, 10, 80, 5, "Deliver", map[string]any{"outcome": "delivered"}),
				// a second local activity of the same workflow task: one batch
				localMarker(t, 11, 80, 5, "Record", nil),
				ev(12, 90, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED),
				ev(13, 90, enumspb.EVENT_TYPE_TIMER_STARTED),
				localMarker(t, 14, 95, 12, "Record", nil),
			},
			want: Actions{Signals: 1, WorkflowTasks: 1, Activities: 1, LocalActivities: 3, SearchAttributeUpserts: 1, HistoryEvents: 14,
				Starts: 1, Updates: 1, Timers: 1, LocalActivityBatches: 2,
				SignalDelayMS: 10, WorkflowTaskWaitMS: 30, WorkflowTaskRunMS: 10, ActivityWaitMS: 20, ActivityRunMS: 5},
		},
		{
			name: "ceiling signals, an unknown id and a timer",
			history: []*historypb.HistoryEvent{
				signaled(1, 150, payload(t, map[string]any{"id": "e2", "n": 2})),
				signaled(2, 160, payload(t, map[string]any{"id": "unknown"})),
				signaled(3, 170, nil),
				ev(4, 170, enumspb.EVENT_TYPE_TIMER_STARTED),
			},
			want: Actions{Signals: 3, Timers: 1, HistoryEvents: 4, SignalDelayMS: 50},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h historyTally
			h.add(tt.history, lookup)
			got := h.counts
			got.SignalDelayMS, got.WorkflowTaskWaitMS, got.WorkflowTaskRunMS = h.signalDelay.ms(), h.wftWait.ms(), h.wftRun.ms()
			got.ActivityWaitMS, got.ActivityRunMS = h.activityWait.ms(), h.activityRun.ms()
			if got != tt.want {
				t.Errorf("tally = %+v\nwant    %+v", got, tt.want)
			}
			// starts, signals, updates, activities, LA batches, timers, upserts
			want := tt.want.Starts + tt.want.Signals + tt.want.Updates + tt.want.Activities +
				tt.want.LocalActivityBatches + tt.want.Timers + tt.want.SearchAttributeUpserts
			if b := got.Billable(); b != want {
				t.Errorf("billable actions = %d, want %d", b, want)
			}
		})
	}
}
