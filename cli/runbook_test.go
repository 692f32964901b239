package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"herald/config"
	"herald/internal/testenv"
	"herald/internal/testkit"
	"herald/publish"
	"herald/store"
	"herald/workflows"
)

// TestRunbookTemporalCommands runs the runbook's (docs/runbook.md) temporal command lines
// exactly as printed (only --address and --namespace added) with the pinned
// Temporal CLI: the state query shows a failed key, the redeliver signal
// recovers it, and the batch cancel skips the failed head of another key.
func TestRunbookTemporalCommands(t *testing.T) {
	t.Parallel()
	lines := runbookCommands(t)
	h := startHerald(t)
	temporalBin := testenv.TemporalCLI(t)
	h.rejectIf(func(app, subject string, n int) bool {
		return app == "billing" && n == 1 && (subject == "person-42" || subject == "person-43")
	})
	h.publish([]string{"person-42", "person-43"}, 1, 2, 3)
	h.waitListed([]string{"person-42", "person-43"}, "--status", "failed", "--subscription", billingSub)

	out := h.runTemporal(temporalBin, findCommand(t, lines, "temporal workflow query", "--type state"))
	wantContains(t, "temporal workflow query", out, `"status":"failed"`, `"code":"schema_mismatch"`, `"subject":"person-42"`)

	h.rejectIf(func(app, subject string, n int) bool {
		return app == "billing" && n == 1 && subject == "person-43"
	})
	line := findCommand(t, lines, "temporal workflow signal --workflow-id", "--name redeliver", `--input '{"actor"`)
	sig := decodeInput[workflows.RedeliverSignal](t, line)
	h.runTemporal(temporalBin, line)
	h.waitArrivals("billing", "person-42", 1, 2, 3)
	h.wantAudit(workflows.AuditDeliveryRedelivered, billingSub, "person-42", sig.Actor, sig.Reason)

	h.waitListed([]string{"person-43"}, "--status", "failed", "--subscription", billingSub)
	line = findCommand(t, lines, "temporal workflow signal --query", "--name cancel")
	cancel := decodeInput[workflows.CancelSignal](t, line)
	h.runTemporal(temporalBin, line)
	h.waitArrivals("billing", "person-43", 2, 3)
	h.wantAudit(workflows.AuditDeliveryCancelled, billingSub, "person-43", cancel.Actor, cancel.Reason)
}

