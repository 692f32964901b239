package workflows_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestSDKLocalActivityHeartbeatRatio pins the SDK's own deadline for a
// workflow task that waits on a local activity (80 % of the task's
// timeout), which localDeadline's 60 % budget and localGrace are set
// against (deliver.go). An SDK upgrade that moves it fails here, so that
// the budget is looked at again.
func TestSDKLocalActivityHeartbeatRatio(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "go.temporal.io/sdk").Output()
	if err != nil {
		t.Fatalf("find the Temporal SDK's source: %v", err)
	}
	src, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "internal", "internal_task_pollers.go"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`ratioToForceCompleteWorkflowTaskComplete\s*=\s*([0-9.]+)`).FindSubmatch(src)
	if m == nil {
		t.Fatal("the SDK no longer defines ratioToForceCompleteWorkflowTaskComplete: check localDeadline's comment and budget")
	}
	if string(m[1]) != "0.8" {
		t.Errorf("the SDK heartbeats a workflow task waiting on a local activity at %s of its timeout, not 0.8: check localDeadline's budget and localGrace", m[1])
	}
}
