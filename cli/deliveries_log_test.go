package cli

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"herald/internal/testkit"
	"herald/store"
	"herald/workflows"
)

// TestDeliveriesFromLog lists deliveries from the event log with every
// filter and a total, after the keys' workflows are gone (terminated): the
// listing reads outcome rows, not running workflows. Pages follow each other
// to the total, an oversized --limit is clamped, and bad filters exit 2 with
// one line naming the flag.
func TestDeliveriesFromLog(t *testing.T) {
	t.Parallel()
	h := startHerald(t)
	h.rejectIf(func(app, subject string, n int) bool { return app == "billing" && subject == "k-bad" && n == 1 })
	start := time.Now().Add(-time.Second)
	h.publish([]string{"k-ok", "k-bad"}, 1, 2)
	h.waitArrivals("billing", "k-ok", 1, 2)
	h.waitArrivals("audit-log", "k-bad", 1, 2)
	h.waitArrivals("audit-log", "k-ok", 1, 2)
	testkit.Eventually(t, 30*time.Second, "billing's k-bad to fail", func() bool {
		return len(h.audit("delivery.failed", billingSub, "k-bad")) == 1
	})

	// The workflows of the keys that hold nothing end (the failed key's
	// holds on): the log still answers for them.
	tc := h.Dial()
	for _, id := range []string{workflows.DeliveryID(billingSub, "k-ok"), workflows.DeliveryID(auditLogSub, "k-ok"),
		workflows.DeliveryID(auditLogSub, "k-bad")} {
		err := tc.TerminateWorkflow(context.Background(), id, "", "test: the key's workflow is long gone")
		if err != nil && !strings.Contains(err.Error(), "not found") && !strings.Contains(err.Error(), "already completed") {
			t.Fatalf("terminate %s: %v", id, err)
		}
	}

	list := func(args ...string) deliveriesLogJSON {
		t.Helper()
		return decode[deliveriesLogJSON](t, mustRun(t, h.env, append([]string{"deliveries", "--log", "--json"}, args...)...).stdout)
	}
	keys := func(out deliveriesLogJSON) []string {
		var got []string
		for _, d := range out.Deliveries {
			got = append(got, d.Subscription+"|"+d.Subject+"|"+d.Status)
		}
		slices.Sort(got)
		return got
	}
	if out := list(); out.Total != 8 || !out.TotalExact || len(out.Deliveries) != 8 || out.NextPageToken != "" {
		t.Errorf("deliveries --log: total %d (exact %v), %d listed, next %q; want all 8", out.Total, out.TotalExact, len(out.Deliveries), out.NextPageToken)
	}
	failed := list("--status", "failed", "--app", "billing")
	if failed.Total != 1 || len(failed.Deliveries) != 1 {
		t.Fatalf("--status failed --app billing: %+v", failed)
	}
	if d := failed.Deliveries[0]; d.Subscription != billingSub || d.Subject != "k-bad" || d.Code != "schema_mismatch" ||
		!strings.Contains(d.LastError, "does not fit") || d.App != "billing" || d.EventType != "contacts.person.updated" {
		t.Errorf("the failed delivery: %+v", d)
	}
	// The failed key's second event waits behind its head: queued.
	if got := keys(list("--subscription", billingSub, "--subject", "k-bad")); !slices.Equal(got,
		[]string{billingSub + "|k-bad|failed", billingSub + "|k-bad|queued"}) {
		t.Errorf("--subscription --subject: %v", got)
	}
	// --status queued alone asks for the log (no running key has it).
	if out := decode[deliveriesLogJSON](t, mustRun(t, h.env, "deliveries", "--status", "queued", "--json").stdout); out.Total != 1 {
		t.Errorf("--status queued: %+v", out)
	}
	if out := list("--status", "delivered", "--app", "audit-log", "--type", "contacts.person.updated"); out.Total != 4 {
		t.Errorf("--status delivered --app audit-log: total %d, want 4", out.Total)
	}
	if out := list("--since", start.UTC().Format(time.RFC3339Nano), "--until", time.Now().UTC().Format(time.RFC3339Nano)); out.Total != 8 {
		t.Errorf("--since START --until NOW: total %d, want 8", out.Total)
	}
	if out := list("--until", start.UTC().Format(time.RFC3339Nano)); out.Total != 0 || len(out.Deliveries) != 0 {
		t.Errorf("--until before the first event: %+v", out)
	}

	// Pages of 3: the text names the next page's command line, which lists it.
	text := mustRun(t, h.env, "deliveries", "--log", "--since", "1h", "--limit", "3").stdout
	wantContains(t, "deliveries --log text", text, "QUEUED", "SUBSCRIPTION", "total: 8 (this page: 3)",
		"starter deliveries --log --since ", " --limit 3 --page-token ")
	var seen []string
	page := list("--limit", "3")
	for n := 0; ; n++ {
		if page.Total != 8 || n > 3 {
			t.Fatalf("page %d: total %d", n, page.Total)
		}
		for _, d := range page.Deliveries {
			seen = append(seen, d.Subscription+"|"+d.EventID)
		}
		if page.NextPageToken == "" {
			break
		}
		page = list("--limit", "3", "--page-token", page.NextPageToken)
	}
	if slices.Sort(seen); len(seen) != 8 || len(slices.Compact(seen)) != 8 {
		t.Errorf("pages listed %v, want 8 distinct deliveries", seen)
	}
	first := list("--limit", "3")
	r := run(t, h.env, "deliveries", "--log", "--status", "failed", "--page-token", first.NextPageToken)
	if r.code != ExitInvalid || !strings.Contains(r.stderr, "other filters") {
		t.Errorf("a page token of other filters: exit %d, stderr %q", r.code, r.stderr)
	}

	// An oversized --limit is clamped, and said so.
	r = run(t, h.env, "deliveries", "--log", "--limit", "50000", "--json")
	if out := decode[deliveriesLogJSON](t, r.stdout); r.code != ExitOK || out.Limit != store.MaxDeliveryLimit ||
		!strings.Contains(r.stderr, "clamped to 1000") {
		t.Errorf("--limit 50000: exit %d, limit %d, stderr %q", r.code, out.Limit, r.stderr)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--status", "stuck", "--log"}, `--status "stuck" is not a status of the log`},
		{[]string{"--status", "retrying", "--subject", "k"}, `--status "retrying" is not a status of the log`},
		{[]string{"--since", "yesterday"}, `--since "yesterday" is neither`},
		{[]string{"--since", "1h", "--until", "2h"}, "--since ("},
		{[]string{"--log", "--app", "Billing"}, `--app "Billing" is not an app id`},
		{[]string{"--log", "--subscription", "billing"}, `--subscription "billing" is not a subscription id`},
		{[]string{"--log", "--type", "contacts"}, `--type "contacts" is not an event type`},
		{[]string{"--log", "--limit", "0"}, "--limit must be at least 1"},
		{[]string{"--log", "--page-token", "garbage"}, `--page-token "garbage" is not a page token`},
		{[]string{"--subject", strings.Repeat("k", 201)}, "--subject is longer than 200 bytes"},
	} {
		r := run(t, h.env, append([]string{"deliveries"}, c.args...)...)
		if r.code != ExitInvalid || !strings.Contains(r.stderr, c.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("deliveries %v: exit %d, stderr %q; want 2 and one line with %q", c.args, r.code, r.stderr, c.want)
		}
	}
}