// runbookCommands returns the lines of the runbook's code blocks that start
// with "temporal ".
func runbookCommands(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(testenv.RepoRoot(), "docs", "runbook.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	inBlock := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "```"):
			inBlock = !inBlock
		case inBlock && strings.HasPrefix(line, "temporal "):
			out = append(out, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// findCommand returns the first line that contains every part.
func findCommand(t *testing.T, lines []string, parts ...string) string {
	t.Helper()
next:
	for _, l := range lines {
		for _, p := range parts {
			if !strings.Contains(l, p) {
				continue next
			}
		}
		return l
	}
	t.Fatalf("the runbook has no command line with %q", parts)
	return ""
}

// decodeInput decodes the single-quoted --input of a command line.
func decodeInput[T any](t *testing.T, line string) T {
	t.Helper()
	_, rest, ok := strings.Cut(line, "--input '")
	input, _, ok2 := strings.Cut(rest, "'")
	var v T
	if !ok || !ok2 {
		t.Fatalf("no --input '...' in %s", line)
	}
	if err := json.Unmarshal([]byte(input), &v); err != nil {
		t.Fatalf("--input of %s: %v", line, err)
	}
	return v
}

// runTemporal runs a command line through the shell with the pinned
// temporal binary first on PATH, against the test namespace, and returns its
// output.
func (h *herald) runTemporal(bin, line string) string {
	h.t.Helper()
	cmd := exec.Command("bash", "-c", line+" --address "+shellQuote(h.Cfg.TemporalAddress)+" --namespace "+shellQuote(h.Cfg.TemporalNamespace))
	cmd.Env = append(os.Environ(),
		"PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"HOME="+h.t.TempDir(), // no operator's CLI config file
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		h.t.Fatalf("%s: %v\n%s", line, err, out)
	}
	return string(out)
}

// TestRunbookSignalWithStart runs the runbook's signal-with-start line, as
// printed, for an event of a key whose workflow has completed: the workflow
// starts again and delivers the event again.
func TestRunbookSignalWithStart(t *testing.T) {
	t.Parallel()
	line := findCommand(t, runbookCommands(t), "temporal workflow signal-with-start", "--signal-name redeliver")
	sig := decodeFlag[workflows.RedeliverSignal](t, line, "--signal-input")
	h := startHerald(t, func(c *config.Worker) { c.IdleTimeout = time.Second })
	temporalBin := testenv.TemporalCLI(t)
	if _, err := h.Publisher.Publish(context.Background(), publish.Request{ID: sig.EventID,
		App: "contacts", Type: "contacts.person.updated", Version: 1, Subject: "person-42", Data: json.RawMessage(`{"n":1}`)}); err != nil {
		t.Fatal(err)
	}
	h.waitArrivals("billing", "person-42", 1)
	h.waitClosed(workflows.DeliveryID(billingSub, "person-42"))

	h.runTemporal(temporalBin, line)
	h.waitArrivals("billing", "person-42", 1, 1)
	h.wantAudit(workflows.AuditDeliveryRedelivered, billingSub, "person-42", sig.Actor, sig.Reason)
	if got := h.Sub.Ns("audit-log", "person-42"); len(got) != 1 {
		t.Errorf("audit-log received %v, want the event once", got)
	}
}

// decodeFlag decodes the single-quoted JSON value of flag in a command line.
func decodeFlag[T any](t *testing.T, line, flag string) T {
	t.Helper()
	_, rest, ok := strings.Cut(line, " "+flag+" '")
	value, _, ok2 := strings.Cut(rest, "'")
	var v T
	if !ok || !ok2 {
		t.Fatalf("no %s '...' in %s", flag, line)
	}
	if err := json.Unmarshal([]byte(value), &v); err != nil {
		t.Fatalf("%s of %s: %v", flag, line, err)
	}
	return v
}

// TestRunbookUpdateCommands runs each `temporal workflow update execute`
// line of the runbook, as printed, against one key (person-42) driven into
// the state each line is for: each answers that it changed the key, the key
// does what the line says, and the audit row carries the line's actor and
// reason.
func TestRunbookUpdateCommands(t *testing.T) {
	t.Parallel()
	lines := runbookCommands(t)
	update := func(parts ...string) (string, map[string]any) {
		line := findCommand(t, lines, append([]string{"temporal workflow update execute --workflow-id"}, parts...)...)
		return line, decodeInput[map[string]any](t, line)
	}
	pauseLine, _ := update("--name pause")
	resumeLine, _ := update("--name resume")
	skipLine, _ := update("--name cancel", `"reason":"bad event, skipped"`)
	cancelOneLine, cancelOne := update("--name cancel", `"eventId"`)
	cancelAllLine, _ := update("--name cancel", `"all":true`)
	againLine, again := update("--name redeliver", `"eventId"`)
	retryLine, _ := update("--name redeliver", `--input '{"actor"`)
	fixedID := cancelOne["eventId"].(string)
	if again["eventId"] != fixedID {
		t.Fatalf("the runbook's cancel and redeliver lines name different events: %v, %v", fixedID, again["eventId"])
	}

	h := startHerald(t)
	temporalBin := testenv.TemporalCLI(t)
	const subject = "person-42"
	h.rejectIf(func(app, s string, n int) bool { return app == "billing" && s == subject && (n == 1 || n == 4) })
	h.publish([]string{subject}, 1)
	if _, err := h.Publisher.Publish(context.Background(), publish.Request{ID: fixedID,
		App: "contacts", Type: "contacts.person.updated", Version: 1, Subject: subject, Data: json.RawMessage(`{"n":2}`)}); err != nil {
		t.Fatal(err)
	}
	h.publish([]string{subject}, 3)
	testkit.Eventually(t, 30*time.Second, subject+" to fail with 2 and 3 queued", func() bool {
		st, ok := h.tryState(billingSub, subject)
		return ok && st.Status == workflows.StatusFailed && len(st.Queued) == 2
	})
	head := h.state(billingSub, subject).Head.EventID

	// Each line answers with what it changed.
	runUpdate := func(line string, want ...string) {
		t.Helper()
		out := h.runTemporal(temporalBin, line)
		wantContains(t, line, updateResult(t, out), append([]string{"changed:true"}, want...)...)
	}
	runUpdate(pauseLine, "status:paused")
	h.wantAuditReason(workflows.AuditDeliveryPaused, billingSub, subject, "alice", "investigating")
	runUpdate(cancelOneLine, "cancelled:["+fixedID+"]", "queued:2")
	h.wantAuditReason(workflows.AuditDeliveryCancelled, billingSub, subject, "alice", "sent by mistake")
	runUpdate(resumeLine, "status:failed")
	h.wantAuditReason(workflows.AuditDeliveryResumed, billingSub, subject, "alice", "done")
	runUpdate(skipLine, "cancelled:["+head+"]")
	h.wantAuditReason(workflows.AuditDeliveryCancelled, billingSub, subject, "alice", "bad event, skipped")
	h.waitArrivals("billing", subject, 3)

	// The event cancelled above is delivered again.
	runUpdate(againLine, "requeued:["+fixedID+"]")
	h.wantAuditReason(workflows.AuditDeliveryRedelivered, billingSub, subject, "alice", "subscriber lost it")
	h.waitArrivals("billing", subject, 3, 2)

	// A failed head, retried after the fix.
	h.publish([]string{subject}, 4)
	testkit.Eventually(t, 30*time.Second, subject+" to fail on 4", func() bool { return h.state(billingSub, subject).Status == workflows.StatusFailed })
	h.rejectIf(nil)
	runUpdate(retryLine, "status:delivering")
	h.wantAuditReason(workflows.AuditDeliveryRedelivered, billingSub, subject, "alice", "handler fixed")
	h.waitArrivals("billing", subject, 3, 2, 4)

	// Everything queued, cancelled while the key is held.
	mustRun(t, h.env, "pause", "--subscription", billingSub, "--subject", subject)
	h.publish([]string{subject}, 5, 6)
	testkit.Eventually(t, 10*time.Second, "5 and 6 to queue", func() bool { return len(h.state(billingSub, subject).Queued) == 1 })
	runUpdate(cancelAllLine, "queued:0")
	h.wantAuditReason(workflows.AuditDeliveryCancelled, billingSub, subject, "alice", "person deleted")
	mustRun(t, h.env, "resume", "--subscription", billingSub, "--subject", subject)
	if st := h.state(billingSub, subject); st.Head != nil || st.Counters.Cancelled != 4 {
		t.Errorf("after cancel all: head %+v, %d cancelled; want none queued and 4 cancelled", st.Head, st.Counters.Cancelled)
	}
	if got := h.Sub.Ns("billing", subject); !slices.Equal(got, []int{3, 2, 4}) {
		t.Errorf("billing received %v, want [3 2 4]", got)
	}
}

// updateResult is the Result line of the output of temporal workflow
// update execute: the OpResult as the CLI prints it,
// "map[changed:true queued:2 status:failed]".
func updateResult(t *testing.T, out string) string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "Result" {
			return strings.Join(f[1:], " ")
		}
	}
	t.Fatalf("no Result in the update's output:\n%s", out)
	return ""
}

