package workflows

import (
	"testing"

	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"herald/activities"
)

// TestKeyStateIsRecordedUntilItLands: a Record of outcome rows, or of a
// pause or resume of the key (which the store keeps in paused_keys), is
// retried until the database takes it; any other audit row gives up after
// the small activities' 20 attempts. A pause written only in the run's
// memory would be lost with the run, and a resume that never reached
// paused_keys would pause the key's next run again.
func TestKeyStateIsRecordedUntilItLands(t *testing.T) {
	cases := []struct {
		name     string
		outcomes []activities.OutcomeUpdate
		audit    []activities.AuditEntry
		attempts int32 // 0: unlimited
	}{
		{"outcomes", []activities.OutcomeUpdate{{EventID: "e", Status: "delivered"}}, nil, 0},
		{"pause", nil, []activities.AuditEntry{{Action: AuditDeliveryPaused}}, 0},
		{"resume", nil, []activities.AuditEntry{{Action: AuditDeliveryResumed}}, 0},
		{"other audit", nil, []activities.AuditEntry{{Action: AuditDeliveryRedelivered}}, 20},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var suite testsuite.WorkflowTestSuite
			env := suite.NewTestWorkflowEnvironment()
			env.RegisterWorkflowWithOptions(func(ctx workflow.Context) (int32, error) {
				d := &delivery{fromLog: true}
				return workflow.GetActivityOptions(d.recordContext(ctx, c.outcomes, c.audit)).RetryPolicy.MaximumAttempts, nil
			}, workflow.RegisterOptions{Name: "options"})
			env.ExecuteWorkflow("options")
			var got int32
			if err := env.GetWorkflowResult(&got); err != nil {
				t.Fatal(err)
			}
			if got != c.attempts {
				t.Fatalf("Record's maximum attempts %d, want %d (0: until it lands)", got, c.attempts)
			}
		})
	}
}
