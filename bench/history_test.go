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

func TestHistoryTally(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(msec int) *timestamppb.Timestamp {
		return timestamppb.New(t0.Add(time.Duration(msec) * time.Millisecond))
	}
	payload := func(v any) *commonpb.Payloads {
		p, err := converter.GetDefaultDataConverter().ToPayloads(v)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	ev := func(id int64, msec int, typ enumspb.EventType) *historypb.HistoryEvent {
		return &historypb.HistoryEvent{EventId: id, EventTime: at(msec), EventType: typ}
	}
	signaled := func(id int64, msec int, input *commonpb.Payloads) *historypb.HistoryEvent {
		e := ev(id, msec, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED)
		e.Attributes = &historypb.HistoryEvent_WorkflowExecutionSignaledEventAttributes{
			WorkflowExecutionSignaledEventAttributes: &historypb.WorkflowExecutionSignaledEventAttributes{Input: input}}
		return e
	}
	wftStarted := func(id int64, msec int, scheduled int64) *historypb.HistoryEvent {
		e := ev(id, msec, enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED)
		e.Attributes = &historypb.HistoryEvent_WorkflowTaskStartedEventAttributes{
			WorkflowTaskStartedEventAttributes: &historypb.WorkflowTaskStartedEventAttributes{ScheduledEventId: scheduled}}
		return e
	}
	wftCompleted := func(id int64, msec int, started int64) *historypb.HistoryEvent {
		e := ev(id, msec, enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)
		e.Attributes = &historypb.HistoryEvent_WorkflowTaskCompletedEventAttributes{
			WorkflowTaskCompletedEventAttributes: &historypb.WorkflowTaskCompletedEventAttributes{StartedEventId: started}}
		return e
	}
	actStarted := func(id int64, msec int, scheduled int64) *historypb.HistoryEvent {
		e := ev(id, msec, enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED)
		e.Attributes = &historypb.HistoryEvent_ActivityTaskStartedEventAttributes{
			ActivityTaskStartedEventAttributes: &historypb.ActivityTaskStartedEventAttributes{ScheduledEventId: scheduled}}
		return e
	}
	actCompleted := func(id int64, msec int, started int64) *historypb.HistoryEvent {
		e := ev(id, msec, enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED)
		e.Attributes = &historypb.HistoryEvent_ActivityTaskCompletedEventAttributes{
			ActivityTaskCompletedEventAttributes: &historypb.ActivityTaskCompletedEventAttributes{StartedEventId: started}}
		return e
	}
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
				signaled(2, 10, payload(map[string]any{"events": []map[string]string{{"id": "e1"}}})),
				ev(3, 10, enumspb.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED),
				wftStarted(4, 40, 3),
				wftCompleted(5, 50, 4),
				ev(6, 50, enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES),
				ev(7, 50, enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED),
				actStarted(8, 70, 7),
				actCompleted(9, 75, 8),
			},
			want: Actions{Signals: 1, WorkflowTasks: 1, Activities: 1, SearchAttributeUpserts: 1, HistoryEvents: 9,
				SignalDelayMS: 10, WorkflowTaskWaitMS: 30, WorkflowTaskRunMS: 10, ActivityWaitMS: 20, ActivityRunMS: 5},
		},
		{
			name: "ceiling signals, an unknown id and a timer",
			history: []*historypb.HistoryEvent{
				signaled(1, 150, payload(map[string]any{"id": "e2", "n": 2})),
				signaled(2, 160, payload(map[string]any{"id": "unknown"})),
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
		})
	}
}
