package workflows_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
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
			h, p := readHistory(t, f)
			replay(t, h, p)
		})
	}
}

// TestReplayOlderWorkersRunsOfRelayStartedKeys: during a rolling upgrade an
// upgraded relay starts a key's run with NoMarkerVersion or
// BareStartVersion in its input (a bare start has no search attributes: an
// older worker upserts the identity ones at the run's start), and a
// worker built before it, which ignores the field, may run it: it records
// the marker of the newest version it knows and behaves as that version.
// Every recorded history with a first-attempt marker, its input given
// either version as such a relay would have, replays as recorded: the
// marker decides, not the input.
func TestReplayOlderWorkersRunsOfRelayStartedKeys(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/*.json")
	if err != nil {
		t.Fatal(err)
	}
	versions := map[string]bool{}
	for _, f := range files {
		h, p := readHistory(t, f)
		version, marked := firstAttemptMarker(t, h)
		if !marked || p.Version != 0 {
			continue
		}
		versions[version] = true
		for _, v := range []int{workflows.NoMarkerVersion, workflows.BareStartVersion} {
			t.Run(fmt.Sprintf("%s/input-version-%d", filepath.Base(f), v), func(t *testing.T) {
				h, p := readHistory(t, f)
				p.Version = v
				input, err := converter.GetDefaultDataConverter().ToPayloads(p)
				if err != nil {
					t.Fatal(err)
				}
				h.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes().Input = input
				replay(t, h, p)
			})
		}
	}
	// Older workers recorded versions 1, 2 and 3: each is covered.
	for _, v := range []string{"1", "2", "3"} {
		if !versions[v] {
			t.Errorf("no recorded history at first-attempt version %s", v)
		}
	}
}

// TestReplayOlderWorkersRunsOfHintedKeys: during a rolling upgrade an
// upgraded relay starts a key's run with a hint in its input (Params.Quiet,
// Params.Busy), and a worker built before it, which ignores the field, may
// read the run's start: its StartActivity result hands back no hint, and
// the run waits idle or ends as that worker decided. Every recorded history
// whose input has no hint, given each hint as such a relay would have,
// replays as recorded: the recorded result decides, not the input.
func TestReplayOlderWorkersRunsOfHintedKeys(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/*.json")
	if err != nil {
		t.Fatal(err)
	}
	tried := 0
	for _, f := range files {
		for _, hint := range []string{"quiet", "busy"} {
			h, p := readHistory(t, f)
			if p.Quiet || p.Busy {
				continue
			}
			tried++
			t.Run(filepath.Base(f)+"/"+hint, func(t *testing.T) {
				p.Quiet, p.Busy = hint == "quiet", hint == "busy"
				input, err := converter.GetDefaultDataConverter().ToPayloads(p)
				if err != nil {
					t.Fatal(err)
				}
				h.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes().Input = input
				replay(t, h, p)
			})
		}
	}
	if tried == 0 {
		t.Fatal("no recorded history without a hint")
	}
}

// loadHistory reads a recorded history.
func loadHistory(t *testing.T, f string) *historypb.History {
	t.Helper()
	file, err := os.Open(f)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	h, err := client.HistoryFromJSON(file, client.HistoryJSONOptions{})
	if err != nil {
		t.Fatalf("read %s: %v", f, err)
	}
	return h
}

// readHistory reads a recorded history and its run's input.
func readHistory(t *testing.T, f string) (*historypb.History, workflows.Params) {
	t.Helper()
	h := loadHistory(t, f)
	var p workflows.Params
	input := h.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes().GetInput()
	if err := converter.GetDefaultDataConverter().FromPayloads(input, &p); err != nil {
		t.Fatalf("input of %s: %v", f, err)
	}
	return h, p
}

// firstAttemptMarker is the version a history's FirstAttemptChange marker
// records, if it has one.
func firstAttemptMarker(t *testing.T, h *historypb.History) (string, bool) {
	t.Helper()
	dc := converter.GetDefaultDataConverter()
	for _, e := range h.GetEvents() {
		m := e.GetMarkerRecordedEventAttributes()
		if e.GetEventType() != enumspb.EVENT_TYPE_MARKER_RECORDED || m.GetMarkerName() != "Version" {
			continue
		}
		var change string
		var version int
		if err := dc.FromPayloads(m.GetDetails()["change-id"], &change); err != nil {
			t.Fatal(err)
		}
		if err := dc.FromPayloads(m.GetDetails()["version"], &version); err != nil {
			t.Fatal(err)
		}
		if change == workflows.FirstAttemptChange {
			return strconv.Itoa(version), true
		}
	}
	return "", false
}

// replay replays h under its key's own workflow id.
func replay(t *testing.T, h *historypb.History, p workflows.Params) {
	t.Helper()
	r := worker.NewWorkflowReplayer()
	workflows.RegisterWorkflows(r)
	if err := r.ReplayWorkflowHistoryWithOptions(nil, h, worker.ReplayWorkflowHistoryOptions{
		OriginalExecution: workflow.Execution{ID: workflows.DeliveryID(p.SubscriptionID, p.SubjectKey), RunID: "replay"},
	}); err != nil {
		t.Fatalf("replay: %v", err)
	}
}

// TestReplayOlderWorkersGivenNewerResults: during a rolling upgrade an
// upgraded worker's Deliver may answer a result that a workflow worker
// built before it does not know: keyPaused on an inactive result (the
// key's paused_keys row, RowsPauseChange), retryAfter on a limited one (an
// app held back, SlowAppChange). The older worker acts on the rest of the
// result as it always did (a database that did not answer; the next
// execution at once) and records that. Every recorded history with such a
// result, given the new field, replays as recorded: the new code asks its
// version only on such a result, and the history has no marker there.
func TestReplayOlderWorkersGivenNewerResults(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/*.json")
	if err != nil {
		t.Fatal(err)
	}
	patches := map[string]func(map[string]any) bool{
		"keyPaused": func(r map[string]any) bool {
			if r["outcome"] != "inactive" || r["subscriptionState"] != "unknown" {
				return false
			}
			r["keyPaused"], r["subscriptionReason"] = true, "key_paused"
			return true
		},
		"retryAfter": func(r map[string]any) bool {
			if r["outcome"] != "limited" {
				return false
			}
			r["retryAfter"] = float64(10 * time.Second)
			return true
		},
	}
	tried := map[string]int{}
	for _, f := range files {
		for name, patch := range patches {
			h, p := readHistory(t, f)
			if !patchDeliverResults(t, h, patch) {
				continue
			}
			tried[name]++
			t.Run(filepath.Base(f)+"/"+name, func(t *testing.T) { replay(t, h, p) })
		}
	}
	for name := range patches {
		if tried[name] == 0 {
			t.Errorf("no recorded history has a Deliver result to give %s", name)
		}
	}
}

// patchDeliverResults applies patch to every Deliver result of h (regular
// activities' and local activities' markers) that decodes as one, and
// reports whether it changed any.
func patchDeliverResults(t *testing.T, h *historypb.History, patch func(map[string]any) bool) bool {
	t.Helper()
	changed := false
	edit := func(pl *commonpb.Payload) {
		var r map[string]any
		if json.Unmarshal(pl.GetData(), &r) != nil || r == nil || r["outcome"] == nil || !patch(r) {
			return
		}
		data, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		pl.Data, changed = data, true
	}
	for _, e := range h.GetEvents() {
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
			for _, pl := range e.GetActivityTaskCompletedEventAttributes().GetResult().GetPayloads() {
				edit(pl)
			}
		case enumspb.EVENT_TYPE_MARKER_RECORDED:
			if res, ok := e.GetMarkerRecordedEventAttributes().GetDetails()["result"]; ok {
				for _, pl := range res.GetPayloads() {
					edit(pl)
				}
			}
		}
	}
	return changed
}
