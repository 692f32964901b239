package activities

import (
	"context"
	"time"

	"go.temporal.io/sdk/activity"
	"go.uber.org/zap"
)

// Bounds of the key's lease: it outlives the POST under way by keyLeaseSlack,
// and a regular execution waits at most keyLeaseWait for another run's lease
// before it hands back (outcome limited, no attempt spent).
const (
	keyLeaseSlack = 30 * time.Second
	keyLeaseWait  = 20 * time.Second
	keyLeasePoll  = 250 * time.Millisecond
)

// keyLease is a Deliver execution's lease of its key (store.TakeKeyLease).
type keyLease struct {
	a                   *Activities
	sub, subject, owner string
	until               time.Time
	// waited: another run held the lease when this execution first asked.
	waited bool
}

// takeKeyLease takes the key's lease for the calling run. When another run
// holds it, a local execution hands back at once and a regular one waits,
// heartbeating, up to keyLeaseWait; then the result to return is limited
// (attempt is the one the head would have made). A database error reads as
// an outage of the subscription's look-up.
func (a *Activities) takeKeyLease(ctx context.Context, in DeliverInput, postTimeout time.Duration, attempt int) (*keyLease, DeliverResult) {
	owner := activity.GetInfo(ctx).WorkflowExecution.RunID
	ttl := postTimeout + keyLeaseSlack
	deadline := time.Now().Add(keyLeaseWait)
	for waited := false; ; waited = true {
		ok, until, err := a.Store.TakeKeyLease(ctx, in.SubscriptionID, in.SubjectKey, owner, ttl)
		switch {
		case err != nil:
			return nil, DeliverResult{Outcome: OutcomeInactive, SubscriptionState: SubscriptionUnknown,
				SubscriptionReason: truncate(err.Error(), maxErrorText)}
		case ok:
			return &keyLease{a: a, sub: in.SubscriptionID, subject: in.SubjectKey, owner: owner, until: until, waited: waited}, DeliverResult{}
		case in.Local || time.Now().After(deadline):
			if a.Logger != nil {
				a.Logger.Info("another run of the key still delivers; waiting for its lease",
					zap.String("subscription", in.SubscriptionID), zap.String("subject", in.SubjectKey),
					zap.Time("until", until))
			}
			return nil, DeliverResult{Outcome: OutcomeLimited, Attempt: attempt}
		}
		activity.RecordHeartbeat(ctx, "waiting for the key's lease")
		t := time.NewTimer(keyLeasePoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, DeliverResult{}
		case <-t.C:
		}
	}
}

// renew makes the lease outlast a POST of timeout; it writes only when the
// lease would run out first. It reports whether the run still holds it.
func (l *keyLease) renew(ctx context.Context, timeout time.Duration) bool {
	if time.Until(l.until) > timeout+5*time.Second {
		return true
	}
	ok, until, err := l.a.Store.TakeKeyLease(ctx, l.sub, l.subject, l.owner, timeout+keyLeaseSlack)
	if err != nil {
		// The database did not answer: the lease still runs until l.until.
		return time.Until(l.until) > timeout
	}
	l.until = until
	return ok
}

// release gives the lease back, whatever became of the execution's context.
func (l *keyLease) release() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := l.a.Store.ReleaseKeyLease(ctx, l.sub, l.subject, l.owner)
	if err != nil {
		l.a.warn("release the key's lease", l.sub, err)
	}
	return err
}
