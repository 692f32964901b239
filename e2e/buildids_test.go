package e2e_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"

	"herald/internal/testkit"
	"herald/internal/testkit/system"
	"herald/workflows"
)

// TestStartedRunKeepsItsBuildIDs: a run the relay starts eagerly for a new
// key carries BuildIds, and the worker that completes its first workflow
// task is the one they name: after the task, with the run waiting idle,
// BuildIds are exactly what the start set and the task's reset point names
// the worker's build id. The server therefore changed nothing in them,
// and wrote the open run's visibility record once, at its start. A worker
// stamping another id (the SDK's own checksum of the executable, had the
// service not set it) would have added a third id and a second write.
func TestStartedRunKeepsItsBuildIDs(t *testing.T) {
	t.Parallel()
	s := system.Start(t)
	buildID := s.Svc.Relay.BuildID
	if len(buildID) != 32 {
		t.Fatalf("the relay's build id is %q, want the executable's (32 hex digits)", buildID)
	}
	c, id := oneEventKey(t, s, "build-ids")
	want := []string{"unversioned", "unversioned:" + buildID}
	// The start carried them (the server would write the same list at the
	// first task: only the start's event tells the two apart).
	it := c.GetWorkflowHistory(context.Background(), id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	first, err := it.Next()
	if err != nil {
		t.Fatal(err)
	}
	var started []string
	if p, ok := first.GetWorkflowExecutionStartedEventAttributes().GetSearchAttributes().GetIndexedFields()[workflows.SABuildIDs.GetName()]; ok {
		if err := converter.GetDefaultDataConverter().FromPayload(p, &started); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(started, want) {
		t.Fatalf("the run started with BuildIds %v, want %v", started, want)
	}
	testkit.EventuallyValue(t, 30*time.Second, "the key's run to wait idle with the start's BuildIds", func() (string, bool) {
		d, err := c.DescribeWorkflow(context.Background(), id, "")
		if err != nil {
			return err.Error(), false
		}
		got, _ := d.TypedSearchAttributes.GetKeywordList(workflows.SABuildIDs)
		// The reset point of the first completed task names its worker.
		points := d.RawResponse.GetWorkflowExecutionInfo().GetAutoResetPoints().GetPoints()
		stamp := ""
		if len(points) == 1 {
			stamp = points[0].GetBuildId()
		}
		return fmt.Sprintf("BuildIds %v, reset points %v, status %v", got, points, d.Status),
			d.Status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING && stamp == buildID && slices.Equal(got, want)
	})
}
