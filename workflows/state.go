package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"
)

// refreshDetails shows the key's current state in the Temporal UI. Current
// details are answered from memory, not written to the history, so they can
// follow every attempt.
func (d *delivery) refreshDetails(ctx workflow.Context) {
	if s := d.details(); s != d.shownDetails {
		d.shownDetails = s
		workflow.SetCurrentDetails(ctx, s)
	}
}

// details is the markdown shown as the workflow's current details in the UI.
func (d *delivery) details() string {
	status := d.restingStatus()
	s := fmt.Sprintf("**%s** · %s · key `%s` · %d queued", status, d.p.SubscriptionID, d.p.SubjectKey, len(d.Queue))
	head := d.head()
	if head == nil {
		return s
	}
	s += fmt.Sprintf("\n\nhead `%s` (seq %d), attempt %d of %d", head.Event.ID, head.Event.Seq, head.Attempts, d.p.MaxAttempts())
	if !head.NextAttemptAt.IsZero() {
		s += ", next attempt " + head.NextAttemptAt.UTC().Format(time.RFC3339)
	}
	if head.Code != "" {
		s += fmt.Sprintf("\n\nlast error `%s`", head.Code)
		if head.LastCode != "" && head.LastCode != head.Code {
			s += fmt.Sprintf(" (last attempt `%s`)", head.LastCode)
		}
		s += ": " + head.LastError
	}
	return s
}

// outcome remembers one final outcome; the last maxOutcomes are kept.
func (d *delivery) outcome(ctx workflow.Context, it QueueItem, result, code string) {
	d.Outcomes = append(d.Outcomes, Outcome{
		EventID: it.Event.ID, Seq: it.Event.Seq, Result: result, Code: code,
		Attempts: it.Attempts, At: workflow.Now(ctx),
	})
	if over := len(d.Outcomes) - d.maxOutcomes; over > 0 {
		d.Outcomes = append([]Outcome(nil), d.Outcomes[over:]...)
	}
}

// state answers QueryState.
func (d *delivery) state(now time.Time) State {
	st := State{
		Subscription: d.p.SubscriptionID,
		Subject:      d.p.SubjectKey,
		Status:       d.queryStatus(),
		Queued:       []QueuedEvent{},
		Counters:     d.Counters,
		Outcomes:     append([]Outcome{}, d.Outcomes...),
		KeyPaused:    d.KeyPaused,
	}
	head := d.head()
	if head == nil {
		return st
	}
	h := &HeadState{
		EventID: head.Event.ID, Seq: head.Event.Seq, Type: d.p.EventType,
		Attempt: head.Attempts, Code: head.Code, LastCode: head.LastCode, LastError: head.LastError,
		MaxAttempts: d.p.MaxAttempts(),
	}
	if !head.NextAttemptAt.IsZero() {
		t := head.NextAttemptAt
		h.NextAttemptAt = &t
	}
	st.Head = h
	held := d.holdsQueue()
	for _, it := range d.Queue[1:] {
		q := QueuedEvent{EventID: it.Event.ID, Seq: it.Event.Seq, Type: d.p.EventType}
		if held {
			q.HeldBy = head.Event.ID
		}
		st.Queued = append(st.Queued, q)
	}
	return st
}
