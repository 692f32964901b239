package activities

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"
)

// ErrTypeNotFound is the error type of a look-up that found nothing; it is
// not retried.
const ErrTypeNotFound = "not_found"

// ErrEventNotFound is returned by an EventStore for an unknown event id.
var ErrEventNotFound = errors.New("event not found")

// Target is where and whether a subscription's events are delivered.
type Target struct {
	// State is the subscription's state: active, paused, blocked or cancelled.
	State  string
	Reason string
	// URL is the subscriber's endpoint plus its delivery path.
	URL string
}

// LoadedEvent is an event read back from the event log.
type LoadedEvent struct {
	Event   Event  `json:"event"`
	Subject string `json:"subject"`
}

// Store is what the activities need from the database.
type Store interface {
	// Target returns a subscription's delivery target.
	Target(ctx context.Context, subscriptionID string) (Target, error)
	// LoadEvent reads an event by id (ErrEventNotFound when unknown).
	LoadEvent(ctx context.Context, id string) (LoadedEvent, error)
	// Audit appends one audit row.
	Audit(ctx context.Context, e AuditEntry) error
	// PurgeEvents deletes up to limit dispatched or rejected events older than cutoff.
	PurgeEvents(ctx context.Context, cutoff time.Time, limit int) (int64, error)
	// Envelopes reads the CloudEvent bodies of events by id (missing ids absent).
	Envelopes(ctx context.Context, ids []string) (map[string][]byte, error)
}

// Signaler sends a signal to a workflow; a Temporal client is one.
type Signaler interface {
	SignalWorkflow(ctx context.Context, workflowID, runID, signalName string, arg any) error
}

// Observer is told of every delivery attempt (metrics).
type Observer interface {
	Attempted(subscriptionID string, ev Event, attempt int, r PostResult)
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
	Logger   *zap.Logger
	// TargetTTL is how long a subscription's target is cached, so a burst of
	// deliveries does not read the database per event (default 2s).
	TargetTTL time.Duration

	mu      sync.Mutex
	targets map[string]cachedTarget
}

type cachedTarget struct {
	t       Target
	expires time.Time
}

// Deliver POSTs the events in order, each its own request, stopping at the
// first that does not succeed. The first event's failures are returned as
// errors so that Temporal retries the execution on the schedule
// (NextRetryDelay); a later event's failure ends the execution with a
// partial result, so order and attempt accounting stay exact.
func (a *Activities) Deliver(ctx context.Context, in DeliverInput) (DeliverResult, error) {
	info := activity.GetInfo(ctx)
	base := in.PriorAttempts
	if !in.NotBefore.IsZero() {
		if info.Attempt == 1 {
			wait := max(time.Until(in.NotBefore), time.Millisecond)
			return DeliverResult{}, temporal.NewApplicationErrorWithOptions(
				"waiting for the retry delay", CodeNotBefore,
				temporal.ApplicationErrorOptions{NextRetryDelay: wait})
		}
		base-- // the execution's first attempt only waited
	}
	target, err := a.target(ctx, in.SubscriptionID)
	if err != nil {
		// A database outage must not burn delivery attempts: re-check later.
		return DeliverResult{Outcome: OutcomeInactive, SubscriptionState: SubscriptionUnknown,
			SubscriptionReason: truncate(err.Error(), maxErrorText)}, nil
	}
	if target.State != "active" {
		return DeliverResult{Outcome: OutcomeInactive, SubscriptionState: target.State,
			SubscriptionReason: target.Reason}, nil
	}
	if err := a.loadEnvelopes(ctx, in.Events); err != nil {
		return DeliverResult{}, err
	}
	started := time.Now()
	for i, ev := range in.Events {
		attempt := 1
		if i == 0 {
			attempt = base + int(info.Attempt)
		} else if time.Since(started) > 2*time.Second {
			// Only slow batches heartbeat: a quick one costs no extra round trip.
			activity.RecordHeartbeat(ctx, i)
		}
		r := a.Poster.Post(ctx, PostRequest{
			URL: target.URL, Body: ev.Envelope, SubscriptionID: in.SubscriptionID,
			SubscriberApp: subscriberApp(in), EventID: ev.ID, Attempt: attempt, Timeout: in.Timeout,
		})
		if a.Observer != nil {
			a.Observer.Attempted(in.SubscriptionID, ev, attempt, r)
		}
		if r.Delivered() {
			continue
		}
		if r.Code == CodeSubscriberUnreachable {
			return DeliverResult{Outcome: OutcomeUnreachable, Delivered: i, Attempt: attempt,
				Code: r.Code, Error: r.Message}, nil
		}
		if i > 0 {
			return DeliverResult{Outcome: OutcomePartial, Delivered: i, Attempt: attempt,
				Code: r.Code, Error: r.Message, RetryAfter: r.RetryAfter}, nil
		}
		return DeliverResult{}, a.headFailure(ctx, in, ev, attempt, r)
	}
	return DeliverResult{Outcome: OutcomeDelivered, Delivered: len(in.Events)}, nil
}

