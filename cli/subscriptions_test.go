package cli

import (
	"strings"
	"testing"
	"time"

	"herald/internal/testkit"
	"herald/store"
)

// TestSubscriptionsCounts runs known deliveries and reads the per-state
// counts of starter subscriptions: billing has delivered, failed (held),
// queued (behind the failed head) and cancelled events; audit-log got
// everything delivered.
func TestSubscriptionsCounts(t *testing.T) {
	t.Parallel()
	h := startHerald(t)
	h.rejectIf(func(app, subject string, n int) bool {
		return app == "billing" && n == 1 && (subject == "k-f" || subject == "k-c")
	})
	h.publish([]string{"k-ok", "k-f"}, 1, 2)
	h.publish([]string{"k-c"}, 1)
	h.waitArrivals("billing", "k-ok", 1, 2)
	for _, k := range []string{"k-ok", "k-f"} {
		h.waitArrivals("audit-log", k, 1, 2)
	}
	h.waitArrivals("audit-log", "k-c", 1)
	testkit.Eventually(t, 30*time.Second, "k-c to fail", func() bool {
		st, ok := h.tryState(billingSub, "k-c")
		return ok && st.Head != nil && st.Status == "failed"
	})
	mustRun(t, h.env, "cancel", "--subscription", billingSub, "--subject", "k-c")

	want := map[string]store.DeliveryCounts{
		billingSub:  {Queued: 1, Delivered: 2, Failed: 1, Cancelled: 1},
		auditLogSub: {Delivered: 5},
	}
	var got []subscriptionJSON
	testkit.Eventually(t, 30*time.Second, "the outcome counts", func() bool {
		got = decode[[]subscriptionJSON](t, mustRun(t, h.env, "subscriptions", "--json").stdout)
		for _, s := range got {
			if s.Deliveries != want[s.ID] {
				return false
			}
		}
		return len(got) == 2
	})
	text := mustRun(t, h.env, "subscriptions").stdout
	wantContains(t, "subscriptions", text, "QUEUED", "DELIVERED", "FAILED", "CANCELLED", "EXPIRED")
	rows := map[string][]string{}
	for _, l := range strings.Split(text, "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			rows[f[0]] = f
		}
	}
	// ID STATE REASON SINCE(date time zone) QUEUED DELIVERED FAILED CANCELLED EXPIRED
	for id, w := range map[string]string{billingSub: "1 2 1 1 0", auditLogSub: "0 5 0 0 0"} {
		f := rows[id]
		if len(f) < 5 || strings.Join(f[len(f)-5:], " ") != w {
			t.Errorf("subscriptions row of %s: %q, want counts %s", id, f, w)
		}
	}
	billing := decode[[]subscriptionJSON](t, mustRun(t, h.env, "subscriptions", "--app", "billing", "--json").stdout)
	if len(billing) != 1 || billing[0].ID != billingSub || billing[0].Deliveries != want[billingSub] {
		t.Errorf("subscriptions --app billing --json: %+v", billing)
	}
}
