package workflows_test

import (
	"path/filepath"
	"testing"

	"go.temporal.io/sdk/worker"

	"herald/workflows"
)

// TestReplayRecordedHistories replays every history in testdata, each
// recorded from a real run, against the current workflow code. A change that
// alters the commands the workflow issues breaks it: such a change needs
// workflow.GetVersion (as FirstAttemptChange, with a new recording beside
// the old), or a new recording
// that replaces the old one with a CHANGELOG entry and an upgrade note.
// Record with the command in e2e's recordHistory (docs/development.md).
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
			r := worker.NewWorkflowReplayer()
			workflows.RegisterWorkflows(r)
			if err := r.ReplayWorkflowHistoryFromJSONFile(nil, f); err != nil {
				t.Fatalf("replay %s: %v", f, err)
			}
		})
	}
}