// loadEnvelopes fills in the bodies of events queued without one: a
// workflow that continues as new with a long queue carries ids, not bodies,
// to stay under Temporal's payload limit.
func (a *Activities) loadEnvelopes(ctx context.Context, evs []Event) error {
	var ids []string
	for _, ev := range evs {
		if !hasBody(ev) {
			ids = append(ids, ev.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	found, err := a.Store.Envelopes(ctx, ids)
	if err != nil {
		return err
	}
	for i := range evs {
		if hasBody(evs[i]) {
			continue
		}
		env, ok := found[evs[i].ID]
		if !ok {
			return temporal.NewApplicationErrorWithOptions(
				fmt.Sprintf("event %s is no longer in the event log (removed by retention)", evs[i].ID),
				CodeEventMissing, temporal.ApplicationErrorOptions{NonRetryable: true,
					Details: []any{FailureDetails{EventID: evs[i].ID, Code: CodeEventMissing,
						Error: "the event is no longer in the event log"}}})
		}
		evs[i].Envelope = env
	}
	return nil
}

func hasBody(ev Event) bool { return len(ev.Envelope) > 0 && string(ev.Envelope) != "null" }

// headFailure turns a failed attempt of the first event into the error that
// drives Temporal's retry: terminal, exhausted, or retry after the schedule's
// delay (or the subscriber's Retry-After, if longer, capped at an hour).
func (a *Activities) headFailure(ctx context.Context, in DeliverInput, ev Event, attempt int, r PostResult) error {
	details := FailureDetails{EventID: ev.ID, Attempt: attempt, Code: r.Code, Error: r.Message}
	msg := fmt.Sprintf("attempt %d: %s: %s", attempt, r.Code, r.Message)
	if IsTerminal(r.Code) || attempt >= len(in.RetrySchedule)+1 {
		details.Exhausted = !IsTerminal(r.Code)
		return temporal.NewApplicationErrorWithOptions(msg, r.Code,
			temporal.ApplicationErrorOptions{NonRetryable: true, Details: []any{details}})
	}
	delay := in.RetrySchedule[attempt-1]
	if r.RetryAfter > delay {
		delay = min(r.RetryAfter, time.Hour)
	}
	a.report(ctx, AttemptReport{EventID: ev.ID, Attempt: attempt, Code: r.Code, Error: r.Message,
		NextAttemptAt: time.Now().Add(delay)})
	return temporal.NewApplicationErrorWithOptions(msg, r.Code,
		temporal.ApplicationErrorOptions{NextRetryDelay: delay, Details: []any{details}})
}

// report tells the workflow about a failed attempt; best effort, since the
// retry itself does not depend on it.
func (a *Activities) report(ctx context.Context, r AttemptReport) {
	if a.Signaler == nil {
		return
	}
	info := activity.GetInfo(ctx)
	if err := a.Signaler.SignalWorkflow(ctx, info.WorkflowExecution.ID, info.WorkflowExecution.RunID,
		SignalAttempt, r); err != nil && a.Logger != nil {
		a.Logger.Warn("report attempt to workflow", zap.String("workflow", info.WorkflowExecution.ID), zap.Error(err))
	}
}

func (a *Activities) target(ctx context.Context, subscriptionID string) (Target, error) {
	ttl := a.TargetTTL
	if ttl == 0 {
		ttl = 2 * time.Second
	}
	now := time.Now()
	a.mu.Lock()
	c, ok := a.targets[subscriptionID]
	a.mu.Unlock()
	if ok && now.Before(c.expires) {
		return c.t, nil
	}
	t, err := a.Store.Target(ctx, subscriptionID)
	if err != nil {
		return Target{}, err
	}
	a.mu.Lock()
	if a.targets == nil {
		a.targets = map[string]cachedTarget{}
	}
	a.targets[subscriptionID] = cachedTarget{t: t, expires: now.Add(ttl)}
	a.mu.Unlock()
	return t, nil
}

// LoadEvent reads an event back from the event log, for an operator's
// redelivery of an event the workflow no longer holds.
func (a *Activities) LoadEvent(ctx context.Context, id string) (LoadedEvent, error) {
	ev, err := a.Store.LoadEvent(ctx, id)
	if errors.Is(err, ErrEventNotFound) {
		return LoadedEvent{}, temporal.NewApplicationErrorWithOptions(
			fmt.Sprintf("event %s not found", id), ErrTypeNotFound, temporal.ApplicationErrorOptions{NonRetryable: true})
	}
	return ev, err
}

// Audit appends one audit row.
func (a *Activities) Audit(ctx context.Context, e AuditEntry) error {
	return a.Store.Audit(ctx, e)
}

// subscriberApp is the app part of a subscription id "<app>:<type>@<version>".
func subscriberApp(in DeliverInput) string {
	if in.SubscriberApp != "" {
		return in.SubscriberApp
	}
	for i := range len(in.SubscriptionID) {
		if in.SubscriptionID[i] == ':' {
			return in.SubscriptionID[:i]
		}
	}
	return in.SubscriptionID
}
