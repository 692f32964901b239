package main

import (
	"context"
	"fmt"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
)

// Actions counts what a few sampled key workflows cost Temporal, read from
// their histories (the current run of each), and where their time went:
// where the time of a delivery goes on a Temporal server.
type Actions struct {
	// Workflows sampled and the Events they were sent (events per key × workflows).
	Workflows int `json:"workflows"`
	Events    int `json:"events"`
	// Signals, WorkflowTasks (completed), Activities (scheduled), Timers
	// (started), SearchAttributeUpserts and HistoryEvents (all) in those histories.
	Signals       int `json:"signals"`
	WorkflowTasks int `json:"workflowTasks"`
	Activities    int `json:"activities"`
	// LocalActivities counts local activity markers (Herald's first attempts).
	LocalActivities        int `json:"localActivities"`
	Timers                 int `json:"timers"`
	SearchAttributeUpserts int `json:"searchAttributeUpserts"`
	HistoryEvents          int `json:"historyEvents"`
	// Starts counts runs started (the run read, so 1 a workflow unless it
	// was started over) and Updates the Workflow Updates accepted.
	Starts  int `json:"starts"`
	Updates int `json:"updates"`
	// LocalActivityBatches counts the workflow tasks that recorded local
	// activities: what a server that bills actions counts for them (all of
	// one workflow task's local activities are one action).
	LocalActivityBatches int `json:"localActivityBatches"`
	// Mean milliseconds: publish → the signal in the history (for Herald the
	// relay plus SignalWithStart; for the ceiling 0, as its publish time is
	// when SignalWithStart returned), workflow task scheduled → started
	// (waiting for a worker) and started → completed, activity scheduled →
	// started and started → completed (the POSTs).
	SignalDelayMS      float64 `json:"signalDelayMs"`
	WorkflowTaskWaitMS float64 `json:"workflowTaskWaitMs"`
	WorkflowTaskRunMS  float64 `json:"workflowTaskRunMs"`
	ActivityWaitMS     float64 `json:"activityWaitMs"`
	ActivityRunMS      float64 `json:"activityRunMs"`
	// Error says why some history could not be read; the counts then cover
	// fewer workflows.
	Error string `json:"error,omitempty"`
}

// Billable is the actions a server that bills per action would count:
// starts, signals, updates, activities scheduled, local-activity batches,
// timers and search-attribute upserts (Temporal Cloud's list; a
// SignalWithStart that starts a workflow is counted as its start and its
// signal).
func (a *Actions) Billable() int {
	if a == nil {
		return 0
	}
	return a.Starts + a.Signals + a.Updates + a.Activities + a.LocalActivityBatches + a.Timers + a.SearchAttributeUpserts
}

// PerEvent divides a count by the events sampled.
func (a *Actions) PerEvent(count int) float64 {
	if a == nil || a.Events == 0 {
		return 0
	}
	return round(float64(count)/float64(a.Events), 2)
}

// mean accumulates durations.
type mean struct {
	sum time.Duration
	n   int
}

func (m *mean) add(d time.Duration) { m.sum += max(0, d); m.n++ }

func (m mean) ms() float64 {
	if m.n == 0 {
		return 0
	}
	return ms(m.sum / time.Duration(m.n))
}

// historyTally is what one or more histories add up to.
type historyTally struct {
	counts                                                  Actions
	signalDelay, wftWait, wftRun, activityWait, activityRun mean
}

