package chaos_test

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// headWait is one event's wait at the head of its key's queue.
type headWait struct {
	Sub, Key   string
	N          int
	Start, Ack time.Time
}

func (w headWait) name() string { return fmt.Sprintf("%s/%s #%d", w.Sub, w.Key, w.N) }

// span is a stretch of time a key lost to one mechanism the settings define.
type span struct {
	From, To time.Time
	What     string // "sticky timeout", "workflow task timeout", …
}

// Mechanisms, as the explanation names them.
const (
	mechSticky    = "sticky timeout"
	mechTaskTO    = "workflow task timeout"
	mechAttempts  = "failed activity attempts"
	mechHeartbeat = "heartbeat timeout"
	mechTimer     = "back-off timer"
	mechFault     = "fault"
)

// Stretches the settings do not bound, shown beside the explanation: where
// the rest of a wait went.
const (
	infoTaskQueued     = "workflow tasks queued"
	infoTaskRunning    = "workflow tasks running"
	infoActivityQueued = "deliveries queued"
)

// isInfo reports whether a span is shown but explains nothing.
func isInfo(what string) bool {
	return what == infoTaskQueued || what == infoTaskRunning || what == infoActivityQueued
}

// spans reads from a delivery workflow's history the time its key lost to
// Temporal's and Herald's timeouts and back-offs:
//
//   - a workflow task that timed out: schedule-to-start on a sticky queue
//     (stickyTimeout) from its scheduling, start-to-close
//     (workflowTaskTimeout) from its start;
//   - a Deliver execution whose last attempt started after failed ones
//     (the history records only the last attempt): from its scheduling to
//     that start, at most each failed attempt's heartbeat timeout plus the
//     longest retry delay; a heartbeat timeout is named as such when it is
//     the last failure;
//   - a timer (the unreachable and look-up back-offs): from its start to
//     when it fired or was cancelled.
func spans(events []historyEvent) []span {
	at := map[string]time.Time{}
	for _, ev := range events {
		at[ev.EventID] = ev.EventTime
	}
	scheduled := map[string]time.Time{} // activity scheduled event id → time
	var out []span
	var taskScheduled, taskStarted time.Time
	for _, ev := range events {
		switch ev.EventType {
		case "EVENT_TYPE_WORKFLOW_TASK_SCHEDULED":
			taskScheduled = ev.EventTime
		case "EVENT_TYPE_WORKFLOW_TASK_STARTED":
			taskStarted = ev.EventTime
			out = append(out, span{taskScheduled, ev.EventTime, infoTaskQueued})
		case "EVENT_TYPE_WORKFLOW_TASK_COMPLETED":
			out = append(out, span{taskStarted, ev.EventTime, infoTaskRunning})
		}
		switch {
		case ev.WorkflowTaskTimedOut != nil:
			a := ev.WorkflowTaskTimedOut
			if strings.HasSuffix(a.TimeoutType, "SCHEDULE_TO_START") {
				out = append(out, span{at[a.ScheduledEventID], ev.EventTime, mechSticky})
			} else {
				out = append(out, span{at[a.StartedEventID], ev.EventTime, mechTaskTO})
			}
		case ev.EventType == "EVENT_TYPE_ACTIVITY_TASK_SCHEDULED":
			scheduled[ev.EventID] = ev.EventTime
		case ev.ActivityTaskStarted != nil && ev.ActivityTaskStarted.Attempt == 1:
			if from, ok := scheduled[ev.ActivityTaskStarted.ScheduledEventID]; ok {
				out = append(out, span{from, ev.EventTime, infoActivityQueued})
			}
		case ev.ActivityTaskStarted != nil && ev.ActivityTaskStarted.Attempt > 1:
			a := ev.ActivityTaskStarted
			from, ok := scheduled[a.ScheduledEventID]
			if !ok {
				continue
			}
			limit := time.Duration(a.Attempt-1) * attemptLimit()
			if ev.EventTime.Sub(from) > limit {
				from = ev.EventTime.Add(-limit)
			}
			what := mechAttempts
			if a.LastFailure != nil && strings.Contains(strings.ToLower(a.LastFailure.Message), "heartbeat timeout") {
				what = mechHeartbeat
			}
			out = append(out, span{from, ev.EventTime, what})
		case ev.TimerFired != nil || ev.TimerCanceled != nil:
			id := ""
			if ev.TimerFired != nil {
				id = ev.TimerFired.StartedEventID
			} else {
				id = ev.TimerCanceled.StartedEventID
			}
			if from, ok := at[id]; ok {
				out = append(out, span{from, ev.EventTime, mechTimer})
			}
		}
	}
	return out
}

