package workflows_test

import (
	"os"
	"path/filepath"
	"testing"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"herald/workflows"
)

// TestReplayRecordedHistories replays every history in testdata, each
// recorded from a real run, against the current workflow code. A change that
// alters the commands the workflow issues breaks it: such a change needs
// workflow.GetVersion (as FirstAttemptChange, with a new recording beside
// the old), or a new recording
// that replaces the old one with a CHANGELOG entry and an upgrade note.
// Record with the command in e2e's recordHistory (docs/development.md).
//
// Each history replays under its key's own workflow id, worked out from
// its input: since QueueFromLogVersion a run whose id is not its key's
// does nothing.
func TestReplayRecordedHistories(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/*.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no recorded histories in testdata")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			file, err := os.Open(f)
			if err != nil {
				t.Fatal(err)
			}
			defer file.Close()
			h, err := client.HistoryFromJSON(file, client.HistoryJSONOptions{})
			if err != nil {
				t.Fatalf("read %s: %v", f, err)
			}
			var p workflows.Params
			input := h.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes().GetInput()
			if err := converter.GetDefaultDataConverter().FromPayloads(input, &p); err != nil {
				t.Fatalf("input of %s: %v", f, err)
			}
			r := worker.NewWorkflowReplayer()
			workflows.RegisterWorkflows(r)
			if err := r.ReplayWorkflowHistoryWithOptions(nil, h, worker.ReplayWorkflowHistoryOptions{
				OriginalExecution: workflow.Execution{ID: workflows.DeliveryID(p.SubscriptionID, p.SubjectKey), RunID: "replay"},
			}); err != nil {
				t.Fatalf("replay %s: %v", f, err)
			}
		})
	}
}
