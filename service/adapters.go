package service

import (
	"context"
	"errors"
	"time"

	"herald/activities"
	"herald/signing"
	"herald/store"
)

// activityStore gives the activities what they need from the store.
type activityStore struct{ st *store.Store }

func (a activityStore) Target(ctx context.Context, subscriptionID string) (activities.Target, error) {
	t, err := a.st.DeliveryTarget(ctx, subscriptionID)
	if errors.Is(err, store.ErrNotFound) {
		// A subscription that no longer exists receives nothing more.
		return activities.Target{State: store.StateCancelled, Reason: "subscription_not_found"}, nil
	}
	if err != nil {
		return activities.Target{}, err
	}
	return activities.Target{State: t.State, Reason: t.Reason, URL: t.URL()}, nil
}

func (a activityStore) LoadEvent(ctx context.Context, id string) (activities.LoadedEvent, error) {
	ev, err := a.st.GetEvent(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return activities.LoadedEvent{}, activities.ErrEventNotFound
	}
	if err != nil {
		return activities.LoadedEvent{}, err
	}
	return activities.LoadedEvent{
		Event:   activities.Event{ID: ev.ID, Seq: ev.Seq, Type: ev.Type, Envelope: ev.Envelope},
		Subject: ev.Subject,
	}, nil
}

func (a activityStore) Audit(ctx context.Context, e activities.AuditEntry) error {
	return a.st.Audit(ctx, store.AuditEntry{
		Action: e.Action, Outcome: e.Outcome, Actor: e.Actor, TargetType: e.TargetType,
		TargetID: e.TargetID, ErrorCode: e.ErrorCode, Metadata: e.Metadata,
	})
}

func (a activityStore) PurgeEvents(ctx context.Context, cutoff time.Time, limit int) (int64, error) {
	return a.st.PurgeEvents(ctx, cutoff, limit)
}

func (a activityStore) Envelopes(ctx context.Context, ids []string) (map[string][]byte, error) {
	return a.st.Envelopes(ctx, ids)
}

// signerAdapter signs deliveries with the newest key.
type signerAdapter struct {
	s      *signing.Signer
	issuer string
}

func (a signerAdapter) SignDelivery(c activities.Claims) (string, error) {
	return a.s.SignDelivery(signing.DeliveryClaims{
		Issuer: a.issuer, Audience: c.Audience, Subject: c.Subject, EventID: c.EventID,
		Attempt: c.Attempt, BodySHA256: c.BodySHA256, TTL: c.TTL,
	})
}