// explanation is how much of one head wait the mechanisms cover.
type explanation struct {
	Wait        headWait
	Covered     time.Duration            // the union of the spans, within the wait
	By          map[string]time.Duration // per mechanism (they may overlap)
	Count       map[string]int
	Unexplained time.Duration // wait − covered
	// Info is the time in stretches the settings do not bound (tasks
	// waiting in their queues, workflow tasks running), which may overlap
	// the covered time and each other.
	Info map[string]time.Duration
	// Runs are the key's runs whose histories gave the spans (explainWaits;
	// read once, printed again for the longest wait), or why they could
	// not be read.
	Runs       []runHistory
	HistoryErr error
}

// Bound is what the settings allow this wait: the base wait plus the time
// the key's history shows lost to the mechanisms.
func (x explanation) Bound() time.Duration { return baseWait + x.Covered }

func (x explanation) String() string {
	keys := make([]string, 0, len(x.By))
	for k := range x.By {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d× %.1fs", k, x.Count[k], x.By[k].Seconds()))
	}
	var info []string
	for _, k := range []string{infoTaskQueued, infoTaskRunning, infoActivityQueued} {
		if d := x.Info[k]; d > 0 {
			info = append(info, fmt.Sprintf("%s %.1fs", k, d.Seconds()))
		}
	}
	return fmt.Sprintf("explained %.1fs (%s), unexplained %.1fs against the base %v; meanwhile %s",
		x.Covered.Seconds(), strings.Join(parts, ", "), x.Unexplained.Seconds(), baseWait, strings.Join(info, ", "))
}

// attemptLimit is the longest one failed Deliver attempt can hold its key
// before the next starts: a heartbeat timeout and the longest retry
// back-off.
func attemptLimit() time.Duration { return heartbeatTimeout + slices.Max(schedule()) }

// cutOff is the activity attempt a terminate found under way on the key's
// run (target.Pending), up to the terminate, as a history would have shown
// it had the attempt timed out: at most one heartbeat timeout and the
// longest retry back-off, like an attempt's span in spans.
func cutOff(f fault, sub, key string) []span {
	if f.Kind != kindTerminate {
		return nil
	}
	var out []span
	for _, t := range f.Targets {
		if t.Sub != sub || t.Key != key || t.Pending.IsZero() || !t.Pending.Before(f.Start) {
			continue
		}
		to := minTime(f.Start, t.Pending.Add(attemptLimit()))
		out = append(out, span{t.Pending, to, mechHeartbeat})
	}
	return out
}

// explain measures how much of w the spans (of its key's history, and the
// faults that can hold its key up, over their own duration and, for a
// terminated workflow, until the relay's re-drive) cover.
func explain(w headWait, hist []span, faults []fault) explanation {
	all := append([]span(nil), hist...)
	for _, f := range faults {
		if f.matches(w.Sub, w.Key) {
			all = append(all, span{f.Start, f.End.Add(f.holdsUp(w.Sub, w.Key)), mechFault})
		}
		all = append(all, cutOff(f, w.Sub, w.Key)...)
	}
	x := explanation{Wait: w, By: map[string]time.Duration{}, Count: map[string]int{}, Info: map[string]time.Duration{}}
	var in []span
	for _, s := range all {
		from, to := maxTime(s.From, w.Start), minTime(s.To, w.Ack)
		if !to.After(from) {
			continue
		}
		if isInfo(s.What) {
			x.Info[s.What] += to.Sub(from)
			continue
		}
		in = append(in, span{from, to, s.What})
		x.By[s.What] += to.Sub(from)
		x.Count[s.What]++
	}
	slices.SortFunc(in, func(a, b span) int { return a.From.Compare(b.From) })
	var end time.Time
	for _, s := range in {
		if s.From.After(end) {
			x.Covered += s.To.Sub(s.From)
			end = s.To
		} else if s.To.After(end) {
			x.Covered += s.To.Sub(end)
			end = s.To
		}
	}
	x.Unexplained = w.Ack.Sub(w.Start) - x.Covered
	return x
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
