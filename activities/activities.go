package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"herald/reason"
	"herald/store"
)

// ErrTypeNotFound is the error type of a look-up that found nothing; it is
// not retried.
const ErrTypeNotFound = "not_found"

// Store is what the activities need from the database; *store.Store is one.
type Store interface {
	// DeliveryBatch reads a subscription's target and the events with the
	// given ids with their outcome for it, in one query.
	DeliveryBatch(ctx context.Context, subscriptionID, subject string, ids []string) (store.Batch, error)
	// RecordOutcomes writes the outcome rows of one key in one statement.
	RecordOutcomes(ctx context.Context, subscriptionID, subject string, us []store.OutcomeUpdate) error
	// RecordWithAudit writes outcome rows and audit rows in one transaction.
	RecordWithAudit(ctx context.Context, subscriptionID, subject string, us []store.OutcomeUpdate, audit []store.AuditEntry) error
	// ForgetKeyPause deletes a key's paused_keys row, writing audit when
	// there was one, and reports whether there was.
	ForgetKeyPause(ctx context.Context, subscriptionID, subject string, audit store.AuditEntry) (bool, error)
	// Requeue checks events against a key and sets their outcome back to queued.
	Requeue(ctx context.Context, subscriptionID, subject string, ids []string) ([]store.RequeuedEvent, map[string]string, error)
	// Audit appends one audit row.
	Audit(ctx context.Context, e store.AuditEntry) error
	// PurgeEvents deletes up to limit events and limit outcome rows past
	// retention.
	PurgeEvents(ctx context.Context, cutoff time.Time, limit int) (store.PurgeCounts, error)
	// AuditByOnceKey reads the audit row written under a once key
	// (store.ErrNotFound when there is none).
	AuditByOnceKey(ctx context.Context, key string) (store.AuditRow, error)
	// MarkUnreachable and ClearUnreachable keep the mark of an app that a
	// delivery found unreachable.
	MarkUnreachable(ctx context.Context, app string) error
	ClearUnreachable(ctx context.Context, app string) (bool, error)
	// AcquireDelivery and ReleaseDelivery keep a subscriber app's limits
	// across every worker process: a token of its rate and an in-flight lease.
	AcquireDelivery(ctx context.Context, app string, ttl, maxWait time.Duration) (store.Grant, error)
	ReleaseDelivery(ctx context.Context, app, lease string) error
	// ReturnDelivery gives back a turn that was granted and not used;
	// AppLimits reads apps' current limits (the waits watch them for a
	// raise).
	ReturnDelivery(ctx context.Context, app, lease string) error
	AppLimits(ctx context.Context, apps []string) (map[string]store.Limits, error)
	// QueuedAfter and CancelQueuedAfter read and drop a key's backlog: the
	// queued events its workflow does not hold in memory.
	QueuedAfter(ctx context.Context, subscriptionID, subject string, after int64, limit int) ([]store.QueuedEvent, error)
	// KeyQueue reads what a key owes (its held rows above after), checks
	// claimed events against its outcome rows and, given a run id, reads
	// the rows above after a local execution of that run delivered.
	KeyQueue(ctx context.Context, subscriptionID, subject string, after int64, limit int, claims []store.ClaimedEvent, run string, withPause bool) (store.KeyQueue, error)
	// KeyStart reads what a key's run reads first (the first rows the key
	// owes, those a local execution of run delivered, its pause and its
	// subscription's error policy) in one round trip.
	KeyStart(ctx context.Context, subscriptionID, subject string, limit int, run string) (store.KeyQueue, store.Policy, error)
	// TakeKeyLease and ReleaseKeyLease keep which run may deliver a key's
	// events now.
	TakeKeyLease(ctx context.Context, subscriptionID, subject, holder string, ttl time.Duration) (bool, time.Time, error)
	ReleaseKeyLease(ctx context.Context, subscriptionID, subject, holder string) error
	CancelQueuedAfter(ctx context.Context, subscriptionID, subject string, after int64, status, code string) (int, error)
	// SubscriptionPolicy reads a subscription's error policy.
	SubscriptionPolicy(ctx context.Context, subscriptionID string) (store.Policy, error)
}

// Waker wakes the keys of an app that wait because it was unreachable; the
// worker's is bounded (see service). It must not block.
type Waker interface {
	WakeUnreachable(app string)
}

// Signaler sends a signal to a workflow; a Temporal client is one.
type Signaler interface {
	SignalWorkflow(ctx context.Context, workflowID, runID, signalName string, arg any) error
}

// Observer is told of every delivery attempt and of the events settled
// here (metrics). app is the subscriber app.
type Observer interface {
	Attempted(subscriptionID, app string, envelope []byte, attempt int, r PostResult)
	// Settled counts n events of the subscription settled with outcome
	// (delivered, failed, cancelled, expired, skipped).
	Settled(subscriptionID, outcome string, n int)
}

