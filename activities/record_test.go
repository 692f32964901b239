package activities

import (
	"context"
	"fmt"
	"testing"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"

	"herald/store"
)

// recordStore keeps what RecordWithAudit was given, with the activity info
// of the call.
type recordStore struct {
	Store
	audit []store.AuditEntry
	info  activity.Info
}

func (s *recordStore) RecordWithAudit(ctx context.Context, _, _ string, _ []store.OutcomeUpdate, audit []store.AuditEntry) error {
	s.audit, s.info = audit, activity.GetInfo(ctx)
	return nil
}

// TestRecordKeysAuditRowsByActivity: every audit row Record writes carries
// a once key made of the scheduled activity (run and activity id, which
// Temporal's retries of it share) and the row's position, so a retry after
// a lost answer writes nothing twice and no two rows of one call share one.
func TestRecordKeysAuditRowsByActivity(t *testing.T) {
	t.Parallel()
	st := &recordStore{}
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	a := &Activities{Store: st}
	env.RegisterActivity(a)
	in := RecordInput{SubscriptionID: "billing:contacts.person.updated@1", SubjectKey: "p1", Audit: []AuditEntry{
		{Action: store.ActionDeliveryFailed, TargetType: store.TargetDelivery, TargetID: "deliver:x"},
		{Action: store.ActionDeliveryCancelled, TargetType: store.TargetDelivery, TargetID: "deliver:x"},
	}}
	if _, err := env.ExecuteActivity(a.Record, in); err != nil {
		t.Fatal(err)
	}
	if len(st.audit) != 2 || st.info.WorkflowExecution.RunID == "" || st.info.ActivityID == "" {
		t.Fatalf("recorded %+v with info %+v", st.audit, st.info)
	}
	for i, e := range st.audit {
		want := fmt.Sprintf("record:%s/%s/%d", st.info.WorkflowExecution.RunID, st.info.ActivityID, i)
		if e.OnceKey != want || e.Action != in.Audit[i].Action {
			t.Errorf("row %d: once key %q action %q; want %q, %q", i, e.OnceKey, e.Action, want, in.Audit[i].Action)
		}
	}
}
