package main

import (
	"context"
	"fmt"
	"sort"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"herald/workflows"
)

// TailEvent is where the time of one of the slowest deliveries of a paced
// run went, read from its key workflow's history. The parts add up to
// LatencyMS (up to clock rounding); a part is -1 when the history did not
// show it.
type TailEvent struct {
	EventID   string  `json:"eventId"`
	Key       string  `json:"key"`
	LatencyMS float64 `json:"latencyMs"`
	// RelayMS: publish → the signal in the key's history.
	RelayMS float64 `json:"relayMs"`
	// KeyBusyMS: the signal → the workflow task that scheduled the event's
	// Deliver activity was scheduled (the key was delivering earlier events,
	// or a task was already running).
	KeyBusyMS float64 `json:"keyBusyMs"`
	// WorkflowTaskWaitMS and WorkflowTaskRunMS: that workflow task,
	// scheduled → started → completed; WorkflowTaskAttempts counts its
	// attempts (a timed-out task on the sticky queue is retried).
	WorkflowTaskWaitMS   float64 `json:"workflowTaskWaitMs"`
	WorkflowTaskRunMS    float64 `json:"workflowTaskRunMs"`
	WorkflowTaskAttempts int     `json:"workflowTaskAttempts"`
	// ActivityWaitMS: the Deliver activity scheduled → started (its last
	// attempt, ActivityAttempt); PostMS: started → the sink's receipt.
	ActivityWaitMS  float64 `json:"activityWaitMs"`
	ActivityAttempt int     `json:"activityAttempt"`
	PostMS          float64 `json:"postMs"`
	// Local: the event went in a local activity, run inside the workflow
	// task: no activity wait, WorkflowTaskRunMS 0, and PostMS runs from the
	// task's start to the sink's receipt.
	Local bool `json:"local,omitempty"`
	// Error says why the history could not be read or did not show the event.
	Error string `json:"error,omitempty"`
}

// maxTail bounds how many of a paced run's slowest deliveries are explained.
const maxTail = 10

// slowest lists the tail of a run's deliveries to the first subscription:
// its slowest 1 %, at least one and at most maxTail, slowest first.
func (ph *phase) slowest() []TailEvent {
	keyOf := make(map[string]string, len(ph.events))
	for _, ev := range ph.events {
		keyOf[ev.ID] = ev.Key
	}
	var all []TailEvent
	ph.mu.Lock()
	for d, at := range ph.arrived {
		if pub, ok := ph.published[d]; ok && d.Sub == ph.subs[0] {
			all = append(all, TailEvent{EventID: d.ID, Key: keyOf[d.ID], LatencyMS: ms(at.Sub(pub))})
		}
	}
	ph.mu.Unlock()
	sort.Slice(all, func(i, j int) bool { return all[i].LatencyMS > all[j].LatencyMS })
	n := min(max(1, len(all)/100), maxTail, len(all))
	return all[:n]
}

// explainTail reads the history of each slow delivery's key workflow and
// splits its latency into parts.
func explainTail(ctx context.Context, c client.Client, ph *phase) []TailEvent {
	tail := ph.slowest()
	histories := map[string][]*historypb.HistoryEvent{}
	for i := range tail {
		te := &tail[i]
		wid := workflows.DeliveryID(ph.subs[0], te.Key)
		events, ok := histories[wid]
		if !ok {
			var err error
			if events, err = readHistory(ctx, c, wid); err != nil {
				te.Error = fmt.Sprintf("history of %s: %v", wid, err)
				continue
			}
			histories[wid] = events
		}
		pub, _ := ph.publishedFor(ph.subs[0])(te.EventID)
		te.explain(events, pub, ph.arrived[delivery{Sub: ph.subs[0], ID: te.EventID}])
	}
	return tail
}

// readHistory reads a workflow's whole history (every run of its id is
// followed by the current run's only; a key's events fit one run here).
func readHistory(ctx context.Context, c client.Client, workflowID string) ([]*historypb.HistoryEvent, error) {
	var events []*historypb.HistoryEvent
	it := c.GetWorkflowHistory(ctx, workflowID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return nil, err
		}
		events = append(events, ev)
	}
	return events, nil
}

