package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"herald/config"
	"herald/internal/testenv"
	"herald/publish"
	"herald/workflows"
)

// TestRunbookTemporalCommands runs the README runbook's temporal command lines
// exactly as printed (only --address and --namespace added) with the pinned
// Temporal CLI: the state query shows a failed key, the redeliver signal
// recovers it, and the batch cancel skips the failed head of another key.
func TestRunbookTemporalCommands(t *testing.T) {
	t.Parallel()
	lines := runbookCommands(t)
	h := startHerald(t)
	temporalBin := testenv.TemporalCLI(t)
	h.sub.setReject(func(app, subject string, n int) bool {
		return app == "billing" && n == 1 && (subject == "person-42" || subject == "person-43")
	})
	h.publish([]string{"person-42", "person-43"}, 1, 2, 3)
	h.waitListed([]string{"person-42", "person-43"}, "--status", "failed", "--subscription", billingSub)

	out := h.runTemporal(temporalBin, findCommand(t, lines, "temporal workflow query", "--type state"))
	wantContains(t, "temporal workflow query", out, `"status":"failed"`, `"code":"schema_mismatch"`, `"subject":"person-42"`)

	h.sub.setReject(func(app, subject string, n int) bool {
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
	f, err := os.Open(filepath.Join(testenv.RepoRoot(), "README.md"))
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
	cmd := exec.Command("bash", "-c", line+" --address "+shellQuote(h.address)+" --namespace "+shellQuote(h.namespace))
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
	if _, err := h.publisher.Publish(context.Background(), publish.Request{ID: sig.EventID,
		App: "contacts", Type: "contacts.person.updated", Version: 1, Subject: "person-42", Data: json.RawMessage(`{"n":1}`)}); err != nil {
		t.Fatal(err)
	}
	h.waitArrivals("billing", "person-42", 1)
	h.waitClosed(workflows.DeliveryID(billingSub, "person-42"))

	h.runTemporal(temporalBin, line)
	h.waitArrivals("billing", "person-42", 1, 1)
	h.wantAudit(workflows.AuditDeliveryRedelivered, billingSub, "person-42", sig.Actor, sig.Reason)
	if got := h.sub.arrivals("audit-log", "person-42"); len(got) != 1 {
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
