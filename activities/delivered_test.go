package activities

import (
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/workflow"

	"herald/store"
)

// TestDeliveredEarlier: an event settled as delivered counts as this
// execution's own delivery only when an earlier attempt at the execution
// made it; after a local execution, the execution recorded with the
// delivery tells.
func TestDeliveredEarlier(t *testing.T) {
	info := func(attempt int32) activity.Info {
		return activity.Info{Attempt: attempt, WorkflowExecution: workflow.Execution{ID: "deliver:s:k", RunID: "run-2"}}
	}
	head := []Event{{ID: "e1", Seq: 1}, {ID: "e2", Seq: 2}}
	local := DeliverInput{Local: true, Events: head}
	for _, tc := range []struct {
		name   string
		info   activity.Info
		in     DeliverInput
		stored store.BatchEvent
		want   bool
	}{
		{"a regular activity's first attempt: a re-sent event", info(1), DeliverInput{Events: head}, store.BatchEvent{}, false},
		{"a regular activity's first attempt, delivered by a local one before", info(1), DeliverInput{Events: head},
			store.BatchEvent{DeliveredBy: "run-2/e1"}, false},
		{"a retry of a regular activity", info(2), DeliverInput{Events: head}, store.BatchEvent{}, true},
		{"the first attempt that POSTs after one that waited for NotBefore", info(2),
			DeliverInput{Events: head, NotBefore: time.Unix(1, 0)}, store.BatchEvent{}, false},
		{"a retry after the attempt that waited", info(3), DeliverInput{Events: head, NotBefore: time.Unix(1, 0)},
			store.BatchEvent{}, true},
		{"a local execution run again", info(1), local, store.BatchEvent{DeliveredBy: "run-2/e1"}, true},
		{"a local execution, delivered by another of its run (a forged re-send)", info(1), local,
			store.BatchEvent{DeliveredBy: "run-2/e0"}, false},
		{"a local execution, delivered by an earlier run", info(1), local, store.BatchEvent{DeliveredBy: "run-1/e1"}, false},
		{"a local execution, delivered by a regular activity", info(1), local, store.BatchEvent{}, false},
		{"the regular activity after a lost local one", info(1), DeliverInput{Events: head, LocalHead: "e1"},
			store.BatchEvent{DeliveredBy: "run-2/e1"}, true},
		{"the regular activity after a lost local one, delivered by another", info(1), DeliverInput{Events: head, LocalHead: "e1"},
			store.BatchEvent{DeliveredBy: "run-2/e0"}, false},
		{"a local execution after continue-as-new, delivered by the run before", info(1),
			DeliverInput{Local: true, Events: head, PrevRun: "run-1"}, store.BatchEvent{DeliveredBy: "run-1/e1"}, true},
		{"a regular activity after continue-as-new, delivered by the run before", info(1),
			DeliverInput{Events: head, LocalHead: "e1", PrevRun: "run-1"}, store.BatchEvent{DeliveredBy: "run-1/e1"}, true},
	} {
		if got := deliveredEarlier(tc.info, tc.in, tc.stored); got != tc.want {
			t.Errorf("%s: deliveredEarlier = %v, want %v", tc.name, got, tc.want)
		}
	}
}