// explain fills te's parts from the history of its key's workflow.
func (te *TailEvent) explain(events []*historypb.HistoryEvent, published, arrived time.Time) {
	te.RelayMS, te.KeyBusyMS, te.WorkflowTaskWaitMS, te.WorkflowTaskRunMS = -1, -1, -1, -1
	te.ActivityWaitMS, te.PostMS = -1, -1
	byID := make(map[int64]*historypb.HistoryEvent, len(events))
	for _, ev := range events {
		byID[ev.GetEventId()] = ev
	}
	at := func(id int64) time.Time { return byID[id].GetEventTime().AsTime() }
	var signaled, started time.Time
	var scheduled *historypb.HistoryEvent // a Deliver activity, or a local one's marker
	for _, ev := range events {
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
			started = ev.GetEventTime().AsTime()
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
			if signaled.IsZero() && containsID(ev.GetWorkflowExecutionSignaledEventAttributes().GetInput(), te.EventID) {
				signaled = ev.GetEventTime().AsTime()
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			a := ev.GetActivityTaskScheduledEventAttributes()
			if scheduled == nil && a.GetActivityType().GetName() == "Deliver" && containsID(a.GetInput(), te.EventID) {
				scheduled = ev
			}
		case enumspb.EVENT_TYPE_MARKER_RECORDED:
			if scheduled == nil && localDelivered(ev.GetMarkerRecordedEventAttributes(), te.EventID) {
				scheduled = ev
				te.Local = true
			}
		}
	}
	if signaled.IsZero() && !started.IsZero() && started.After(published) {
		// The relay started the key's workflow with no signal (relay/start.go):
		// the run read the event from its rows.
		signaled = started
	}
	if signaled.IsZero() || scheduled == nil {
		te.Error = "the history does not show the event's signal or start, and Deliver activity"
		return
	}
	te.RelayMS = ms(signaled.Sub(published))
	completedID := scheduled.GetActivityTaskScheduledEventAttributes().GetWorkflowTaskCompletedEventId()
	if te.Local {
		completedID = scheduled.GetMarkerRecordedEventAttributes().GetWorkflowTaskCompletedEventId()
	}
	if completed := byID[completedID]; completed != nil {
		startedID := completed.GetWorkflowTaskCompletedEventAttributes().GetStartedEventId()
		if started := byID[startedID]; started != nil {
			wftScheduled := started.GetWorkflowTaskStartedEventAttributes().GetScheduledEventId()
			te.KeyBusyMS = ms(max(0, at(wftScheduled).Sub(signaled)))
			te.WorkflowTaskWaitMS = ms(at(startedID).Sub(maxTime(at(wftScheduled), signaled)))
			te.WorkflowTaskRunMS = ms(completed.GetEventTime().AsTime().Sub(at(startedID)))
			te.WorkflowTaskAttempts = int(byID[wftScheduled].GetWorkflowTaskScheduledEventAttributes().GetAttempt())
			if te.Local {
				te.WorkflowTaskRunMS, te.ActivityWaitMS, te.ActivityAttempt = 0, 0, 1
				te.PostMS = ms(arrived.Sub(at(startedID)))
			}
		}
	}
	for _, ev := range events {
		if ev.GetEventType() != enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED {
			continue
		}
		a := ev.GetActivityTaskStartedEventAttributes()
		if a.GetScheduledEventId() == scheduled.GetEventId() {
			te.ActivityWaitMS = ms(ev.GetEventTime().AsTime().Sub(scheduled.GetEventTime().AsTime()))
			te.ActivityAttempt = int(a.GetAttempt())
			te.PostMS = ms(arrived.Sub(ev.GetEventTime().AsTime()))
		}
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// localDelivered reports whether a marker is that of a local Deliver
// activity whose result delivered the event, or of a run's start whose
// read delivered it (workflows.DeliverInStartVersion).
func localDelivered(m *historypb.MarkerRecordedEventAttributes, id string) bool {
	if m.GetMarkerName() != "LocalActivity" {
		return false
	}
	type done struct {
		Done []struct {
			ID     string `json:"id"`
			Result string `json:"result"`
		} `json:"done"`
	}
	var data struct{ ActivityType string }
	var result struct {
		done
		First *struct {
			Result done `json:"result"`
		} `json:"first"`
	}
	dc := converter.GetDefaultDataConverter()
	d, r := m.GetDetails()["data"].GetPayloads(), m.GetDetails()["result"].GetPayloads()
	if len(d) == 0 || len(r) == 0 || dc.FromPayload(d[0], &data) != nil ||
		(data.ActivityType != "Deliver" && data.ActivityType != workflows.StartActivity) ||
		dc.FromPayload(r[0], &result) != nil {
		return false
	}
	if data.ActivityType == workflows.StartActivity {
		if result.First == nil {
			return false
		}
		result.done = result.First.Result
	}
	for _, s := range result.Done {
		if s.ID == id && s.Result == "delivered" {
			return true
		}
	}
	return false
}

// containsID reports whether a signal's or a Deliver activity's input
// carries the event id ({"events":[{"id":…},…]}).
func containsID(p *commonpb.Payloads, id string) bool {
	var v struct {
		Events []struct {
			ID string `json:"id"`
		} `json:"events"`
	}
	if p == nil || len(p.GetPayloads()) == 0 {
		return false
	}
	if err := converter.GetDefaultDataConverter().FromPayload(p.GetPayloads()[0], &v); err != nil {
		return false
	}
	for _, e := range v.Events {
		if e.ID == id {
			return true
		}
	}
	return false
}