// Sender makes one delivery attempt; *Poster is the real one.
type Sender interface {
	Post(ctx context.Context, r PostRequest) PostResult
}

// Activities holds the dependencies of Herald's activities. Workflows call its
// methods through a nil *Activities.
type Activities struct {
	Poster   Sender
	Store    Store
	Signaler Signaler
	Observer Observer
	Waker    Waker
	Logger   *zap.Logger
	// HeadWait bounds how long one execution waits for its first event's
	// turn under the app's limits; LimitHeadWait when zero (tests shorten it).
	HeadWait time.Duration
	// Retention is the worker's HERALD_RETENTION: PurgeEvents never deletes
	// anything newer, whatever its input says; DefaultRetention when zero.
	Retention time.Duration
	// Clock is the time the activities set against the workflow's times:
	// a local attempt's deadline, the time a retry may start, when an
	// attempt failed. time.Now when nil; tests in Temporal's test
	// environment give it the environment's clock, which runs apart from
	// the wall clock and which those times come from.
	Clock func() time.Time

	// SlowPosts is how many POSTs to an app whose POSTs time out this
	// worker lets be in flight at once; SlowAppPosts when zero.
	SlowPosts int

	// limits tells the waits for apps' limits when those were raised.
	limits limitWatch
	// slow counts the POSTs in flight and the timeouts per app (slowapps.go).
	slow slowApps
}

// now is the time by Clock.
func (a *Activities) now() time.Time {
	if a.Clock != nil {
		return a.Clock()
	}
	return time.Now()
}

// ownKey reports whether the calling workflow is the delivery workflow of
// this subscription and subject key. A workflow started under another id
// (anyone who can reach Temporal can start one) may not act for the key.
func ownKey(ctx context.Context, subscriptionID, subjectKey string) bool {
	return activity.GetInfo(ctx).WorkflowExecution.ID == DeliveryWorkflowID(subscriptionID, subjectKey)
}

// errNotTheKey refuses, without retries, a write for a key by a workflow
// that is not that key's.
func errNotTheKey(subscriptionID, subjectKey string) error {
	return temporal.NewApplicationErrorWithOptions(
		fmt.Sprintf("only workflow %s acts for this key", DeliveryWorkflowID(subscriptionID, subjectKey)),
		CodeSignalRejected, temporal.ApplicationErrorOptions{NonRetryable: true})
}

// uuids returns the ids of evs that are UUIDs in canonical form; a forged
// signal may carry anything, and the query takes only UUIDs.
func uuids(evs []Event) []string {
	out := make([]string, 0, len(evs))
	for _, ev := range evs {
		if store.IsUUID(ev.ID) {
			out = append(out, ev.ID)
		}
	}
	return out
}

func (a *Activities) warn(what, subscriptionID string, err error) {
	if a.Logger != nil {
		a.Logger.Warn(what, zap.String("subscription", subscriptionID), zap.Error(err))
	}
}

// Requeue puts events back in a key's queue for an operator's redelivery:
// it checks each against the event log and the key, and sets its outcome
// back to queued.
func (a *Activities) Requeue(ctx context.Context, in RequeueInput) (RequeueResult, error) {
	if !ownKey(ctx, in.SubscriptionID, in.SubjectKey) {
		return RequeueResult{}, errNotTheKey(in.SubscriptionID, in.SubjectKey)
	}
	evs, refused, err := a.Store.Requeue(ctx, in.SubscriptionID, in.SubjectKey, in.EventIDs)
	if err != nil {
		return RequeueResult{}, err
	}
	res := RequeueResult{}
	if len(refused) > 0 {
		res.Refused = make(map[string]reason.Code, len(refused))
		for id, why := range refused {
			res.Refused[id] = reason.Code(why)
		}
	}
	for _, ev := range evs {
		res.Events = append(res.Events, Event{ID: ev.ID, Seq: ev.Seq, Again: true})
	}
	return res, nil
}

// BacklogInput names a key's backlog: its queued events above After.
type BacklogInput struct {
	SubscriptionID string `json:"subscriptionId"`
	SubjectKey     string `json:"subjectKey"`
	After          int64  `json:"after"`
	Limit          int    `json:"limit,omitempty"`
	// For DropBacklog: the status (cancelled, expired) and code to settle with.
	Status string `json:"status,omitempty"`
	Code   string `json:"code,omitempty"`
}

// BacklogEvent is one event of a key's backlog.
type BacklogEvent struct {
	Event    Event     `json:"event"`
	QueuedAt time.Time `json:"queuedAt"`
}

