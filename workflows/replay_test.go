package workflows_test

import (
	"testing"

	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"herald/workflows"
)

// TestReplayRecordedHistory replays a history recorded from a real run (a
// key that failed with 422, held, and was redelivered by signal) against the
// current workflow code. A change that alters the commands the workflow
// issues breaks it: such a change needs workflow.GetVersion. Re-record with
// the command in e2e's recordHistory.
func TestReplayRecordedHistory(t *testing.T) {
	r := worker.NewWorkflowReplayer()
	r.RegisterWorkflowWithOptions(workflows.Delivery, workflow.RegisterOptions{Name: workflows.DeliveryWorkflowType})
	if err := r.ReplayWorkflowHistoryFromJSONFile(nil, "testdata/delivery-history.json"); err != nil {
		t.Fatalf("replay: %v", err)
	}
}