// countActions reads the histories of the given workflows, each of which was
// sent eventsPerKey events; published gives the publish time of an event id
// (false when unknown).
func countActions(ctx context.Context, c client.Client, workflowIDs []string, eventsPerKey int,
	published func(id string) (time.Time, bool)) *Actions {
	var t historyTally
	a := &Actions{}
	for _, id := range workflowIDs {
		var events []*historypb.HistoryEvent
		it := c.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		var err error
		for it.HasNext() {
			var ev *historypb.HistoryEvent
			if ev, err = it.Next(); err != nil {
				break
			}
			events = append(events, ev)
		}
		if err != nil {
			a.Error = fmt.Sprintf("history of %s: %v", id, err)
			continue
		}
		t.add(events, published)
		a.Workflows++
		a.Events += eventsPerKey
	}
	c2 := t.counts
	a.Signals, a.WorkflowTasks, a.Activities, a.Timers = c2.Signals, c2.WorkflowTasks, c2.Activities, c2.Timers
	a.LocalActivities = c2.LocalActivities
	a.SearchAttributeUpserts, a.HistoryEvents = c2.SearchAttributeUpserts, c2.HistoryEvents
	a.Starts, a.Updates, a.LocalActivityBatches = c2.Starts, c2.Updates, c2.LocalActivityBatches
	a.SignalDelayMS, a.WorkflowTaskWaitMS, a.WorkflowTaskRunMS = t.signalDelay.ms(), t.wftWait.ms(), t.wftRun.ms()
	a.ActivityWaitMS, a.ActivityRunMS = t.activityWait.ms(), t.activityRun.ms()
	return a
}

// add counts one history and times its tasks.
func (t *historyTally) add(events []*historypb.HistoryEvent, published func(string) (time.Time, bool)) {
	at := make(map[int64]time.Time, len(events))
	for _, ev := range events {
		at[ev.GetEventId()] = ev.GetEventTime().AsTime()
	}
	since := func(ev *historypb.HistoryEvent, earlier int64) time.Duration {
		return ev.GetEventTime().AsTime().Sub(at[earlier])
	}
	batches := map[int64]bool{} // workflow tasks that recorded a local activity
	for _, ev := range events {
		t.counts.HistoryEvents++
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
			t.counts.Starts++
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
			t.counts.Updates++
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
			t.counts.Signals++
			attrs := ev.GetWorkflowExecutionSignaledEventAttributes()
			if id := firstEventID(attrs.GetInput()); id != "" {
				if pub, ok := published(id); ok {
					t.signalDelay.add(ev.GetEventTime().AsTime().Sub(pub))
				}
			}
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED:
			t.wftWait.add(since(ev, ev.GetWorkflowTaskStartedEventAttributes().GetScheduledEventId()))
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			t.counts.WorkflowTasks++
			t.wftRun.add(since(ev, ev.GetWorkflowTaskCompletedEventAttributes().GetStartedEventId()))
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			t.counts.Activities++
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
			t.activityWait.add(since(ev, ev.GetActivityTaskStartedEventAttributes().GetScheduledEventId()))
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
			t.activityRun.add(since(ev, ev.GetActivityTaskCompletedEventAttributes().GetStartedEventId()))
		case enumspb.EVENT_TYPE_MARKER_RECORDED:
			if attrs := ev.GetMarkerRecordedEventAttributes(); attrs.GetMarkerName() == "LocalActivity" {
				t.counts.LocalActivities++
				if task := attrs.GetWorkflowTaskCompletedEventId(); !batches[task] {
					batches[task] = true
					t.counts.LocalActivityBatches++
				}
			}
		case enumspb.EVENT_TYPE_TIMER_STARTED:
			t.counts.Timers++
		case enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
			t.counts.SearchAttributeUpserts++
		}
	}
}

// firstEventID decodes the id of the first event a signal carries: Herald's
// {"events":[{"id":…}]} or the ceiling's {"id":…}.
func firstEventID(p *commonpb.Payloads) string {
	var v struct {
		ID     string `json:"id"`
		Events []struct {
			ID string `json:"id"`
		} `json:"events"`
	}
	if p == nil || len(p.GetPayloads()) == 0 {
		return ""
	}
	if err := converter.GetDefaultDataConverter().FromPayload(p.GetPayloads()[0], &v); err != nil {
		return ""
	}
	if len(v.Events) > 0 {
		return v.Events[0].ID
	}
	return v.ID
}
