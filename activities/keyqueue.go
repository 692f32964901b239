package activities

import (
	"context"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"

	"herald/store"
)

// QueueInput asks what a key owes: its held outcome rows above After (up to
// Limit, none when Limit is 0), and which of the Claims (events a signal
// named) are not events of the key at all.
type QueueInput struct {
	SubscriptionID string  `json:"subscriptionId"`
	SubjectKey     string  `json:"subjectKey"`
	After          int64   `json:"after"`
	Limit          int     `json:"limit,omitempty"`
	Claims         []Event `json:"claims,omitempty"`
	// Uncounted: After is the calling run's cursor, past every row the run
	// read (0: it read none yet), so a row above it that a local execution
	// of the run delivered was delivered by a workflow task the run lost;
	// DeliveredHere reports those rows too.
	Uncounted bool `json:"uncounted,omitempty"`
	// WithPause: also report whether an operator paused the key (Paused).
	WithPause bool `json:"withPause,omitempty"`
}

// HeldEvent is one event a key owes, as its outcome row has it.
type HeldEvent struct {
	Event    Event     `json:"event"`
	QueuedAt time.Time `json:"queuedAt"`
	Attempts int       `json:"attempts,omitempty"`
	// Failed: the row is failed (the key is held on it) since FailedAt.
	Failed    bool      `json:"failed,omitempty"`
	FailedAt  time.Time `json:"failedAt,omitzero"`
	Code      string    `json:"code,omitempty"`
	LastCode  string    `json:"lastCode,omitempty"`
	LastError string    `json:"lastError,omitempty"`
}

// QueueResult is what KeyQueue found.
type QueueResult struct {
	Events []HeldEvent `json:"events,omitempty"`
	// More: the key owes more events after the last of Events.
	More bool `json:"more,omitempty"`
	// Unknown counts the claims that name no event of the key (with that
	// sequence number); UnknownIDs holds the first few of them.
	Unknown    int      `json:"unknown,omitempty"`
	UnknownIDs []string `json:"unknownIds,omitempty"`
	// DeliveredHere are the events a local execution of the calling run
	// delivered that the run has not counted: its workflow task failed
	// after the POST (a worker died). They are the claims it delivered and,
	// with QueueInput.Uncounted, the rows above the cursor it delivered:
	// those the lost task read itself, which no signal may ever name (the
	// relay does not signal an event whose row is settled).
	DeliveredHere []Event `json:"deliveredHere,omitempty"`
	// Paused (asked with QueueInput.WithPause): an operator paused the key
	// and has not resumed it, whatever run took the pause.
	Paused bool `json:"paused,omitempty"`
}

// maxHeldError bounds the last error a held row brings into the queue.
const maxHeldError = 200

// maxUnknownIDs bounds the ids of refused claims a result (and so an
// audit row) carries.
const maxUnknownIDs = 10

// KeyQueue reads what a key owes from its outcome rows, the state of record
// of every key, and checks the events a signal claimed against them.
func (a *Activities) KeyQueue(ctx context.Context, in QueueInput) (QueueResult, error) {
	if !ownKey(ctx, in.SubscriptionID, in.SubjectKey) {
		return QueueResult{}, errNotTheKey(in.SubscriptionID, in.SubjectKey)
	}
	claims := make([]store.ClaimedEvent, len(in.Claims))
	for i, c := range in.Claims {
		claims[i] = store.ClaimedEvent{ID: c.ID, Seq: c.Seq}
	}
	runID := activity.GetInfo(ctx).WorkflowExecution.RunID
	var uncounted string
	if in.Uncounted {
		uncounted = runID
	}
	q, err := a.Store.KeyQueue(ctx, in.SubscriptionID, in.SubjectKey, in.After, in.Limit, claims, uncounted, in.WithPause)
	if err != nil {
		return QueueResult{}, err
	}
	return queueResult(q, in.Claims, runID), nil
}

// StartRead is what a key's run reads before it delivers anything, in one
// round trip: the first limit events the key owes, the events a local
// execution of this run delivered in a workflow task it lost (a run's
// start has counted none: DeliveredHere), whether the key is paused, and
// its subscription's error policy (as ErrorPolicy reads it). It is the
// read of the DeliveryStart local activity (workflows.Register), and no
// method of Activities: each of those is registered as an activity.
func StartRead(ctx context.Context, a *Activities, subscriptionID, subject string, limit int) (QueueResult, ErrorPolicy, error) {
	if !ownKey(ctx, subscriptionID, subject) {
		return QueueResult{}, ErrorPolicy{}, errNotTheKey(subscriptionID, subject)
	}
	runID := activity.GetInfo(ctx).WorkflowExecution.RunID
	q, p, err := a.Store.KeyStart(ctx, subscriptionID, subject, limit, runID)
	pol, err := policyOrHold(p, err)
	if err != nil {
		return QueueResult{}, ErrorPolicy{}, err
	}
	return queueResult(q, nil, runID), pol, nil
}

// queueResult is what a run takes from a read of its key's rows: the rows
// the key owes, and the claims and rows a local execution of run delivered.
func queueResult(q store.KeyQueue, claims []Event, runID string) QueueResult {
	res := QueueResult{More: q.More, Unknown: len(q.Unknown), Paused: q.Paused}
	run := runID + "/"
	here := map[string]bool{}
	for _, c := range claims {
		if by, ok := q.DeliveredBy[c.ID]; ok && strings.HasPrefix(by, run) && !here[c.ID] {
			here[c.ID] = true
			res.DeliveredHere = append(res.DeliveredHere, Event{ID: c.ID, Seq: c.Seq})
		}
	}
	for _, c := range q.LocalAbove {
		if !here[c.ID] {
			here[c.ID] = true
			res.DeliveredHere = append(res.DeliveredHere, Event{ID: c.ID, Seq: c.Seq})
		}
	}
	for _, c := range q.Unknown[:min(len(q.Unknown), maxUnknownIDs)] {
		res.UnknownIDs = append(res.UnknownIDs, truncate(c.ID, 64))
	}
	for _, r := range q.Rows {
		h := HeldEvent{Event: Event{ID: r.ID, Seq: r.Seq}, QueuedAt: r.QueuedAt, Attempts: r.Attempts}
		if r.Status == store.EventFailed {
			h.Failed, h.FailedAt = true, r.UpdatedAt
		}
		if h.Failed || h.Attempts > 0 {
			// Only a head that failed says why, briefly: a redelivered row
			// keeps its old error, and thousands of them would not fit in
			// a result or a carry.
			h.Code, h.LastCode, h.LastError = r.Code, truncate(r.LastCode, 64), truncate(r.LastError, maxHeldError)
		}
		res.Events = append(res.Events, h)
	}
	return res
}
