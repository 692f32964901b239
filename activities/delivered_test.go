package activities

import (
	"testing"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/workflow"

	"herald/store"
)

// TestDeliveredEarlier: an event settled as delivered counts as this
// execution's own delivery only when an earlier attempt at the execution
// made it; a local activity knows that by the run recorded with it.
func TestDeliveredEarlier(t *testing.T) {
	info := func(attempt int32) activity.Info {
		return activity.Info{Attempt: attempt, WorkflowExecution: workflow.Execution{ID: "deliver:s:k", RunID: "run-2"}}
	}
	for _, tc := range []struct {
		name   string
		info   activity.Info
		in     DeliverInput
		stored store.BatchEvent
		want   bool
	}{
		{"first attempt of a regular activity: a re-sent event", info(1), DeliverInput{}, store.BatchEvent{DeliveredRun: "run-2"}, false},
		{"a retry of a regular activity", info(2), DeliverInput{}, store.BatchEvent{}, true},
		{"after a lost local attempt", info(1), DeliverInput{EarlierAttemptLost: true}, store.BatchEvent{}, true},
		{"a local activity run again by its run", info(1), DeliverInput{Local: true}, store.BatchEvent{DeliveredRun: "run-2"}, true},
		{"a local activity, delivered by an earlier run", info(1), DeliverInput{Local: true}, store.BatchEvent{DeliveredRun: "run-1"}, false},
		{"a local activity, delivered before runs were recorded", info(1), DeliverInput{Local: true}, store.BatchEvent{}, false},
	} {
		if got := deliveredEarlier(tc.info, tc.in, tc.stored); got != tc.want {
			t.Errorf("%s: deliveredEarlier = %v, want %v", tc.name, got, tc.want)
		}
	}
}