// wantAuditReason waits for exactly one allowed audit row of action about
// the key with this reason, written by actor.
func (h *herald) wantAuditReason(action, subscription, subject, actor, reason string) {
	h.t.Helper()
	var found []store.AuditRow
	testkit.Eventually(h.t, 10*time.Second, fmt.Sprintf("a %s audit row with reason %q", action, reason), func() bool {
		found = found[:0]
		for _, r := range h.audit(action, subscription, subject) {
			var meta struct {
				Reason string `json:"reason"`
			}
			if json.Unmarshal(r.Metadata, &meta) == nil && meta.Reason == reason {
				found = append(found, r)
			}
		}
		return len(found) > 0
	})
	if len(found) != 1 || found[0].Outcome != store.OutcomeAllowed || found[0].Actor != actor {
		h.t.Fatalf("%s audit rows with reason %q: %+v; want one, allowed, by %s", action, reason, found, actor)
	}
}

// tryState is the key's state, or false while its workflow is not there.
func (h *herald) tryState(subscription, subject string) (workflows.State, bool) {
	h.t.Helper()
	r := run(h.t, h.env, "inspect", "--json", "--subscription", subscription, "--subject", subject)
	if r.code != ExitOK {
		return workflows.State{}, false
	}
	return decode[workflows.State](h.t, r.stdout), true
}