// Backlog reads the next part of a key's queue that its workflow does not
// hold in memory, in sequence order.
func (a *Activities) Backlog(ctx context.Context, in BacklogInput) ([]BacklogEvent, error) {
	if !ownKey(ctx, in.SubscriptionID, in.SubjectKey) {
		return nil, errNotTheKey(in.SubscriptionID, in.SubjectKey)
	}
	evs, err := a.Store.QueuedAfter(ctx, in.SubscriptionID, in.SubjectKey, in.After, in.Limit)
	if err != nil {
		return nil, err
	}
	out := make([]BacklogEvent, len(evs))
	for i, e := range evs {
		out[i] = BacklogEvent{Event: Event{ID: e.ID, Seq: e.Seq}, QueuedAt: e.QueuedAt}
	}
	return out, nil
}

// DropBacklog settles a key's whole backlog (cancel --all, removal) and
// returns how many events it held.
func (a *Activities) DropBacklog(ctx context.Context, in BacklogInput) (int, error) {
	if !ownKey(ctx, in.SubscriptionID, in.SubjectKey) {
		return 0, errNotTheKey(in.SubscriptionID, in.SubjectKey)
	}
	n, err := a.Store.CancelQueuedAfter(ctx, in.SubscriptionID, in.SubjectKey, in.After, in.Status, in.Code)
	if err == nil {
		a.settled(in.SubscriptionID, in.Status, n)
	}
	return n, err
}

// settled tells the Observer of n events settled with outcome.
func (a *Activities) settled(subscriptionID, outcome string, n int) {
	if a.Observer != nil && n > 0 {
		a.Observer.Settled(subscriptionID, outcome, n)
	}
}

// Record writes outcome rows of one key, then its audit rows. Outcomes are
// written only for the key's own workflow; audit rows name the workflow
// that asked, whichever it is.
func (a *Activities) Record(ctx context.Context, in RecordInput) error {
	outcomes := in.Outcomes
	if !ownKey(ctx, in.SubscriptionID, in.SubjectKey) {
		outcomes = nil
	}
	// Each row is keyed by the scheduled activity (its run and activity id,
	// which its retries share) and its position: a retry after a commit
	// whose answer was lost writes neither the row nor its key event again.
	info := activity.GetInfo(ctx)
	audit := make([]store.AuditEntry, len(in.Audit))
	for i, e := range in.Audit {
		audit[i] = storeAudit(e)
		audit[i].OnceKey = fmt.Sprintf("record:%s/%s/%d", info.WorkflowExecution.RunID, info.ActivityID, i)
	}
	if err := a.Store.RecordWithAudit(ctx, in.SubscriptionID, in.SubjectKey, storeOutcomes(outcomes), audit); err != nil {
		return err
	}
	// The workflow decides cancellations and expiries and records them
	// here; failures and deliveries were counted by Deliver.
	for _, u := range outcomes {
		switch {
		case u.Status == store.EventCancelled && u.Code == CodeSkippedAfterFailure:
			a.settled(in.SubscriptionID, SettledSkipped, 1)
		case u.Status == store.EventCancelled || u.Status == store.EventExpired:
			a.settled(in.SubscriptionID, u.Status, 1)
		}
	}
	return nil
}

// ForgetPauseInput names the key a resume found not paused in its run, with
// the audit row to write if the key's paused_keys row says it was.
type ForgetPauseInput struct {
	SubscriptionID string     `json:"subscriptionId"`
	SubjectKey     string     `json:"subjectKey"`
	Audit          AuditEntry `json:"audit"`
}

// ForgetPause deletes the key's paused_keys row, for a resume of a key
// whose run was not paused, and writes the audit row when there was one;
// it reports whether the key was paused. Only the key's own workflow may.
func (a *Activities) ForgetPause(ctx context.Context, in ForgetPauseInput) (bool, error) {
	if !ownKey(ctx, in.SubscriptionID, in.SubjectKey) {
		return false, errNotTheKey(in.SubscriptionID, in.SubjectKey)
	}
	info := activity.GetInfo(ctx)
	e := storeAudit(in.Audit)
	e.OnceKey = fmt.Sprintf("forget-pause:%s/%s", info.WorkflowExecution.RunID, info.ActivityID)
	return a.Store.ForgetKeyPause(ctx, in.SubscriptionID, in.SubjectKey, e)
}

func storeAudit(e AuditEntry) store.AuditEntry {
	return store.AuditEntry{
		Action: e.Action, Outcome: e.Outcome, Actor: e.Actor, TargetType: e.TargetType,
		TargetID: e.TargetID, ErrorCode: e.ErrorCode, Metadata: e.Metadata,
	}
}

// SubscriptionState reads a subscription's state ("cancelled" when it no
// longer exists), so a key can check what a signal told it.
func (a *Activities) SubscriptionState(ctx context.Context, subscriptionID string) (string, error) {
	b, err := a.Store.DeliveryBatch(ctx, subscriptionID, "", nil)
	if errors.Is(err, store.ErrNotFound) {
		return store.StateCancelled, nil
	}
	return b.Target.State, err
}

// Audit appends one audit row.
func (a *Activities) Audit(ctx context.Context, e AuditEntry) error {
	return a.Store.Audit(ctx, storeAudit(e))
}
