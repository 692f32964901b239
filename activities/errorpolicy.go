package activities

import (
	"context"
	"errors"

	"herald/store"
	"herald/workflows/payload"
)

// ErrorPolicy is a subscription's error policy (docs/design.md#error-policy):
// what its keys do with an event that failed for good, and how many
// attempts an event gets. It travels in workflow histories (the result of
// the ErrorPolicy and DeliveryStart local activities), so its encoding is
// the workflows' (payload.ErrorPolicy), converted from the store's here.
type ErrorPolicy = payload.ErrorPolicy

// Error policies (the manifest's onFailure).
const (
	OnFailureHold = "hold"
	OnFailureSkip = "skip"
)

// CodeSkippedAfterFailure is the code of an event settled (outcome
// cancelled) because it failed for good under onFailure skip.
const CodeSkippedAfterFailure = store.CodeSkippedAfterFailure

// SettledSkipped is the outcome the Observer is told of for a skipped event.
const SettledSkipped = "skipped"

// maxAttempts is how many attempts the input's events get.
func (in DeliverInput) maxAttempts() int {
	if in.MaxAttempts > 0 {
		return min(in.MaxAttempts, len(in.RetrySchedule)+1)
	}
	return len(in.RetrySchedule) + 1
}

// ErrorPolicy reads a subscription's error policy from its row: the
// database decides, never a workflow's input. A subscription that no longer
// exists holds (it receives nothing more anyway).
func (a *Activities) ErrorPolicy(ctx context.Context, subscriptionID string) (ErrorPolicy, error) {
	return policyOrHold(a.Store.SubscriptionPolicy(ctx, subscriptionID))
}

// policyOrHold is the error policy a read of a subscription's row gives: a
// subscription that no longer exists (store.ErrNotFound) holds.
func policyOrHold(p store.Policy, err error) (ErrorPolicy, error) {
	if errors.Is(err, store.ErrNotFound) {
		return ErrorPolicy{OnFailure: OnFailureHold}, nil
	}
	return ErrorPolicy(p), err
}
